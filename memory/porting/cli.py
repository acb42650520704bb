"""``agentgw memory export|import|search|show``: memory from the shell.

``gateway/cli.py`` calls ``add_commands``; heavy imports wait inside the handlers.
``export``, ``search`` and ``show`` only read: they run beside a running
gateway. ``import`` writes memory and the index files a running gateway holds,
so it takes the gateway's locks and, beside a running gateway, stops with a
clear message (as ``agentgw upkeep run`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.config import Config, load_config

if TYPE_CHECKING:
    from memory.porting.importer import ImportReport
    from memory.service import MemoryService

# A search's text output cuts each line's text here (--json carries it whole).
SNIPPET = 100


def add_subcommands(
    memory_sub: argparse._SubParsersAction[argparse.ArgumentParser],
    with_config: Callable[[argparse.ArgumentParser], None],
) -> None:
    """``agentgw memory export|import|search|show`` (memory/cli.py makes ``memory``)."""
    export = memory_sub.add_parser(
        "export", help="readable Markdown files and a lossless agentgw.jsonl per person"
    )
    export.add_argument("--out", type=Path, required=True, help="the folder to write into")
    export.add_argument(
        "--person", type=int, default=None, help="only this person (default: everyone)"
    )
    imported = memory_sub.add_parser(
        "import", help="an agentgw export, an OpenClaw workspace, a ChatGPT or Claude export"
    )
    imported.add_argument("path", type=Path, help="a file or a folder")
    imported.add_argument(
        "--person",
        type=int,
        default=None,
        help="whose memory (default: the store's one person, or a new one in an empty store)",
    )
    imported.add_argument(
        "--format",
        dest="kind",
        choices=("auto", "agentgw", "openclaw", "chatgpt", "claude"),
        default="auto",
        help="the source's format (default: auto, from the content)",
    )
    searched = memory_sub.add_parser("search", help="ranked candidates, short, with ids")
    searched.add_argument("query", help="what to look for")
    searched.add_argument(
        "--person", type=int, default=None, help="whose memory (default: the one person)"
    )
    searched.add_argument(
        "--index", action="store_true", help="ids, scores and dates only (default: with text)"
    )
    searched.add_argument("--limit", type=int, default=10, help="at most this many (default 10)")
    shown = memory_sub.add_parser(
        "show", help="one item with its provenance, versions and memory tree path"
    )
    shown.add_argument("item_id", type=int, help="the item's id, as searched")
    for parser in (export, imported, searched, shown):
        with_config(parser)
        parser.add_argument(
            "--json", action="store_true", help="print JSON instead of text (default: text)"
        )
    export.set_defaults(func=cmd_export)
    imported.set_defaults(func=cmd_import)
    searched.set_defaults(func=cmd_search)
    shown.set_defaults(func=cmd_show)


def _say(text: str, *, err: bool = False) -> None:
    (sys.stderr if err else sys.stdout).write(text + "\n")


def _config(args: argparse.Namespace) -> Config:
    path: Path | None = getattr(args, "config", None)
    return load_config(path)


def cmd_export(args: argparse.Namespace) -> int:
    config = _config(args)
    done = asyncio.run(_export(config, args.out, args.person))
    if args.json:
        _say(
            json.dumps(
                [
                    {"person_id": d[0], "folder": str(d[1]), "files": d[2], "records": d[3]}
                    for d in done
                ],
                indent=2,
            )
        )
    else:
        for person_id, folder, files, records in done:
            _say(f"person {person_id}: {len(files)} files, {records} records in {folder}")
    return 0


async def _export(
    config: Config, out: Path, person_id: int | None
) -> list[tuple[int, str, list[str], int]]:
    from gateway.store import Store
    from memory.porting.export import export_person
    from memory.porting.records import person_ids

    async with Store(config.database_url, echo=config.store.echo) as store:
        ids = [person_id] if person_id is not None else await store.read(person_ids)
        done = []
        for pid in ids:
            exported = await export_person(store, pid, out, config.zone)
            done.append((pid, str(exported.folder), list(exported.files), exported.records))
        return done


def cmd_import(args: argparse.Namespace) -> int:
    config = _config(args)
    report = asyncio.run(_import(config, args.path, args.kind, args.person, quiet=args.json))
    for warning in report.warnings:
        _say(f"warning: {warning}", err=True)
    if args.json:
        _say(json.dumps(report.as_json(), indent=2))
        return 0
    if report.format == "agentgw":
        rows = ", ".join(f"{k} {v}" for k, v in report.rows_added.items()) or "nothing new"
        _say(f"imported agentgw export for person {report.person_id}: {rows}")
        _say(f"already in the store: {report.rows_known} rows")
    else:
        _say(
            f"imported {report.format} for person {report.person_id}: "
            f"{report.conversations} conversations, {report.messages_added} messages added "
            f"({report.messages_known} already there), {report.episodes} episodes ingested"
        )
    for conversation_id, name in report.for_review.items():
        _say(
            f"for review, not memory: {name} is conversation {conversation_id} "
            "(adopt what fits with `agentgw persona`)"
        )
    return 0


async def _import(
    config: Config, path: Path, kind: str, person_id: int | None, *, quiet: bool
) -> ImportReport:
    from tqdm import tqdm

    from gateway.errors import DataDirInUse
    from gateway.store import Store
    from gateway.store.datalock import DataDirLock, claim_database
    from memory.porting.importer import run_import
    from memory.service import MemoryService

    lock = DataDirLock(config.data_dir)
    try:
        lock.acquire()
    except DataDirInUse as exc:
        raise DataDirInUse(
            f"{exc.args[0].removesuffix('; stop it first')}: an import writes the memory "
            "indexes it holds; stop the gateway first (search, show and export run beside it)"
        ) from None
    try:
        async with (
            claim_database(config.database_url, config.store.lock_check_s),
            Store(config.database_url, echo=config.store.echo) as store,
        ):
            started: list[MemoryService] = []

            async def service() -> MemoryService:
                if not started:
                    started.append(await MemoryService.start(store, config))
                return started[0]

            bar = tqdm(desc="import", unit="conv", disable=quiet or not sys.stderr.isatty())

            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            try:
                return await run_import(
                    store,
                    path,
                    kind=kind,
                    person_id=person_id,
                    max_bytes=config.memory.import_max_bytes,
                    service=service,
                    progress=progress,
                )
            finally:
                bar.close()
                for memory in started:
                    await memory.aclose()
    finally:
        lock.release()


def cmd_search(args: argparse.Namespace) -> int:
    config = _config(args)
    person_id, hits = asyncio.run(_search(config, args.query, args.person, args.limit))
    if args.json:
        _say(
            json.dumps(
                {
                    "query": args.query,
                    "person_id": person_id,
                    "results": [h.as_json() for h in hits],
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return 0
    for hit in hits:
        head = f"#{hit.id:<6} {hit.score:6.3f}  {hit.said_at:%Y-%m-%d}  {hit.type:<10}"
        if args.index:
            _say(head.rstrip())
            continue
        text = " ".join(hit.text.split())
        if len(text) > SNIPPET:
            text = text[: SNIPPET - 1] + "…"
        who = f"{hit.speaker}: " if hit.speaker else ""
        _say(f"{head} {who}{text}")
    if not hits:
        _say("nothing found")
    return 0


async def _search(
    config: Config, query: str, person: int | None, limit: int
) -> tuple[int, list[Any]]:
    from gateway.store import Store
    from memory.porting.lookup import search, the_person

    async with Store(config.database_url, echo=config.store.echo) as store:
        person_id = await the_person(store, person)
        return person_id, await search(store, config, person_id, query, limit)


def cmd_show(args: argparse.Namespace) -> int:
    config = _config(args)
    found = asyncio.run(_show(config, args.item_id))
    if args.json:
        _say(json.dumps(found, indent=2, ensure_ascii=False))
        return 0
    item = found["item"]
    _say(f"#{item['id']} {item['type']} ({item['status']}{', pinned' if item['pinned'] else ''})")
    who = item["speaker"] or item["role"] or "?"
    _say(f"said {item['date']} by {who} via {item['channel'] or '-'}")
    _say(f"person {item['person_id']}, written by {item['author'] or '?'}")
    _say("")
    _say(item["text"])
    for source in found["sources"]:
        _say(
            f"\nfrom message {source['message_id']} in conversation "
            f"{source['conversation_id']} ({source['channel']}, {source['date']})"
        )
    for path in found["tree"]:
        _say(f"\nin the memory tree: {' > '.join(path)}")
    if len(found["versions"]) > 1:
        _say("\nversions, oldest first:")
        for version in found["versions"]:
            mark = "*" if version["id"] == item["id"] else " "
            _say(
                f"{mark} #{version['id']} {version['date']} {version['status']}: {version['text']}"
            )
    return 0


async def _show(config: Config, item_id: int) -> dict[str, Any]:
    from gateway.store import Store
    from memory.porting.lookup import show

    async with Store(config.database_url, echo=config.store.echo) as store:
        return await show(store, item_id)

"""Importers on small fixtures in the real formats, into the real store with the real
embedder: a ChatGPT mapping with an edited branch, shards, a Claude export with a
blocks-only, an attachment-only and a tool-only message, an OpenClaw workspace with a
non-UTF-8 daily note; bad files fail with the file named and leave the store as it was."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from gateway.config import Config
from gateway.store import Store
from gateway.store.models import Conversation, Message, Person
from memory.embed import SentenceEmbedder
from memory.errors import PortingError
from memory.models import MemoryItem
from memory.porting import claude
from memory.porting.conversations import person_for_import, store_conversation
from memory.porting.importer import ImportReport, run_import
from memory.service import MemoryService
from memory.types import ItemType
from tests.conftest import make_config
from tests.test_memory_models import embedder  # noqa: F401 (the session's model, a fixture)

pytestmark = pytest.mark.slow

EPOCH = 1_767_261_600  # 2026-01-01 10:00 UTC


def node(
    node_id: str, parent: str | None, children: list[str], role: str | None, text: str, at: float
) -> dict[str, Any]:
    message = None
    if role is not None:
        message = {
            "id": node_id,
            "author": {"role": role, "name": None, "metadata": {}},
            "create_time": at,
            "content": {"content_type": "text", "parts": [text]},
            "metadata": {"is_visually_hidden_from_conversation": role == "system"},
        }
    return {"id": node_id, "message": message, "parent": parent, "children": children}


def chatgpt_conversation(conv_id: str, title: str, start: int) -> dict[str, Any]:
    """A thread with an edit: the first answer was regenerated; the old one is a side branch."""
    mapping = {
        n["id"]: n
        for n in (
            node("root", None, ["sys"], None, "", 0),
            node("sys", "root", ["u1"], "system", "", start),
            node("u1", "sys", ["a1-old", "a1"], "user", "I adopted a cat named Miso.", start + 1),
            node("a1-old", "u1", [], "assistant", "DISCARDED regenerated answer.", start + 2),
            node("a1", "u1", ["u2"], "assistant", "Lovely! What colour is Miso?", start + 3),
            node("u2", "a1", ["a2"], "user", "She is grey with white paws.", start + 60),
            node("a2", "u2", [], "assistant", "Grey with white socks, noted.", start + 61),
        )
    }
    mapping["u1"]["message"]["content"]["parts"].append({"content_type": "image_asset_pointer"})
    return {
        "id": conv_id,
        "conversation_id": conv_id,
        "title": title,
        "create_time": start,
        "update_time": start + 61,
        "mapping": mapping,
        "current_node": "a2",
    }


CLAUDE = [
    {
        "uuid": "c-1",
        "name": "Trip planning",
        "created_at": "2026-02-03T08:00:00.000000Z",
        "updated_at": "2026-02-03T08:05:00.000000Z",
        "chat_messages": [
            {
                "uuid": "m-1",
                "sender": "human",
                "text": "",
                "content": [{"type": "text", "text": "I fly to Lisbon on 14 March."}],
                "attachments": [],
                "files": [],
                "created_at": "2026-02-03T08:00:00.000000Z",
            },
            {
                "uuid": "m-2",
                "sender": "assistant",
                "text": "",
                "content": [
                    {"type": "tool_use", "name": "web_search", "input": {"query": "Lisbon"}}
                ],
                "attachments": [],
                "files": [],
                "created_at": "2026-02-03T08:00:05.000000Z",
            },
            {
                "uuid": "m-3",
                "sender": "human",
                "text": "",
                "content": [],
                "attachments": [
                    {
                        "file_name": "itinerary.txt",
                        "file_type": "text/plain",
                        "file_size": 40,
                        "extracted_content": "Hotel Alfama, 14-18 March.",
                    }
                ],
                "files": [],
                "created_at": "2026-02-03T08:01:00.000000Z",
            },
        ],
    }
]


@asynccontextmanager
async def opened(config: Config) -> AsyncIterator[Store]:
    async with Store(config.database_url) as store:
        yield store


def starter(
    store: Store, config: Config, model: SentenceEmbedder, started: list[MemoryService]
) -> Callable[[], Awaitable[MemoryService]]:
    async def start() -> MemoryService:
        if not started:
            started.append(await MemoryService.start(store, config, embedder=model))
        return started[0]

    return start


async def do_import(
    store: Store, config: Config, model: SentenceEmbedder, path: Path, **kw: Any
) -> ImportReport:
    started: list[MemoryService] = []
    try:
        return await run_import(
            store,
            path,
            person_id=kw.pop("person_id", None),
            max_bytes=kw.pop("max_bytes", config.memory.import_max_bytes),
            service=starter(store, config, model, started),
            **kw,
        )
    finally:
        for service in started:
            await service.aclose()


async def counts(store: Store) -> tuple[int, int, int, int]:
    async with store.reader() as s:
        return (
            await s.scalar(select(func.count()).select_from(Person)) or 0,
            await s.scalar(select(func.count()).select_from(Conversation)) or 0,
            await s.scalar(select(func.count()).select_from(Message)) or 0,
            await s.scalar(select(func.count()).select_from(MemoryItem)) or 0,
        )


async def test_chatgpt_export_follows_the_visible_thread(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    config = make_config(tmp_path, memory={"embedder": "minilm"})
    export = tmp_path / "chatgpt"
    export.mkdir()
    (export / "conversations-000.json").write_text(
        json.dumps([chatgpt_conversation("conv-a", "Cats", EPOCH)]), "utf-8"
    )
    (export / "conversations-001.json").write_text(
        json.dumps([chatgpt_conversation("conv-b", "Cats again", EPOCH + 86400)]), "utf-8"
    )
    async with opened(config) as store:
        report = await do_import(store, config, embedder, export)
        assert report.format == "chatgpt"
        assert (report.conversations, report.messages_added, report.episodes) == (2, 8, 8)
        async with store.reader() as s:
            texts = list((await s.scalars(select(Message.text).order_by(Message.id))).all())
            items = list((await s.scalars(select(MemoryItem).order_by(MemoryItem.id))).all())
            people = list((await s.scalars(select(Person))).all())
        # A fresh store: the import made the person it belongs to.
        assert len(people) == 1
        assert texts[:4] == [
            "I adopted a cat named Miso.\n[image_asset_pointer]",
            "Lovely! What colour is Miso?",
            "She is grey with white paws.",
            "Grey with white socks, noted.",
        ]
        assert not any("DISCARDED" in t for t in texts)
        # Episodes of the normal ingest, dated by the export's own times.
        assert all(i.type is ItemType.EPISODE for i in items)
        assert items[0].occurred_at == datetime.fromtimestamp(EPOCH + 1, UTC)
        assert items[0].speaker == "User"
        assert items[1].speaker == "ChatGPT"
        assert items[0].embedding is not None

        again = await do_import(store, config, embedder, export)
        assert (again.messages_added, again.messages_known, again.episodes) == (0, 8, 0)
        assert await counts(store) == (1, 2, 8, 8)
        # The .zip as downloaded: the same conversations, nothing added.
        archive = tmp_path / "chatgpt-export.zip"
        with zipfile.ZipFile(archive, "w") as packed:
            for shard in export.iterdir():
                packed.write(shard, f"export/{shard.name}")
            packed.writestr("export/file-abc.png", b"\x89PNG")
        zipped = await do_import(store, config, embedder, archive)
        assert (zipped.format, zipped.messages_known, zipped.messages_added) == ("chatgpt", 8, 0)


async def test_claude_export_keeps_blocks_attachments_and_tool_turns(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    config = make_config(tmp_path, memory={"embedder": "minilm"})
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(CLAUDE), "utf-8")
    async with opened(config) as store:
        report = await do_import(store, config, embedder, path)
        assert report.format == "claude"
        async with store.reader() as s:
            rows = list(await s.execute(select(Message.role, Message.text).order_by(Message.id)))
            first = await s.scalar(select(MemoryItem).order_by(MemoryItem.id).limit(1))
        assert [(r.value, t) for r, t in rows] == [
            ("user", "I fly to Lisbon on 14 March."),
            ("assistant", '[tool_use web_search: {"query": "Lisbon"}]'),
            ("user", "[attachment itinerary.txt]\nHotel Alfama, 14-18 March."),
        ]
        assert first is not None
        assert first.occurred_at == datetime(2026, 2, 3, 8, 0, tzinfo=UTC)
        # Dates are read relative to when it was said (3 February 2026), not to today:
        # the time parser takes a bare "14 March" as the last one before then.
        assert str(first.refers_start) == "2025-03-14"


def openclaw_workspace(root: Path) -> Path:
    (root / "memory").mkdir(parents=True)
    (root / "MEMORY.md").write_text(
        "# Long-term memory\n\n- Sam is allergic to peanuts.\n- Sam's sister is Ada.\n", "utf-8"
    )
    (root / "USER.md").write_text("# User\n\nName: Sam\nTimezone: Europe/Paris\n", "utf-8")
    (root / "SOUL.md").write_text("# Soul\n\nBe blunt and brief.\n", "utf-8")
    (root / "IDENTITY.md").write_text("# Identity\n\nName: Claw\n", "utf-8")
    (root / "memory" / "2026-05-01.md").write_text(
        "# 2026-05-01\n\n- 09:30 Sam started the new job at the bakery.\n", "utf-8"
    )
    # Latin-1, not UTF-8: "café" with a lone 0xE9 byte, on line 3.
    (root / "memory" / "2026-05-02.md").write_bytes(
        b"# 2026-05-02\n\n- Sam met Ada at the caf\xe9.\n"
    )
    return root


async def test_openclaw_workspace(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    config = make_config(tmp_path, memory={"embedder": "minilm"})
    root = openclaw_workspace(tmp_path / "workspace")
    async with opened(config) as store:
        report = await do_import(store, config, embedder, root)
        assert report.format == "openclaw"
        assert report.warnings == [
            f"{root / 'memory' / '2026-05-02.md'}: line 3: not UTF-8; bad bytes kept as U+FFFD"
        ]
        assert sorted(report.for_review.values()) == ["IDENTITY.md", "SOUL.md"]
        async with store.reader() as s:
            items = list((await s.scalars(select(MemoryItem))).all())
        by_text = {i.content: i for i in items}
        assert by_text["- 09:30 Sam started the new job at the bakery."].occurred_at == datetime(
            2026, 5, 1, 9, 30, tzinfo=UTC
        )
        assert "- Sam met Ada at the caf\ufffd." in by_text
        assert "- Sam is allergic to peanuts." in by_text
        # The agent's soul is kept for review, never made memory.
        assert not any("blunt" in t or "Claw" in t for t in by_text)
        again = await do_import(store, config, embedder, root)
        assert (again.messages_added, again.episodes) == (0, 0)


async def test_bad_files_fail_clearly_and_change_nothing(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    config = make_config(tmp_path, memory={"embedder": "minilm"})
    good = tmp_path / "good.json"
    good.write_text(json.dumps(CLAUDE), "utf-8")
    truncated = tmp_path / "cut" / "conversations.json"
    truncated.parent.mkdir()
    whole = json.dumps([chatgpt_conversation("conv-a", "Cats", EPOCH)], indent=1)
    truncated.write_text(whole[: len(whole) // 2], "utf-8")
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "notes.txt").write_text("hello", "utf-8")
    cut_zip = tmp_path / "cut.zip"
    with zipfile.ZipFile(cut_zip, "w") as packed:
        packed.write(truncated, "conversations.json")
    bad_day = openclaw_workspace(tmp_path / "bad-day")
    (bad_day / "memory" / "2026-13-45.md").write_text("- a day that never was\n", "utf-8")
    async with opened(config) as store:
        await do_import(store, config, embedder, good)
        before = await counts(store)
        cases: list[tuple[Path, dict[str, Any], str]] = [
            (truncated, {}, rf"{truncated}: line \d+ column \d+: invalid JSON"),
            (unknown, {}, f"{unknown}: unknown format"),
            (good, {"max_bytes": 100}, rf"{good}: [\d,]+ bytes, over memory.import_max_bytes"),
            (bad_day, {}, "2026-13-45.md: the name 2026-13-45 is not a real day"),
            (good, {"kind": "chatgpt"}, "not a ChatGPT export|conversation 1"),
            (cut_zip, {}, rf"{cut_zip}:/conversations.json: line \d+ column \d+: invalid"),
        ]
        for path, kw, message in cases:
            with pytest.raises(PortingError, match=message):
                await do_import(store, config, embedder, path, **kw)
            assert await counts(store) == before, path


async def test_import_from_the_shell_into_a_fresh_data_dir(tmp_path: Path) -> None:
    path = tmp_path / "agentgw.toml"
    path.write_text(
        f'[store]\ndata_dir = "{tmp_path / "data"}"\n[agent]\ntimezone = "UTC"\n',
        encoding="utf-8",
    )
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps(CLAUDE), "utf-8")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "memory",
        "import",
        str(export),
        "--json",
        "--config",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    out, err = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode == 0, err.decode()
    report = json.loads(out)
    assert report["format"] == "claude"
    assert report["person_id"] == 1
    assert report["messages_added"] == 3
    assert report["episodes"] == 3


async def test_an_import_stopped_before_its_ingest_finishes_it_next_time(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    config = make_config(tmp_path, memory={"embedder": "minilm"})
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(CLAUDE), "utf-8")
    async with opened(config) as store:
        # The first run stored the conversation's messages, then stopped.
        person = await person_for_import(store, None, "")
        (conv,) = claude.read(path, 10**6, "User")
        await store_conversation(store, person, conv)
        assert await counts(store) == (1, 1, 3, 0)
        report = await do_import(store, config, embedder, path)
        assert (report.messages_added, report.messages_known, report.episodes) == (0, 3, 3)
        assert await counts(store) == (1, 1, 3, 3)

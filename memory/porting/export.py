"""``agentgw memory export``: each person's memory as readable files plus the record.

Layout: ``OUT/person-<id>/`` holding ``agentgw.jsonl`` (lossless, what an import
reads) and the Markdown view (memory/porting/markdown.py). Nothing in the
files depends on when the export ran, so two exports of the same store are
byte-identical. Only reads: it runs beside a running gateway.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway.store import Store
from memory.errors import PortingError
from memory.porting import markdown, views
from memory.porting.records import Record, by_table, header_line, read_person, to_line


@dataclass(frozen=True)
class Exported:
    person_id: int
    folder: Path
    files: tuple[str, ...]
    records: int


def person_folder(out: Path, person_id: int) -> Path:
    return out / f"person-{person_id}"


def _zone(name: str, default: tzinfo) -> tzinfo:
    try:
        return ZoneInfo(name) if name else default
    except (ZoneInfoNotFoundError, ValueError):
        return default


def markdown_files(rows: dict[str, list[dict[str, Any]]], zone: tzinfo) -> dict[str, str]:
    """The readable files of one person (everything but ``agentgw.jsonl``): name -> text."""
    (person,) = rows["people"]
    name, theirs = person["display_name"], _zone(person["timezone"], zone)
    files = markdown.render(name, rows["memory_items"], rows["lessons"], theirs)
    files.update(views.render_profile(name, rows["profiles"], theirs))
    files.update(views.render_tree(name, rows["memory_tree_nodes"], theirs))
    return files


def files_of(records: list[Record], zone: tzinfo) -> dict[str, str]:
    """Every file of one person's export: name -> text."""
    rows = by_table(records)
    files = markdown_files(rows, zone)
    lines = [header_line(rows["people"][0]["id"]), *(to_line(r) for r in records)]
    files["agentgw.jsonl"] = "".join(f"{line}\n" for line in lines)
    return files


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")


async def export_person(store: Store, person_id: int, out: Path, zone: tzinfo) -> Exported:
    records = await store.read(lambda c: read_person(c, person_id))
    if not records:
        raise PortingError(f"no person {person_id} in the store")
    files = files_of(records, zone)
    folder = person_folder(out, person_id)
    try:
        await asyncio.to_thread(_write, folder, files)
    except OSError as exc:
        raise PortingError(f"cannot write the export to {folder}: {exc}") from exc
    return Exported(person_id, folder, tuple(sorted(files)), len(records))

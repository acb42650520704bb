"""``agentgw memory import``: one entry for every format, with progress.

Everything is read and checked before the first write, so a bad file (cut
short, unknown, too big, a daily note with an impossible date) changes
nothing. Then an agentgw export is written in one transaction per file, and
another tool's conversations one transaction each, then ingested.
"""

from __future__ import annotations

import asyncio
import tempfile
import zipfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.store import Store
from gateway.store.models import Person
from memory.errors import PortingError
from memory.porting import chatgpt, claude, openclaw
from memory.porting.conversations import (
    SourceConversation,
    episodes_of,
    not_ingested,
    person_for_import,
    store_conversation,
)
from memory.porting.import_agentgw import import_file, read_records
from memory.porting.sources import CHATGPT_SHARD, FORMATS, detect, read_text

if TYPE_CHECKING:
    from memory.service import MemoryService

# (done, total): called after each conversation or file.
Progress = Callable[[int, int], None]
DEFAULT_SPEAKER = "User"


@dataclass
class ImportReport:
    format: str
    person_id: int | None = None
    conversations: int = 0
    messages_added: int = 0
    messages_known: int = 0
    episodes: int = 0
    rows_added: dict[str, int] = field(default_factory=dict)
    rows_known: int = 0
    # Conversations stored but not ingested (an OpenClaw SOUL.md): id -> file.
    for_review: dict[int, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "person_id": self.person_id,
            "conversations": self.conversations,
            "messages_added": self.messages_added,
            "messages_known": self.messages_known,
            "episodes": self.episodes,
            "rows_added": self.rows_added,
            "rows_known": self.rows_known,
            "for_review": {str(k): v for k, v in self.for_review.items()},
            "warnings": self.warnings,
        }


def agentgw_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if (path / "agentgw.jsonl").is_file():
        return [path / "agentgw.jsonl"]
    return sorted(path.glob("person-*/agentgw.jsonl"))


def _checked(files: list[Path], max_bytes: int) -> list[tuple[Path, str]]:
    """Every file read and its records checked, before any is written."""
    texts = []
    for file in files:
        decoded = read_text(file, max_bytes)
        if decoded.replaced_at is not None:
            raise PortingError(f"{file}: line {decoded.replaced_at}: not UTF-8")
        read_records(file, decoded.text)
        texts.append((file, decoded.text))
    return texts


def read_conversations(
    path: Path, kind: str, max_bytes: int, speaker: str, warnings: list[str]
) -> list[SourceConversation]:
    if kind == "chatgpt":
        return chatgpt.read(path, max_bytes, speaker)
    if kind == "claude":
        return claude.read(path, max_bytes, speaker)
    return openclaw.read(path, max_bytes, warnings)


async def _speaker(store: Store, person_id: int | None) -> str:
    if person_id is None:
        return DEFAULT_SPEAKER
    async with store.reader() as session:
        person = await session.get(Person, person_id)
    return (person.display_name if person is not None else "") or DEFAULT_SPEAKER


async def run_import(
    store: Store,
    path: Path,
    *,
    kind: str = "auto",
    person_id: int | None,
    max_bytes: int,
    service: Callable[[], Awaitable[MemoryService]],
    progress: Progress | None = None,
) -> ImportReport:
    """Import ``path`` (a file, a folder, or a ChatGPT/Claude .zip as downloaded);
    ``service`` starts the memory service when one is needed (not for an agentgw
    export, whose rows already hold their items)."""
    if await asyncio.to_thread(lambda: path.is_file() and zipfile.is_zipfile(path)):
        with tempfile.TemporaryDirectory(prefix="agentgw-import-") as scratch:
            await asyncio.to_thread(unpack, path, Path(scratch), max_bytes)
            try:
                report = await _run_import(
                    store, Path(scratch), kind, person_id, max_bytes, service, progress
                )
            except PortingError as exc:
                # Named as the archive's member, not as the scratch copy.
                raise PortingError(str(exc).replace(scratch, f"{path}:")) from exc
            report.warnings = [w.replace(scratch, f"{path}:") for w in report.warnings]
            return report
    return await _run_import(store, path, kind, person_id, max_bytes, service, progress)


def unpack(archive: Path, into: Path, max_bytes: int) -> None:
    """The conversation files of an export's .zip (not its images), each checked
    against the size limit before it is written out."""
    try:
        with zipfile.ZipFile(archive) as opened:
            wanted = [m for m in opened.infolist() if CHATGPT_SHARD.match(Path(m.filename).name)]
            if not wanted:
                raise PortingError(f"{archive}: no conversations.json in the archive")
            for member in wanted:
                name = Path(member.filename).name
                if member.file_size > max_bytes:
                    raise PortingError(
                        f"{archive}: {name}: {member.file_size:,} bytes, over "
                        f"memory.import_max_bytes ({max_bytes:,})"
                    )
                (into / name).write_bytes(opened.read(member))
    except (zipfile.BadZipFile, OSError) as exc:
        raise PortingError(f"{archive}: cannot read the archive: {exc}") from exc


async def _run_import(
    store: Store,
    path: Path,
    kind: str,
    person_id: int | None,
    max_bytes: int,
    service: Callable[[], Awaitable[MemoryService]],
    progress: Progress | None,
) -> ImportReport:
    if kind == "auto":
        kind = await asyncio.to_thread(detect, path)
    elif kind not in FORMATS:
        raise PortingError(f"unknown format {kind!r}: one of auto, {', '.join(FORMATS)}")
    report = ImportReport(kind)
    if kind == "agentgw":
        files = agentgw_files(path)
        if not files:
            raise PortingError(f"{path}: no agentgw.jsonl in it")
        texts = await asyncio.to_thread(_checked, files, max_bytes)
        for n, (file, text) in enumerate(texts, 1):
            done = await import_file(store, file, text, person_id)
            report.person_id = done.person_id
            for table, count in done.added.items():
                report.rows_added[table] = report.rows_added.get(table, 0) + count
            report.rows_known += done.kept
            if progress is not None:
                progress(n, len(texts))
        return report

    speaker = await _speaker(store, person_id)
    conversations = await asyncio.to_thread(
        read_conversations, path, kind, max_bytes, speaker, report.warnings
    )
    person = await person_for_import(store, person_id, "")
    report.person_id = person
    if person_id is None:
        speaker = await _speaker(store, person)
        if speaker != DEFAULT_SPEAKER:  # the store's one person has a name: theirs
            conversations = await asyncio.to_thread(
                read_conversations, path, kind, max_bytes, speaker, []
            )
    memory = await service()
    for n, conv in enumerate(conversations, 1):
        stored = await store_conversation(store, person, conv)
        report.conversations += 1
        report.messages_added += stored.added
        report.messages_known += len(stored.messages) - stored.added
        if conv.review:
            report.for_review[stored.conversation_id] = conv.key
        else:
            episodes = await not_ingested(store, person, episodes_of(person, stored))
            if episodes:
                await memory.ingest(episodes)
                report.episodes += len(episodes)
        if progress is not None:
            progress(n, len(conversations))
    return report

"""``memory.mirror_dir``: each person's readable memory files, kept in step with memory.

The files are the Markdown view ``agentgw memory export`` writes
(``person-<id>/facts.md``, ``MEMORY.md``, ``tree.md``, daily notes ...; not the
lossless ``agentgw.jsonl``, whose vectors would make every turn a megabyte-sized
change in a person's git history). One background task owns the folder:

- every ``mirror_interval_s`` after this process committed a write (and every
  ``IDLE_INTERVALS`` intervals otherwise, for other processes' writes) it reads a
  fingerprint of each person's memory (one grouped query per table: counts,
  newest ids, newest status changes, pins, the newest profile and tree node);
  a person whose fingerprint moved gets their
  files rendered again and the ones that differ rewritten, at most
  ``mirror_people_per_pass`` people a pass, so a burst of changes is one write
  and the work of a pass is bounded. Reading and rendering run off the reply
  path (a reader connection, then a worker thread); each file is written to a
  temporary file beside it and renamed over it, so a reader (an editor, git)
  never sees half a file.
- watchfiles reports the files a person changed. A file whose text is one the
  gateway wrote is its own write and is passed over; an edit of an editable file
  is read back as corrections (mirror_edits.py), after which that person's files
  are written again with the new versions' ids. A malformed edit is logged with
  the file and line, changes nothing, and the file is left as the person left it
  until they fix it (it is not overwritten meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import tempfile
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any

from sqlalchemy import func, literal, select
from sqlalchemy.engine import Connection
from watchfiles import Change, awatch

from gateway.config import Config
from memory.errors import PortingError
from memory.porting.export import markdown_files, person_folder
from memory.porting.mirror_edits import apply_edit, choose_base, topic_of
from memory.porting.records import key_column, tables
from memory.service import MemoryService
from memory.types import ItemStatus

log = logging.getLogger(__name__)

# The names the view writes (markdown.py, views.py): only these are ever replaced or
# removed; a file of the person's own in the folder is left alone.
OURS = re.compile(
    r"^(?:(?:persona|preferences|facts|events|lessons)(?:-\d{4})?(?:-\d+)?"
    r"|MEMORY(?:-\d+)?|tree(?:-[A-Za-z0-9-]+)?"
    r"|memory/\d{4}-\d\d-\d\d(?:-\d+)?)\.md$"
)
_FOLDER = re.compile(r"^person-(\d+)$")
# A person's next pass waits this many times as long as their last one took.
DUTY = 4.0
# While this process commits nothing, the fingerprints are read only every this many
# intervals (30 s at the default 2 s): what changes then is another process's write
# (a cluster's other gateways), which waits that long to show.
IDLE_INTERVALS = 15
# How many of the texts written to one file are remembered to find an edit's base.
_HISTORY = 8
_VIEW_ITEM_COLUMNS = (
    "id",
    "type",
    "content",
    "status",
    "pinned",
    "occurred_at",
    "refers_start",
    "speaker",
    "role",
)


def mirror_root(config: Config) -> Path | None:
    """The folder of ``memory.mirror_dir`` (relative: under the data directory)."""
    raw = config.memory.mirror_dir
    if not raw:
        return None
    path = Path(raw).expanduser()
    return path if path.is_absolute() else config.data_dir / path


def fingerprints(connection: Connection) -> dict[int, tuple[Any, ...]]:
    """Per person, what changes when anything their files show changes.

    Every aggregate here is answered from an index alone (SQLite reads no row:
    ``ix_memory_items_person_state`` holds person, status and tier, and the row id;
    the pinned, profile and tree-version indexes likewise), so the check costs little
    however wide the rows are. An item added, superseded, forgotten, archived or
    pinned moves a count or a newest id; a profile or a tree summary is a new row."""
    t = {table.name: table for table in tables()}
    items, people = t["memory_items"], t["people"]
    out: dict[int, list[Any]] = {}
    for row in connection.execute(
        select(people.c.id, people.c.display_name, people.c.timezone).order_by(people.c.id)
    ):
        out[row[0]] = [*row[1:]]
    queries = [
        select(items.c.person_id, items.c.status, items.c.tier, func.count(), func.max(items.c.id))
        .group_by(items.c.person_id, items.c.status, items.c.tier)
        .order_by(items.c.person_id, items.c.status, items.c.tier),
        select(items.c.person_id, func.count())
        .where(items.c.pinned.is_(True))
        .group_by(items.c.person_id)
        .order_by(items.c.person_id),
    ]
    for name in ("profiles", "memory_tree_versions", "memory_tree_nodes"):
        table = t[name]
        queries.append(
            select(table.c.person_id, literal(name), func.count(), func.max(table.c.id))
            .group_by(table.c.person_id)
            .order_by(table.c.person_id)
        )
    lessons = t["lessons"]
    queries.append(
        select(lessons.c.person_id, func.count(), func.max(lessons.c.updated_at))
        .group_by(lessons.c.person_id)
        .order_by(lessons.c.person_id)
    )
    for query in queries:
        for row in connection.execute(query):
            if row[0] is None:  # lessons for everyone: part of every person's files
                for values in out.values():
                    values.extend(row[1:])
            elif row[0] in out:
                out[row[0]].extend(row[1:])
    return {pid: tuple(values) for pid, values in out.items()}


def view_rows(connection: Connection, person_id: int) -> dict[str, list[dict[str, Any]]]:
    """The rows the readable files are made of: current items only, no vectors."""
    t = {table.name: table for table in tables()}
    rows: dict[str, list[dict[str, Any]]] = {}

    def read(name: str, query: Any) -> None:
        rows[name] = [dict(r._mapping) for r in connection.execute(query)]

    people, items, lessons = t["people"], t["memory_items"], t["lessons"]
    read("people", select(people).where(people.c.id == person_id))
    read(
        "memory_items",
        select(*(items.c[c] for c in _VIEW_ITEM_COLUMNS))
        .where(items.c.person_id == person_id, items.c.status == ItemStatus.ACTIVE)
        .order_by(items.c.id),
    )
    read(
        "lessons",
        select(lessons)
        .where((lessons.c.person_id == person_id) | lessons.c.person_id.is_(None))
        .order_by(lessons.c.id),
    )
    for name in ("profiles", "memory_tree_nodes"):
        table = t[name]
        read(
            name,
            select(table)
            .where(table.c.person_id == person_id)
            .order_by(table.c[key_column(table)]),
        )
    return rows


def write_atomically(path: Path, text: str) -> None:
    """Write a temporary file beside ``path`` and rename it over: never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # No fsync: the rename alone keeps readers from half a file, and after a crash
        # the next start writes every file again from the store (fsync made the first
        # pass of a 20,000-item person 30 s).
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as out:
            out.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise PortingError(f"{path}: cannot be read ({exc})") from exc


@dataclass
class _Person:
    """What the mirror knows of one person's folder."""

    fingerprint: tuple[Any, ...] | None = None
    name: str = ""
    dirty: bool = True
    # When their next pass may start: a pass that took t seconds waits DUTY * t after
    # it, so a person with many items (a 20,000-item pass reads and renders ~2 s)
    # takes at most 1 / (1 + DUTY) of a thread while they keep changing memory.
    not_before: float = 0.0


class MemoryMirror:
    """Owns ``memory.mirror_dir``: writes the files, reads a person's edits back."""

    def __init__(self, memory: MemoryService, config: Config, root: Path) -> None:
        self.memory = memory
        self.store = memory.store
        self.config = config
        self.root = root
        self.zone: tzinfo = config.zone
        self._people: dict[int, _Person] = {}
        # Per file: the texts this process wrote there, newest last (own-write guard,
        # and the base an edit is read against).
        self._written: dict[Path, deque[str]] = {}
        # Per file: a malformed edit's text, logged once and left alone until changed.
        self._rejected: dict[Path, str] = {}
        self.passes = 0
        # The last fingerprints read, the store's commit count before that read, and
        # when they are read again though this process wrote nothing.
        self._prints: dict[int, tuple[Any, ...]] | None = None
        self._commits_seen = -1
        self._recheck_at = 0.0
        self.fingerprint_reads = 0
        # Called after each pass (tests wait on it).
        self.on_pass: Callable[[], None] | None = None

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Until cancelled (or ``stop`` is set): write, watch, read edits back."""
        await asyncio.to_thread(self.root.mkdir, parents=True, exist_ok=True)
        # The first pass runs at the watcher's first timeout, so the watcher is already
        # watching when the files are first written: no edit can fall in between.
        interval_ms = max(50, int(self.config.memory.mirror_interval_s * 1000))
        async for changes in awatch(
            self.root,
            stop_event=stop,
            debounce=min(interval_ms, 1600),
            rust_timeout=interval_ms,
            yield_on_timeout=True,
            watch_filter=self._watched,
        ):
            await self.read_edits(
                {Path(p) for kind, p in changes if kind is not Change.deleted},
                {Path(p) for kind, p in changes if kind is Change.deleted},
            )
            await self.sync()

    def _watched(self, _change: Change, path: str) -> bool:
        name = Path(path).name
        return name.endswith(".md") and not name.startswith(".")

    def _person_of(self, path: Path) -> tuple[int, Path] | None:
        try:
            relative = path.relative_to(self.root)
        except ValueError:
            return None
        match = _FOLDER.match(relative.parts[0]) if relative.parts else None
        if match is None or len(relative.parts) < 2:
            return None
        return int(match.group(1)), Path(*relative.parts[1:])

    async def read_edits(self, changed: set[Path], deleted: set[Path]) -> None:
        """The watcher's report: a person whose files changed (to a text the gateway did
        not write) gets a pass now, which reads their edits back before it writes."""
        for path in sorted(changed | deleted):
            found = self._person_of(path)
            if found is None or path not in self._written:
                continue
            try:
                disk = await asyncio.to_thread(_read, path)
            except PortingError as exc:
                log.error("memory mirror: %s", exc)  # noqa: TRY400 (a person's file: no trace)
                continue
            if disk in self._written[path]:
                continue  # one of its own writes
            self._people.setdefault(found[0], _Person()).dirty = True
            if topic_of(path.name) is None or path.parent.parent != self.root:
                log.warning(
                    "memory mirror: %s %s; written again (only facts.md, preferences.md, "
                    "persona.md and events.md are read back)",
                    path,
                    "was removed" if disk is None else "is a view, its edit is not read back",
                )
                self._written[path].clear()

    async def _fingerprints(self) -> dict[int, tuple[Any, ...]]:
        """Each person's fingerprint: read again when this process has committed a write
        since the last read, else every ``IDLE_INTERVALS`` intervals (an idle gateway
        does not query the store every interval)."""
        clock = asyncio.get_running_loop().time
        commits = self.store.commits
        if self._prints is None or commits != self._commits_seen or clock() >= self._recheck_at:
            # The count is taken before the read: a write committed during it is seen
            # by the next pass.
            self._commits_seen = commits
            self._prints = await self.store.read(fingerprints)
            self.fingerprint_reads += 1
            self._recheck_at = clock() + IDLE_INTERVALS * self.config.memory.mirror_interval_s
        return self._prints

    async def sync(self) -> None:
        """Read back and write the files of the people whose memory or files changed
        (a bounded number a pass)."""
        prints = await self._fingerprints()
        for person_id in set(self._people) - set(prints):
            del self._people[person_id]
        due = []
        clock = asyncio.get_running_loop().time
        for person_id, fingerprint in sorted(prints.items()):
            person = self._people.setdefault(person_id, _Person())
            changed = person.fingerprint != fingerprint or person.dirty
            if changed and clock() >= person.not_before:
                due.append(person_id)
        for person_id in due[: self.config.memory.mirror_people_per_pass]:
            person = self._people[person_id]
            # Read before the files: a change made meanwhile is seen again next pass.
            person.fingerprint, person.dirty = prints[person_id], False
            started = clock()
            try:
                await self._pass(person_id, person)
            except (OSError, PortingError) as exc:
                person.dirty = True
                log.error("memory mirror: person %d not written: %s", person_id, exc)  # noqa: TRY400
            person.not_before = clock() + DUTY * (clock() - started)
        self.passes += 1
        if self.on_pass is not None:
            self.on_pass()

    async def _pass(self, person_id: int, person: _Person) -> None:
        """Their edits read back, then their files written from the store."""
        folder = person_folder(self.root, person_id)
        first = not any(folder in path.parents for path in self._written)
        files = await self._render(person_id, person)
        if files is None:
            return
        if await self._read_back(person_id, person, folder, files, first=first):
            files = await self._render(person_id, person)
            if files is None:
                return
        await asyncio.to_thread(self._write_files, folder, files)

    async def _render(self, person_id: int, person: _Person) -> dict[str, str] | None:
        rows = await self.store.read(lambda c: view_rows(c, person_id))
        if not rows["people"]:
            return None
        person.name = rows["people"][0]["display_name"] or ""
        return await asyncio.to_thread(markdown_files, rows, self.zone)

    async def _read_back(
        self, person_id: int, person: _Person, folder: Path, files: dict[str, str], *, first: bool
    ) -> bool:
        """Each editable file whose text the gateway did not write: an edit, applied.
        At the first pass of a folder (a start) a file that differs from the memory it
        shows may hold an edit made while the gateway was away: corrections and new
        lines only (apply_edit's ``may_forget``)."""
        applied = False
        paths = {folder / name for name in files} | {
            p for p in self._written if folder in p.parents
        }
        for path in sorted(paths):
            if topic_of(path.name) is None or path.parent != folder:
                continue
            disk = await asyncio.to_thread(_read, path)
            written = self._written.get(path)
            if disk is None or self._rejected.get(path) == disk:
                continue
            if first:
                base = files.get(path.name)
                if base is None or disk == base:
                    continue
            elif not written or disk in written:
                continue
            else:
                base = choose_base(disk, list(written))
            applied = await self._apply(person_id, person, path, disk, base, start=first) or applied
        return applied

    async def _apply(
        self,
        person_id: int,
        person: _Person,
        path: Path,
        text: str,
        base: str,
        *,
        start: bool = False,
    ) -> bool:
        try:
            changes = await apply_edit(
                self.memory, person_id, person.name, path, text, base, may_forget=not start
            )
        except PortingError as exc:
            self._rejected[path] = text
            log.error(  # noqa: TRY400 (the person's mistake: the message says where, no trace)
                "memory mirror: edit not applied, nothing changed: %s", exc
            )
            return False
        self._rejected.pop(path, None)
        self._written.setdefault(path, deque(maxlen=_HISTORY)).append(text)
        if changes:
            log.info(
                "memory mirror: %s read back: corrected %s, forgot %s, added %s, pins %s",
                path,
                changes.corrected,
                changes.forgotten,
                changes.added,
                changes.pinned,
            )
        return True

    def _write_files(self, folder: Path, files: dict[str, str]) -> None:
        """The files that differ written (atomically); ours that are no longer, removed."""
        for name, text in sorted(files.items()):
            path = folder / name
            written = self._written.setdefault(path, deque(maxlen=_HISTORY))
            if written and written[-1] == text and topic_of(name) is None:
                # A view as last written: not read again (the watcher reports an edit of
                # it, which clears what is known of it); a 20,000-item person has 2,500.
                continue
            disk = _read(path)
            rejected = self._rejected.get(path)
            if rejected is not None:
                if disk == rejected:
                    continue  # the person's malformed edit stays until they fix it
                self._rejected.pop(path, None)
            if disk == text:
                written.append(text)
                continue
            if written and disk is not None and disk not in written and topic_of(name):
                # An edit made since this pass read the file back: never overwritten,
                # the watcher's report of it brings the next pass, which reads it.
                continue
            if written and disk not in written:
                log.warning(
                    "memory mirror: %s %s; written again (only facts.md, preferences.md, "
                    "persona.md and events.md are read back)",
                    path,
                    "was removed" if disk is None else "is a view, its edit is not read back",
                )
            written.append(text)
            write_atomically(path, text)
        if not folder.is_dir():
            return
        for path in sorted(folder.rglob("*.md")):
            name = path.relative_to(folder).as_posix()
            if OURS.match(name) and name not in files and path not in self._rejected:
                path.unlink(missing_ok=True)
                self._written.pop(path, None)

"""A person's edit of a mirrored file, read back as corrections (memory.mirror_dir).

The files a person may edit are the one-item-a-line ones: ``persona.md``,
``preferences.md``, ``facts.md`` (each line ``- text <!-- YYYY-MM-DD #id -->``)
and ``events.md`` (``YYYY-MM-DD: text <!-- #id -->``), with their per-year and
numbered parts. The id comment says which item a line is. Against the file as
the gateway last wrote it:

- a line whose text changed is a correction: a new version of that item that
  supersedes it (as the panel's edit, memory/curate.py), never an overwrite;
  a changed date of an event moves the new version's day; adding or removing
  ``pinned`` pins or unpins it;
- a line that is gone: the item is forgotten (``retire``, as "forget …");
- a new line without an id: a new item said by the person, of the file's type.

The whole file is checked first; one bad line (a damaged id comment, an id that
is not one of this file's items, a day that does not exist, a line that is not a
memory line) rejects the whole edit with an error naming the file and line,
and nothing changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

from sqlalchemy import update

from memory.curate import MAX_CONTENT_CHARS, MemoryCurator
from memory.errors import PortingError
from memory.models import MemoryItem
from memory.repo import NewItem
from memory.service import REMEMBER_PRIORITY, MemoryService
from memory.types import ItemStatus, ItemType

# Which files are read back, and the type of an item a new line there adds.
EDITABLE = re.compile(r"^(persona|preferences|facts|events)(-\d{4})?(-\d+)?\.md$")
NEW_TYPE = {
    "persona": ItemType.PERSONA,
    "preferences": ItemType.PREFERENCE,
    "facts": ItemType.FACT,
    "events": ItemType.EVENT,
}
ALLOWED = {
    "persona": {ItemType.PERSONA, ItemType.RELATIONAL},
    "preferences": {ItemType.PREFERENCE, ItemType.PROCEDURAL},
    "facts": {ItemType.FACT},
    "events": {ItemType.EVENT},
}
_TAGGED = re.compile(
    r"^- (?P<text>.*?) <!-- (?P<day>\d{4}-\d\d-\d\d) #(?P<id>\d+)(?P<pin> pinned)? -->$"
)
_EVENT = re.compile(r"^(?P<day>\d{4}-\d\d-\d\d): (?P<text>.*?) <!-- #(?P<id>\d+) -->$")
_NEW_EVENT = re.compile(r"^(?P<day>\S+): (?P<text>.+)$")
_ANY_ID = re.compile(r"#(\d+)")


@dataclass(frozen=True)
class Line:
    """One memory line of a file: its item (None for a new line), text, day, pin."""

    number: int
    item_id: int | None
    text: str
    day: date | None
    pinned: bool


@dataclass
class Changes:
    """What an edit did, for the log and the tests."""

    corrected: dict[int, int] = field(default_factory=dict)  # old id -> new version's id
    forgotten: list[int] = field(default_factory=list)
    added: list[int] = field(default_factory=list)
    pinned: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.corrected or self.forgotten or self.added or self.pinned)


def topic_of(name: str) -> str | None:
    """``facts`` for ``facts-2025-2.md``; None for a file that is not read back."""
    match = EDITABLE.match(name)
    return match.group(1) if match else None


def _day(raw: str, where: str) -> date:
    try:
        return date.fromisoformat(raw)
    except ValueError as exc:
        raise PortingError(f"{where}: {raw} is not a real day ({exc})") from None


def parse(path: Path, text: str) -> list[Line]:
    """The memory lines of a file; a line that is none names itself in the error."""
    topic = topic_of(path.name)
    if topic is None:
        raise PortingError(f"{path}: not a file whose edits are read back")
    lines: list[Line] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line: str = raw.strip()
        where = f"{path}: line {number}"
        if not line or line.startswith("#") or line == "(none)":
            continue
        if topic == "events":
            tagged = _EVENT.match(line)
            if tagged is None and "<!--" not in line:
                fresh = _NEW_EVENT.match(line)
                if fresh is None:
                    raise PortingError(
                        f"{where}: not an event line ({line[:60]!r}); write "
                        "'YYYY-MM-DD: what happened'"
                    )
                day = _day(fresh["day"], where)
                lines.append(Line(number, None, fresh["text"].strip(), day, False))
                continue
        else:
            tagged = _TAGGED.match(line)
            if tagged is None and "<!--" not in line:
                if not line.startswith("- ") or not line[2:].strip():
                    raise PortingError(
                        f"{where}: not a memory line ({line[:60]!r}); write '- what to remember'"
                    )
                lines.append(Line(number, None, line[2:].strip(), None, False))
                continue
        if tagged is None:
            raise PortingError(
                f"{where}: the id comment is damaged ({line[-60:]!r}); keep "
                "'<!-- YYYY-MM-DD #id -->' as written, or remove it for a new item"
                if topic != "events"
                else f"{where}: the id comment is damaged ({line[-60:]!r}); keep '<!-- #id -->'"
            )
        content = tagged["text"].strip()
        if not content:
            raise PortingError(f"{where}: the text is empty (delete the line to forget it)")
        pinned = bool(tagged.groupdict().get("pin"))
        lines.append(Line(number, int(tagged["id"]), content, _day(tagged["day"], where), pinned))
    seen: dict[int, int] = {}
    for found in lines:
        if len(found.text) > MAX_CONTENT_CHARS:
            raise PortingError(
                f"{path}: line {found.number}: longer than {MAX_CONTENT_CHARS} characters"
            )
        if found.item_id is not None:
            if found.item_id in seen:
                raise PortingError(
                    f"{path}: line {found.number}: #{found.item_id} is on line "
                    f"{seen[found.item_id]} too; an item has one line"
                )
            seen[found.item_id] = found.number
    return lines


def ids_in(text: str) -> set[int]:
    """The item ids a file as written names (its id comments)."""
    return {int(m) for m in _ANY_ID.findall(text)}


def choose_base(edited: str, written: list[str]) -> str:
    """Which of the texts the gateway wrote (newest last) the person edited: the one
    sharing the most ids with the edit and losing the fewest. So a save from an
    editor opened before the gateway's last write does not forget what came since."""
    mine = ids_in(edited)

    def fit(n: int) -> tuple[int, int]:
        theirs = ids_in(written[n])
        return (len(theirs & mine) - len(theirs - mine), n)

    return written[max(range(len(written)), key=fit)]


async def apply_edit(
    memory: MemoryService,
    person_id: int,
    speaker: str,
    path: Path,
    edited: str,
    base: str,
    *,
    may_forget: bool = True,
) -> Changes:
    """Check the edited file against the version it was made from, then apply it.

    ``may_forget=False`` (a file found changed at start-up, whose base is not known)
    applies corrections and new lines only, and passes over ids that are no longer
    current: they are lines of an older version of the file, not the person's edit."""
    topic = topic_of(path.name)
    if topic is None:
        raise PortingError(f"{path}: not a file whose edits are read back")
    lines = parse(path, edited)
    before = {line.item_id: line for line in parse(path, base) if line.item_id is not None}
    curator = MemoryCurator(memory)
    items: dict[int, MemoryItem] = {}
    for line in lines:
        if line.item_id is None:
            continue
        if line.item_id not in before:
            if not may_forget:
                continue
            raise PortingError(
                f"{path}: line {line.number}: #{line.item_id} is not an item of this file "
                "(copy no id comment; a new line without one is a new item)"
            )
        try:
            item = await curator.get(line.item_id)
        except LookupError:
            raise PortingError(f"{path}: line {line.number}: no item #{line.item_id}") from None
        if item.person_id != person_id or item.type not in ALLOWED[topic]:
            raise PortingError(
                f"{path}: line {line.number}: #{line.item_id} is not one of this file's items"
            )
        if item.status is not ItemStatus.ACTIVE and line.text != before[line.item_id].text:
            raise PortingError(
                f"{path}: line {line.number}: #{line.item_id} is {item.status.value} since the "
                "file was written; edit its current version"
            )
        items[line.item_id] = item
    # Checked: now the changes, each through the memory layer's own path.
    changes = Changes()
    now = datetime.now(UTC)
    kept = {line.item_id for line in lines if line.item_id is not None}
    for line in lines:
        if line.item_id is None or line.item_id not in items:
            continue
        old = before[line.item_id]
        item = items[line.item_id]
        if item.status is not ItemStatus.ACTIVE:
            continue
        if line.text != old.text or (topic == "events" and line.day != old.day):
            if line.text != old.text:
                new = await curator.edit(line.item_id, content=line.text, author="mirror")
            else:  # only the day moved: the same text as a new version on the new day
                new = await _new_version_of_day(memory, curator, item, line)
            changes.corrected[line.item_id] = new.id
            if topic == "events" and line.day is not None:
                await _set_day(memory, new.id, line.day)
            if line.pinned != old.pinned:
                await curator.set_pinned(new.id, line.pinned)
        elif line.pinned != old.pinned:
            await curator.set_pinned(line.item_id, line.pinned)
            changes.pinned.append(line.item_id)
    if may_forget:
        for gone in sorted(set(before) - kept):
            await memory.retire(gone, ItemStatus.FORGOTTEN)
            changes.forgotten.append(gone)
    for line in lines:
        if line.item_id is not None:
            continue
        kind = NEW_TYPE[topic]
        (item_id,) = await memory.add_items(
            [
                NewItem(
                    person_id=person_id,
                    type=kind,
                    content=line.text,
                    occurred_at=now,
                    speaker=speaker,
                    role="user",
                    author="mirror",
                    channel="mirror",
                    priority=REMEMBER_PRIORITY,
                    refers_start=line.day,
                    refers_end=line.day,
                )
            ]
        )
        # As "remember …": a close older item of the type stops being current.
        await memory.supersede(person_id, item_id, kind, line.text, now)
        changes.added.append(item_id)
    return changes


async def _set_day(memory: MemoryService, item_id: int, day: date) -> None:
    async with memory.store.session() as session:
        await session.execute(
            update(MemoryItem)
            .where(MemoryItem.id == item_id)
            .values(refers_start=day, refers_end=day)
        )


async def _new_version_of_day(
    memory: MemoryService, curator: MemoryCurator, item: MemoryItem, line: Line
) -> MemoryItem:
    """An event whose day alone changed: a new version (the same text) replaces it."""
    (new_id,) = await memory.add_items(
        [
            NewItem(
                person_id=item.person_id,
                type=item.type,
                content=item.content,
                occurred_at=item.occurred_at,
                speaker=item.speaker,
                role=item.role,
                author="mirror",
                channel=item.channel,
                conversation_id=item.conversation_id,
                source_message_ids=tuple(item.source_message_ids or ()),
                priority=item.priority,
            )
        ]
    )
    async with memory.store.session() as session:
        await session.execute(
            update(MemoryItem)
            .where(MemoryItem.id == item.id)
            .values(
                status=ItemStatus.SUPERSEDED,
                status_changed_at=datetime.now(UTC),
                superseded_by_id=new_id,
            )
        )
    await memory.unrecall(item.person_id, [item.id])
    return await curator.get(new_id)

"""The readable files of an export: one fact a line, dated events, daily notes.

They are a view of ``agentgw.jsonl`` (which alone is read back): current
items only — superseded and forgotten ones stay in the record, not in the
files a person reads. Each line ends with the item's date and id in an HTML
comment, so a line can be traced to ``agentgw memory show ID``. A file past
``MAX_LINES`` is split by year, then into numbered parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, tzinfo
from typing import Any

from memory.types import ItemStatus, ItemType

MAX_LINES = 500

# Which item types each topic file holds.
TOPICS: dict[str, tuple[ItemType, ...]] = {
    "persona": (ItemType.PERSONA, ItemType.RELATIONAL),
    "preferences": (ItemType.PREFERENCE, ItemType.PROCEDURAL),
    "facts": (ItemType.FACT,),
}
TITLES = {
    "persona": "Who they are",
    "preferences": "Preferences and standing requests",
    "facts": "Facts",
    "events": "Events",
    "lessons": "Lessons",
}


def one_line(text: str) -> str:
    """A stored text on one Markdown line (the record keeps its line breaks)."""
    return " ".join(text.split())


def _day(value: datetime, zone: tzinfo) -> date:
    return value.astimezone(zone).date()


def _tag(item: dict[str, Any], day: date) -> str:
    pinned = " pinned" if item["pinned"] else ""
    return f"<!-- {day.isoformat()} #{item['id']}{pinned} -->"


def _split(
    stem: str, header: str, lines: Sequence[tuple[date, str]], *, by_year: bool = True
) -> dict[str, str]:
    """``stem``.md, or per year (``by_year``), or numbered parts: each at most
    MAX_LINES lines."""
    room = MAX_LINES - 3  # the header, a blank line, and the last newline's slack

    def text(title: str, body: Sequence[str]) -> str:
        return f"{title}\n\n" + "".join(f"{line}\n" for line in body)

    if len(lines) <= room:
        return {f"{stem}.md": text(header, [line for _, line in lines] or ["(none)"])}
    groups: dict[str, list[str]] = {}
    for day, line in lines:
        groups.setdefault(f"-{day.year}" if by_year else "", []).append(line)
    files = {}
    for suffix, body in sorted(groups.items()):
        parts = [body[n : n + room] for n in range(0, len(body), room)]
        for n, part in enumerate(parts, 1):
            numbered = f"-{n}" if len(parts) > 1 else ""
            title = f"{header} ({suffix[1:] or 'part'}{f' {n}' if numbered else ''})"
            files[f"{stem}{suffix}{numbered}.md"] = text(title, part)
    return files


def split_parts(stem: str, header: str, lines: Sequence[str]) -> dict[str, str]:
    """``stem``.md, or numbered parts of it past MAX_LINES lines (no years to split by)."""
    return _split(stem, header, [(date.min, line) for line in lines], by_year=False)


def render(
    name: str, items: Sequence[dict[str, Any]], lessons: Sequence[dict[str, Any]], zone: tzinfo
) -> dict[str, str]:
    """File name (relative to the person's folder) -> text."""
    current = [i for i in items if i["status"] is ItemStatus.ACTIVE]
    current.sort(key=lambda i: (i["occurred_at"], i["id"]))
    who = name or "them"
    files: dict[str, str] = {}
    for topic, types in TOPICS.items():
        lines = []
        for item in current:
            if item["type"] in types:
                day = _day(item["occurred_at"], zone)
                lines.append((day, f"- {one_line(item['content'])} {_tag(item, day)}"))
        files.update(_split(topic, f"# {TITLES[topic]}: {who}", lines))

    events = []
    for item in current:
        if item["type"] is ItemType.EVENT:
            day = item["refers_start"] or _day(item["occurred_at"], zone)
            events.append((day, item["id"], f"{day.isoformat()}: {one_line(item['content'])}"))
    events.sort()
    files.update(
        _split(
            "events",
            f"# {TITLES['events']}: {who}",
            [(d, f"{line} <!-- #{i} -->") for d, i, line in events],
        )
    )

    taught = [x for x in lessons if x["enabled"] and x["replaced_by"] is None]
    lesson_lines = []
    for lesson in taught:
        scope = " (everyone)" if lesson["person_id"] is None else ""
        day = _day(lesson["created_at"], zone)
        lesson_lines.append(
            (day, f"- {one_line(lesson['text'])}{scope} <!-- {day.isoformat()} #{lesson['id']} -->")
        )
    files.update(_split("lessons", f"# {TITLES['lessons']}: {who}", lesson_lines))

    days: dict[date, list[str]] = {}
    for item in current:
        if item["type"] is ItemType.EPISODE:
            at = item["occurred_at"].astimezone(zone)
            speaker = item["speaker"] or item["role"] or "?"
            days.setdefault(at.date(), []).append(
                f"- {at:%H:%M} {speaker}: {one_line(item['content'])} <!-- #{item['id']} -->"
            )
    for day, body in sorted(days.items()):
        parts = _split(
            day.isoformat(), f"# {day.isoformat()}", [(day, line) for line in body], by_year=False
        )
        files.update({f"memory/{k}": v for k, v in parts.items()})
    return files

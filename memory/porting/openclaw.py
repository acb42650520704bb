"""An OpenClaw workspace: ``MEMORY.md``, ``USER.md``, ``memory/YYYY-MM-DD.md``,
``SOUL.md`` and ``IDENTITY.md``.

Each file becomes one imported conversation and each non-empty line (a bullet,
a paragraph line; headings are context, not memories) one message in the
agent's voice ("OpenClaw notes"). A daily note is dated by its file name (at
noon UTC, so the day stays the same in any zone within ±11 h; "HH:MM" at the
start of a line gives its time); ``MEMORY.md`` and ``USER.md``, which carry no
dates, by the file's modification time. ``SOUL.md`` and ``IDENTITY.md`` describe
the agent: they are stored for review, never ingested and never made the persona.

A daily note not named for a real day (``2026-13-45.md``) stops the import
before anything is written. A note that is not UTF-8 is read with the bad
bytes replaced (U+FFFD) and a warning naming the file and line.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

from gateway.store.models import MessageRole
from memory.errors import PortingError
from memory.porting.conversations import SourceConversation, SourceMessage
from memory.porting.sources import read_text

SOURCE = "openclaw"
SPEAKER = "OpenClaw notes"
DAILY = re.compile(r"^(\d{4})-(\d{2})-(\d{2})\.md$")
CLOCK = re.compile(r"^(?:[-*]\s*)?(\d{1,2}):(\d{2})\b")
PROFILE = ("MEMORY.md", "USER.md")
REVIEW = ("SOUL.md", "IDENTITY.md")


def note_day(path: Path) -> date:
    match = DAILY.match(path.name)
    if match is None:
        raise PortingError(f"{path}: a daily note must be named YYYY-MM-DD.md")
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError as exc:
        raise PortingError(f"{path}: the name {path.stem} is not a real day ({exc})") from exc


def _lines(text: str) -> list[tuple[int, str]]:
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#") and line not in ("---", "***"):
            out.append((number, line))
    return out


def _file(
    path: Path, name: str, base: datetime, daily: bool, max_bytes: int, warnings: list[str]
) -> SourceConversation:
    decoded = read_text(path, max_bytes)
    if decoded.replaced_at is not None:
        warnings.append(f"{path}: line {decoded.replaced_at}: not UTF-8; bad bytes kept as U+FFFD")
    messages: list[SourceMessage] = []
    seen: dict[str, int] = {}
    for n, (_number, line) in enumerate(_lines(decoded.text)):
        at = base + timedelta(seconds=n)
        clock = CLOCK.match(line) if daily else None
        if clock and int(clock[1]) < 24 and int(clock[2]) < 60:
            at = datetime.combine(base.date(), time(int(clock[1]), int(clock[2])), UTC)
        digest = hashlib.sha1(line.encode()).hexdigest()[:16]
        seen[digest] = seen.get(digest, 0) + 1
        # Keyed by content (and repeat), not line number: an edited file adds only new lines.
        key = f"{SOURCE}:{name}:{digest}:{seen[digest]}"
        messages.append(SourceMessage(key, MessageRole.ASSISTANT, line, at, SPEAKER))
    return SourceConversation(SOURCE, name, name, tuple(messages), review=name in REVIEW)


def read(path: Path, max_bytes: int, warnings: list[str]) -> list[SourceConversation]:
    """Every file of the workspace (or the one file given); the daily notes' names are
    all checked before any is read."""
    folder = path if path.is_dir() else path.parent
    if path.is_dir():
        notes = sorted((path / "memory").glob("*.md")) if (path / "memory").is_dir() else []
        tops = [path / n for n in (*PROFILE, *REVIEW) if (path / n).is_file()]
    else:
        daily = DAILY.match(path.name) is not None or path.parent.name == "memory"
        notes, tops = ([path], []) if daily else ([], [path])
    days = {note: note_day(note) for note in notes}
    out = []
    for top in tops:
        try:
            mtime = datetime.fromtimestamp(top.stat().st_mtime, UTC)
        except OSError as exc:
            raise PortingError(f"{top}: cannot read: {exc.strerror or exc}") from exc
        out.append(_file(top, top.name, mtime, False, max_bytes, warnings))
    for note, day in days.items():
        noon = datetime.combine(day, time(12), UTC)
        name = f"memory/{note.name}" if note.parent != folder or path.is_dir() else note.name
        out.append(_file(note, name, noon, True, max_bytes, warnings))
    return out

"""The curated profile (issue 24): a short "what I know about you" per person, in the
cached prefix after the lessons and before working memory.

Built from what upkeep already distilled — the newest weekly category summaries
(``memory_summaries``) and the person's active observations, the reflector's
first (they are the condensed ones), high priority before the rest — never from
raw transcripts. Every line keeps its source ids (``summary:12``, ``item:40``,
``observation:7``). The profile is capped at ``profile_budget_tokens``: lines are
added in order while they fit, so however many facts there are, it never grows
past its budget (an unbounded profile froze a gateway: OpenClaw #73691).

Rebuilt by the weekly job and on demand (``agentgw profile rebuild``); a rebuild
that reads the same writes nothing, any other is a new version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Row, bindparam, func, select

from gateway.config import ContinuityConfig
from gateway.prompt import StageRead
from gateway.store import Store
from gateway.store.models import utcnow
from gateway.tokens import estimate_tokens
from gateway.untrusted import storable
from memory.continuity.handoff_models import Profile
from memory.models import MemorySummary

PROFILE_HEADER = "What I know about you (curated profile)"
LINE_CHARS = 200
# The observations table belongs to persona/, which memory/ may not import (the layer
# rule): it is read through a lightweight table construct of the columns used.
_OBSERVATIONS = sa.table(
    "observations",
    sa.column("id", sa.Integer),
    sa.column("person_id", sa.Integer),
    sa.column("text", sa.Text),
    sa.column("priority", sa.String),
    sa.column("status", sa.String),
    sa.column("generation", sa.Integer),
)
_PRIORITY = {"high": 0, "medium": 1, "low": 2}
_QUOTED = re.compile(r"^- “(.*)” \((\d{4}-\d\d-\d\d)\)$")


@dataclass(frozen=True)
class ProfileLine:
    text: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class ProfileInfo:
    profile_id: int
    person_id: int
    lines: tuple[ProfileLine, ...]
    tokens: int
    method: str
    created_at: datetime


def _cut(text: str) -> str:
    line = " ".join(storable(text).split())
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


def summary_lines(
    category: str, text: str, summary_id: int, item_ids: list[int]
) -> list[ProfileLine]:
    """A summary's lines: an extractive one's quotes (each with its item), or a model's
    sentences (with the summary's items)."""
    out: list[ProfileLine] = []
    quotes = [m for m in (_QUOTED.match(raw.strip()) for raw in text.splitlines()) if m]
    if quotes:
        for n, match in enumerate(quotes):
            sources = [f"summary:{summary_id}"]
            if n < len(item_ids):
                sources.append(f"item:{item_ids[n]}")
            out.append(ProfileLine(_cut(f"{category}: {match.group(1)}"), tuple(sources)))
        return out
    for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
        if sentence:
            out.append(ProfileLine(_cut(f"{category}: {sentence}"), (f"summary:{summary_id}",)))
    return out


def render_lines(lines: list[ProfileLine] | tuple[ProfileLine, ...]) -> str:
    return "\n".join([f"{PROFILE_HEADER}:", *(f"- {line.text}" for line in lines)])


# Built once, the person bound at execution (every turn's prompt reads it; issue 28).
# Its columns, not the mapped class: Core rows (same attribute names) cost the reader
# thread no ORM session or identity map.
_LATEST = (
    select(Profile.__table__)
    .where(Profile.person_id == bindparam("person_id"))
    .order_by(Profile.id.desc())
    .limit(1)
)


class ProfileBook:
    def __init__(self, store: Store, config: ContinuityConfig) -> None:
        self.store = store
        self.config = config

    async def candidates(self, person_id: int) -> list[ProfileLine]:
        """Every line the profile could hold, best first: observations (the reflector's,
        then by priority), then the newest summary of each category, round-robin."""
        async with self.store.reader() as session:
            observations = list(
                await session.execute(
                    select(
                        _OBSERVATIONS.c.id,
                        _OBSERVATIONS.c.text,
                        _OBSERVATIONS.c.priority,
                        _OBSERVATIONS.c.generation,
                    )
                    .where(
                        _OBSERVATIONS.c.person_id == person_id,
                        _OBSERVATIONS.c.status == "active",
                    )
                    .order_by(_OBSERVATIONS.c.id.desc())
                    # The cap comes later; this bounds the read for a person with
                    # thousands of observations.
                    .limit(500)
                )
            )
            newest = (
                select(MemorySummary.category, func.max(MemorySummary.version).label("v"))
                .where(MemorySummary.person_id == person_id)
                .group_by(MemorySummary.category)
                .subquery()
            )
            summaries = list(
                await session.scalars(
                    select(MemorySummary)
                    .join(
                        newest,
                        (MemorySummary.category == newest.c.category)
                        & (MemorySummary.version == newest.c.v),
                    )
                    .where(MemorySummary.person_id == person_id)
                    .order_by(MemorySummary.category)
                )
            )
        ranked = sorted(
            observations,
            key=lambda o: (-(o.generation or 0), _PRIORITY.get(o.priority, 3), -o.id),
        )
        lines = [ProfileLine(_cut(o.text), (f"observation:{o.id}",)) for o in ranked if o.text]
        per_category = [
            summary_lines(s.category, s.text, s.id, list(s.item_ids or []))
            for s in summaries
            if s.text
        ]
        # Round-robin over categories: a long one does not crowd the others out.
        depth = max((len(c) for c in per_category), default=0)
        for n in range(depth):
            lines += [c[n] for c in per_category if n < len(c)]
        # The same fact from an observation and a summary goes in once.
        seen: set[str] = set()
        unique: list[ProfileLine] = []
        for line in lines:
            key = line.text.lower()
            if key not in seen:
                seen.add(key)
                unique.append(line)
        return unique

    def cap(self, lines: list[ProfileLine]) -> list[ProfileLine]:
        """The lines that fit in ``profile_budget_tokens``, header included, in order."""
        kept: list[ProfileLine] = []
        for line in lines:
            if estimate_tokens(render_lines([*kept, line])) <= self.config.profile_budget_tokens:
                kept.append(line)
        return kept

    async def rebuild(self, person_id: int, at: datetime | None = None) -> bool:
        """Build the profile again; whether a new version was written."""
        kept = self.cap(await self.candidates(person_id))
        current = await self.latest(person_id)
        if current is not None and list(current.lines) == kept:
            return False
        if current is None and not kept:
            return False
        async with self.store.session() as session:
            payload: list[dict[str, Any]] = [
                {"text": line.text, "sources": list(line.sources)} for line in kept
            ]
            session.add(
                Profile(
                    person_id=person_id,
                    lines=payload,
                    tokens=estimate_tokens(render_lines(kept)) if kept else 0,
                    method="extractive",
                    created_at=at or utcnow(),
                )
            )
        return True

    async def latest(self, person_id: int) -> ProfileInfo | None:
        # Every turn's prompt reads this: one hop on a reader thread (issue 28).
        return self.profile_of(await self.store.read(self.latest_read(person_id).work))

    def latest_read(self, person_id: int) -> StageRead[Row[Any] | None]:
        """What ``latest`` reads (the profile stage declares it: gateway/prompt.py)."""
        params = {"person_id": person_id}
        return StageRead("profile", lambda connection: connection.execute(_LATEST, params).first())

    def profile_of(self, row: Row[Any] | None) -> ProfileInfo | None:
        """``latest`` from the row ``latest_read`` read."""
        if row is None:
            return None
        lines = tuple(
            ProfileLine(str(e.get("text", "")), tuple(str(s) for s in e.get("sources", ())))
            for e in row.lines or []
        )
        return ProfileInfo(row.id, row.person_id, lines, row.tokens, row.method, row.created_at)

    def render(self, profile: ProfileInfo | None) -> str:
        if profile is None or not profile.lines:
            return ""
        return render_lines(profile.lines)

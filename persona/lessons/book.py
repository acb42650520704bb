"""The lessons in the store: learned, repeated, replaced, edited, and picked for a prompt.

Rules the book keeps for every writer (the after-turn stage, the panel, the CLI):

- a lesson's text is one line of 1 to ``max_chars`` characters; anything else is
  refused with ``InputError`` and nothing is written;
- a lesson the person teaches again (same slot and wording, the same normalised
  text, or an embedding at least ``dedupe_similarity`` close) is one lesson
  taught twice: its ``hits`` grow, no copy is stored;
- a lesson on the slot of an older one ("call me Bob" after "don't call me Bob")
  replaces it: the old row stays, linked through ``replaced_by``, out of the prompt;
- the prompt gets a person's lessons and the global ones (a person's lesson on a
  slot hides the global one on it) within ``budget_tokens``; past the budget the
  least-taught, then oldest, are left out of that prompt and listed as such.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Row, bindparam, or_, select

from gateway.errors import InputError
from gateway.prompt import StageRead
from gateway.store import Store
from gateway.store.models import Message, utcnow
from gateway.tokens import estimate_tokens
from gateway.untrusted import storable
from persona.judge import TextEmbedder
from persona.models import Lesson, LessonOrigin

log = logging.getLogger(__name__)

HEADER = "Lessons from the person's corrections (always follow them):"


@dataclass(frozen=True)
class LessonInfo:
    lesson_id: int
    person_id: int | None
    text: str
    slot: str
    origin: LessonOrigin
    author: str
    source_message_id: int | None
    enabled: bool
    hits: int
    tokens: int
    replaced_by: int | None
    created_at: datetime
    updated_at: datetime
    # The text of the message it came from (None when it has none or it was deleted).
    source_text: str | None = None


@dataclass(frozen=True)
class Learned:
    """What ``learn`` did: added a lesson, counted a repeat, or replaced older ones."""

    lesson: LessonInfo
    action: str  # "added", "repeated", "replaced"
    replaced: tuple[int, ...] = ()


@dataclass(frozen=True)
class PromptLessons:
    """The lessons one prompt carries, and those the budget left out of it."""

    kept: tuple[LessonInfo, ...]
    left_out: tuple[LessonInfo, ...]

    def render(self) -> str:
        if not self.kept:
            return ""
        return "\n".join([HEADER, *(f"- {lesson.text}" for lesson in self.kept)])


def normalise(text: str) -> str:
    """Lower case, words only: "Don't use emojis!" and "don't use emojis" are one text."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower().replace("\u2019", "'")))


def _info(row: Lesson | Row[Any], source_text: str | None = None) -> LessonInfo:
    return LessonInfo(
        row.id,
        row.person_id,
        row.text,
        row.slot,
        row.origin,
        row.author,
        row.source_message_id,
        row.enabled,
        row.hits,
        row.tokens,
        row.replaced_by,
        row.created_at,
        row.updated_at,
        source_text,
    )


# Built once, the person bound at execution: building it cost the event loop a
# share of every turn (issue 28, "CPU per turn").
# Its columns, not the mapped class: Core rows (same attribute names) cost the reader
# thread no ORM session or identity map.
_FOR_PROMPT = (
    select(Lesson.__table__)
    .where(
        or_(Lesson.person_id == bindparam("person_id"), Lesson.person_id.is_(None)),
        Lesson.enabled.is_(True),
        Lesson.replaced_by.is_(None),
    )
    .order_by(Lesson.id)
)


class LessonBook:
    """Every read and write of lessons goes through here."""

    def __init__(
        self,
        store: Store,
        *,
        max_chars: int = 400,
        budget_tokens: int = 300,
        embedder: TextEmbedder | None = None,
        dedupe_similarity: float = 0.9,
    ) -> None:
        self.store = store
        self.max_chars = max_chars
        self.budget_tokens = budget_tokens
        self.embedder = embedder
        self.dedupe_similarity = dedupe_similarity

    def clean(self, text: str) -> str:
        """The text as stored, or ``InputError`` (too long, empty, not one line)."""
        if not isinstance(text, str):
            raise InputError("a lesson must be text")
        if len(text) > self.max_chars:
            raise InputError(
                f"a lesson is at most {self.max_chars} characters (lessons.max_chars), "
                f"got {len(text)}"
            )
        cleaned = storable(" ".join(text.split()))
        if not cleaned:
            raise InputError("a lesson needs some text")
        return cleaned

    async def _similar(self, text: str, others: Sequence[Lesson]) -> Lesson | None:
        """The lesson among ``others`` that says the same as ``text``, if any."""
        key = normalise(text)
        for row in others:
            if normalise(row.text) == key:
                return row
        embedder = self.embedder
        if embedder is None or not others:
            return None
        vectors = await asyncio.to_thread(embedder.embed, [text, *(r.text for r in others)])
        similarities = vectors[1:] @ vectors[0]
        best = int(np.argmax(similarities))
        return others[best] if float(similarities[best]) >= self.dedupe_similarity else None

    async def learn(
        self,
        text: str,
        *,
        person_id: int | None,
        slot: str = "",
        origin: LessonOrigin = LessonOrigin.MANUAL,
        author: str = "",
        source_message_id: int | None = None,
    ) -> Learned:
        """Store what a person (or the panel, the CLI, the judge) taught; see the module."""
        text = self.clean(text)
        slot = slot[:200]
        now = utcnow()
        async with self.store.session() as session:
            scope = (
                Lesson.person_id.is_(None) if person_id is None else Lesson.person_id == person_id
            )
            current = list(
                (
                    await session.scalars(
                        select(Lesson)
                        .where(scope, Lesson.replaced_by.is_(None))
                        .order_by(Lesson.id)
                        .with_for_update()
                    )
                ).all()
            )
            enabled = [r for r in current if r.enabled]
            same_slot = [r for r in current if slot and r.slot == slot]
            repeat = next(
                (r for r in same_slot if r.enabled and normalise(r.text) == normalise(text)), None
            )
            if repeat is None and not [r for r in same_slot if r.enabled]:
                # A lesson without a slot (or on a new one) may still say what another says.
                repeat = await self._similar(text, [r for r in enabled if not r.slot or not slot])
            if repeat is not None:
                repeat.hits += 1
                repeat.updated_at = now
                await session.flush()
                return Learned(_info(repeat), "repeated")
            row = Lesson(
                person_id=person_id,
                text=text,
                slot=slot,
                origin=origin,
                author=author[:100],
                source_message_id=source_message_id,
                enabled=True,
                hits=1,
                tokens=estimate_tokens(text),
                created_at=now,
                updated_at=now,
            )
            session.add(row)
            await session.flush()
            # A newer lesson on the slot replaces the older ones (a disabled one too:
            # the person taught it again, differently or not), linked, never deleted.
            for old in same_slot:
                old.replaced_by = row.id
                old.updated_at = now
            await session.flush()
            replaced = tuple(old.id for old in same_slot)
            if replaced:
                log.info("lesson %d replaces %s: %s", row.id, list(replaced), text)
            return Learned(_info(row), "replaced" if replaced else "added", replaced)

    async def listed(
        self, person_id: int | None = None, *, everyone: bool = True
    ) -> list[LessonInfo]:
        """Lessons newest first, with their source message's text: every person's when
        ``everyone``, else ``person_id``'s own (None: the global ones)."""
        async with self.store.reader() as session:
            query = (
                select(Lesson, Message.text)
                .outerjoin(Message, Message.id == Lesson.source_message_id)
                .order_by(Lesson.id.desc())
            )
            if not everyone:
                query = query.where(
                    Lesson.person_id.is_(None)
                    if person_id is None
                    else Lesson.person_id == person_id
                )
            rows = (await session.execute(query)).all()
        return [_info(row, text) for row, text in rows]

    async def get(self, lesson_id: int) -> LessonInfo:
        async with self.store.reader() as session:
            found = (
                await session.execute(
                    select(Lesson, Message.text)
                    .outerjoin(Message, Message.id == Lesson.source_message_id)
                    .where(Lesson.id == lesson_id)
                )
            ).first()
        if found is None:
            raise InputError(f"lesson {lesson_id} does not exist", code="not_found")
        return _info(found[0], found[1])

    async def update(
        self, lesson_id: int, *, text: str | None = None, enabled: bool | None = None
    ) -> LessonInfo:
        """Edit a lesson's text or switch it on or off (checked before anything is written)."""
        cleaned = self.clean(text) if text is not None else None
        async with self.store.session() as session:
            row = await session.get(Lesson, lesson_id)
            if row is None:
                raise InputError(f"lesson {lesson_id} does not exist", code="not_found")
            if cleaned is not None:
                row.text = cleaned
                row.tokens = estimate_tokens(cleaned)
            if enabled is not None:
                row.enabled = enabled
            row.updated_at = utcnow()
            await session.flush()
            info = _info(row)
        return info

    async def delete(self, lesson_id: int) -> LessonInfo:
        """Delete one lesson for good (the person asked; the budget never does this)."""
        async with self.store.session() as session:
            row = await session.get(Lesson, lesson_id)
            if row is None:
                raise InputError(f"lesson {lesson_id} does not exist", code="not_found")
            info = _info(row)
            await session.delete(row)
        return info

    async def for_prompt(self, person_id: int) -> PromptLessons:
        """The lessons of a person's prompt (theirs and the global ones) within the budget."""
        # Every turn's prompt reads this: one hop on a reader thread (issue 28).
        rows = await self.store.read(self.prompt_read(person_id).work)
        return self.prompt_lessons(person_id, rows)

    def prompt_read(self, person_id: int) -> StageRead[Sequence[Row[Any]]]:
        """What ``for_prompt`` reads (the lessons stage declares it: gateway/prompt.py)."""
        params = {"person_id": person_id}
        return StageRead("lessons", lambda c: c.execute(_FOR_PROMPT, params).all())

    def prompt_lessons(self, person_id: int, rows: Sequence[Row[Any]]) -> PromptLessons:
        """``for_prompt`` from the rows ``prompt_read`` read."""
        own_slots = {r.slot for r in rows if r.person_id is not None and r.slot}
        candidates = [r for r in rows if r.person_id is not None or r.slot not in own_slots]
        # Most-taught first, then newest: what the budget keeps.
        ranked = sorted(candidates, key=lambda r: (r.hits, r.created_at, r.id), reverse=True)
        budget = self.budget_tokens - estimate_tokens(HEADER)
        kept_ids: set[int] = set()
        for row in ranked:
            cost = row.tokens + 1
            if cost <= budget:
                kept_ids.add(row.id)
                budget -= cost
        # In the order they were learned: a new lesson changes only the prefix's end.
        kept = tuple(_info(r) for r in candidates if r.id in kept_ids)
        left_out = tuple(_info(r) for r in candidates if r.id not in kept_ids)
        if left_out:
            log.debug(
                "lessons of person %d over budget: %s left out",
                person_id,
                [r.lesson_id for r in left_out],
            )
        return PromptLessons(kept, left_out)

"""Lessons in the turn: in every prompt's cached prefix, and learned after each turn.

- ``LessonsStage`` (context) adds the person's lessons and the global ones to the
  PERSONA block, which sits in the cached prefix: they reach every turn, not
  only turns whose words happen to retrieve them.
- ``LearnStage`` (after the turn) reads the person's message for a correction,
  and the judge's verdicts of the conversation not read yet for mistakes. The
  rules run inline (microseconds); the utility model runs in a supervised task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, insert, select, update

from gateway.brains.base import BlockKind, Brain
from gateway.config import LessonsConfig
from gateway.prompt import PromptDraft, StageRead, TurnContext, TurnOutcome
from gateway.store import Store
from gateway.store.models import Message, utcnow
from gateway.supervisor import TaskSupervisor
from persona.judge import TextEmbedder
from persona.lessons.book import Learned, LessonBook
from persona.lessons.learn import (
    Extractor,
    LLMExtractor,
    RuleExtractor,
    broken_rules,
    rule_lessons,
    steers,
    weak_dimensions,
)
from persona.models import LessonOrigin, LessonScan, SyncScoreRow, VerdictStatus

log = logging.getLogger(__name__)

MODEL_BRAINS = ("claude", "openai")


# The conversation's verdicts after its scan cursor (the cursor read as a subquery:
# one statement). Built once, the conversation bound at execution: building it cost
# the event loop a share of every turn (issue 28, "CPU per turn"). Its columns, not
# the mapped class: Core rows (same attribute names) cost no ORM session.
_UNREAD = (
    select(SyncScoreRow.__table__)
    .where(
        SyncScoreRow.conversation_id == bindparam("conversation_id"),
        SyncScoreRow.id
        > func.coalesce(
            select(LessonScan.scanned_through_verdict_id)
            .where(LessonScan.conversation_id == bindparam("conversation_id"))
            .scalar_subquery(),
            0,
        ),
    )
    .order_by(SyncScoreRow.id)
)


@dataclass(frozen=True)
class LessonsStage:
    book: LessonBook

    @property
    def name(self) -> str:
        return "lessons"

    async def declare(self, turn: TurnContext) -> StageRead[Sequence[Row[Any]]]:
        return self.book.prompt_read(turn.person_id)

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        rows = await draft.read(self.book.prompt_read(turn.person_id), self.book.store)
        draft.add(BlockKind.PERSONA, self.book.prompt_lessons(turn.person_id, rows).render())


@dataclass
class LessonLoop:
    """The lessons' parts, built once by the composition root."""

    store: Store
    book: LessonBook
    extractor: Extractor
    supervisor: TaskSupervisor
    config: LessonsConfig
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def context_stage(self) -> LessonsStage:
        return LessonsStage(self.book)

    @property
    def after_stage(self) -> LearnStage:
        return LearnStage(self)

    def _spawn(self, name: str, coro: Coroutine[Any, Any, object]) -> None:
        task = self.supervisor.spawn(name, coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def idle(self, timeout: float) -> bool:
        """Wait until no extraction of this loop runs; True when they all ended."""
        if not self._tasks:
            return True
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        return not pending

    async def learn_turn(self, turn: TurnContext) -> None:
        previous = next((m.text for m in reversed(turn.recent) if m.role == "assistant"), "")
        if isinstance(self.extractor, RuleExtractor):
            await self.from_message(turn, previous)
        else:
            self._spawn(f"lessons-turn-{turn.turn_id}", self.from_message(turn, previous))
        if self.config.from_judge:
            await self.scan_verdicts(turn.conversation_id, turn.person_id)

    async def from_message(self, turn: TurnContext, previous_reply: str) -> list[Learned]:
        candidates = await self.extractor.from_message(turn.text, previous_reply)
        learned = []
        for candidate in candidates:
            if steers(candidate.text):
                log.warning(
                    "turn %d: not learned (steers the agent): %s", turn.turn_id, candidate.text
                )
                continue
            done = await self.book.learn(
                candidate.text,
                person_id=turn.person_id,
                slot=candidate.slot,
                origin=LessonOrigin.CORRECTION,
                author=self.extractor.name,
                source_message_id=turn.message_id,
            )
            log.info("turn %d: lesson %s: %s", turn.turn_id, done.action, done.lesson.text)
            learned.append(done)
        return learned

    async def scan_verdicts(self, conversation_id: int, person_id: int) -> list[Learned]:
        """Lessons from the conversation's judged mistakes not read yet (each read once)."""
        # Read first: most turns have no new verdict, and then cost no write.
        # One statement, one hop on a reader thread (every turn runs it; issue 28).
        params = {"conversation_id": conversation_id}
        rows = await self.store.read(lambda connection: connection.execute(_UNREAD, params).all())
        if not rows:
            return []
        # The lane runs one turn of a conversation at a time: no other writer of its cursor.
        await self.store.write(partial(_move_cursor, conversation_id, rows[-1].id, utcnow()))
        found = [(row.reply_message_id, row.status, dict(row.detail), row) for row in rows]
        weak = {row.id: weak_dimensions(row, self.config.judge_mistake_below) for row in rows}
        learned: list[Learned] = []
        for reply_id, status, detail, row in found:
            if status is not VerdictStatus.SCORED:
                continue
            candidates = rule_lessons(broken_rules(detail))
            notes = detail.get("notes")
            if not candidates and weak[row.id] and isinstance(notes, str) and notes.strip():
                reply = await self._text(reply_id)
                asked = await self.extractor.from_judgement(reply, notes, weak[row.id])
                candidates = [c for c in asked if not steers(c.text)]
            for candidate in candidates:
                done = await self.book.learn(
                    candidate.text,
                    person_id=person_id,
                    slot=candidate.slot,
                    origin=LessonOrigin.JUDGE,
                    author=f"judge:{row.judge}",
                    source_message_id=reply_id,
                )
                log.info("verdict %d: lesson %s: %s", row.id, done.action, done.lesson.text)
                learned.append(done)
        return learned

    async def _text(self, message_id: int | None) -> str:
        if message_id is None:
            return ""
        async with self.store.reader() as session:
            text = await session.scalar(select(Message.text).where(Message.id == message_id))
        return text or ""


@dataclass(frozen=True)
class LearnStage:
    loop: LessonLoop

    @property
    def name(self) -> str:
        return "learn-lessons"

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        await self.loop.learn_turn(turn)


def choose_extractor(config: LessonsConfig, brain: Brain) -> Extractor:
    kind = config.extractor
    if kind == "auto":
        kind = "llm" if brain.name in MODEL_BRAINS else "rules"
    if kind == "llm":
        return LLMExtractor(brain, max_tokens=config.max_tokens, max_chars=config.max_chars)
    return RuleExtractor()


def build_book(config: LessonsConfig, store: Store, embedder: TextEmbedder | None) -> LessonBook:
    return LessonBook(
        store,
        max_chars=config.max_chars,
        budget_tokens=config.budget_tokens,
        embedder=embedder,
        dedupe_similarity=config.dedupe_similarity,
    )


def build_lesson_loop(
    config: LessonsConfig,
    store: Store,
    brain: Brain,
    supervisor: TaskSupervisor,
    embedder: TextEmbedder | None = None,
    extractor: Extractor | None = None,
) -> LessonLoop:
    """Everything of the lessons; ``extractor`` replaces the configured one (tests)."""
    return LessonLoop(
        store,
        build_book(config, store, embedder),
        extractor if extractor is not None else choose_extractor(config, brain),
        supervisor,
        config,
    )


# The scan cursor's statements, built once (every judged turn moves it; issue 28).
_MOVE_CURSOR = update(LessonScan).where(LessonScan.conversation_id == bindparam("b_conversation"))
_NEW_CURSOR = insert(LessonScan)


def _move_cursor(conversation_id: int, through: int, at: datetime, connection: Connection) -> None:
    """The conversation's scan cursor set to ``through``: plain Core in the store's
    writer, one hop (every judged turn moves it; issue 28)."""
    values = {"scanned_through_verdict_id": through, "updated_at": at}
    moved = connection.execute(_MOVE_CURSOR, {"b_conversation": conversation_id, **values})
    if not moved.rowcount:
        connection.execute(_NEW_CURSOR, {"conversation_id": conversation_id, **values})

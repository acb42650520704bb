"""Working memory and decisions in the turn: two blocks of the cached prefix, and a
listener after each turn that reads the person's message with the rules.

Both blocks go into the PERSONA block, which is the cached prefix, after the
lessons' (the composition root adds these stages right after the lessons stage):
persona → lessons → profile → working memory → handoff → decisions, then the
observations. Their text has dates and whole days only, so the prefix changes when
a focus or decision does (or, for the focus's age, once a day), not every turn.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row

from gateway.brains.base import BlockKind
from gateway.config import ContinuityConfig
from gateway.errors import InputError
from gateway.prompt import PromptDraft, StageRead, TurnContext, TurnOutcome
from gateway.store import Store
from memory.continuity.book import ContinuityBook, TextEmbedder, decisions_of_rows
from memory.continuity.handoff import HandoffBook, HandoffNote, notes_of
from memory.continuity.models import Origin
from memory.continuity.profile import ProfileBook
from memory.continuity.rules import (
    content_words,
    decisions_of,
    ends_focus,
    focus_done,
    focus_of,
    reverses,
    tags_of,
)
from memory.utility import UtilityModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FocusStage:
    book: ContinuityBook

    @property
    def name(self) -> str:
        return "working-memory"

    async def declare(self, turn: TurnContext) -> StageRead[list[Row[Any]]]:
        return self.book.focus_read(turn.person_id)

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        rows = await draft.read(self.book.focus_read(turn.person_id), self.book.store)
        state = self.book.focus_of(turn.person_id, rows, turn.received_at)
        draft.add(BlockKind.PERSONA, self.book.render_focus(state))


@dataclass(frozen=True)
class ProfileStage:
    """The curated profile: after the lessons, before working memory."""

    profiles: ProfileBook

    @property
    def name(self) -> str:
        return "profile"

    async def declare(self, turn: TurnContext) -> StageRead[Row[Any] | None]:
        return self.profiles.latest_read(turn.person_id)

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        row = await draft.read(self.profiles.latest_read(turn.person_id), self.profiles.store)
        draft.add(BlockKind.PERSONA, self.profiles.render(self.profiles.profile_of(row)))


@dataclass(frozen=True)
class HandoffStage:
    """The person's newest handoff note (any channel): after working memory, before
    the decisions."""

    handoffs: HandoffBook

    @property
    def name(self) -> str:
        return "handoff"

    async def declare(self, turn: TurnContext) -> StageRead[Sequence[Row[Any]]]:
        # The newest note, as ``HandoffBook.latest``.
        return self.handoffs.history_read(turn.person_id, limit=1)

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        read = self.handoffs.history_read(turn.person_id, limit=1)
        notes = notes_of(await draft.read(read, self.handoffs.store))
        draft.add(BlockKind.PERSONA, self.handoffs.render(notes[0] if notes else None))


@dataclass(frozen=True)
class DecisionsStage:
    book: ContinuityBook

    @property
    def name(self) -> str:
        return "decisions"

    async def declare(self, turn: TurnContext) -> StageRead[list[Row[Any]]]:
        return self.book.decisions_read(turn.person_id, self.book.config.decisions_in_prompt)

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        read = self.book.decisions_read(turn.person_id, self.book.config.decisions_in_prompt)
        found = decisions_of_rows(await draft.read(read, self.book.store))
        draft.add(BlockKind.PERSONA, self.book.render_decisions(found))


@dataclass(frozen=True)
class ContinuityListenStage:
    """After the turn: the focus and decisions the person's message states."""

    book: ContinuityBook

    @property
    def name(self) -> str:
        return "continuity-listen"

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        try:
            await self._focus(turn)
            await self._decisions(turn)
        except InputError as exc:
            # Too long to keep: the message stays stored; nothing half-written.
            log.info("turn %d: not kept as focus or decision: %s", turn.turn_id, exc)

    async def _focus(self, turn: TurnContext) -> None:
        book, at = self.book, turn.received_at
        done, found = focus_done(turn.text), focus_of(turn.text)
        if done is None and found is None:
            # The message says nothing of a focus (most do): no need to read the current one.
            return
        current = await book.focus(turn.person_id, at)
        if done is not None and current is not None and ends_focus(done.text, current.focus.text):
            await book.clear_focus(
                turn.person_id, origin=Origin.CHAT, source_message_id=turn.message_id, at=at
            )
            log.info("turn %d: focus cleared: %s", turn.turn_id, current.focus.text)
            return
        if found is None:
            return
        if (
            current is not None
            and not current.faded
            and content_words(found.text) == content_words(current.focus.text)
        ):
            # The same focus said again: a touch, with the person's words as the update.
            await book.update_focus(
                turn.person_id,
                found.sentence,
                origin=Origin.CHAT,
                source_message_id=turn.message_id,
                at=at,
            )
            return
        await book.set_focus(
            turn.person_id,
            found.text,
            origin=Origin.CHAT,
            source_message_id=turn.message_id,
            at=at,
        )
        log.info("turn %d: focus set: %s", turn.turn_id, found.text)

    async def _decisions(self, turn: TurnContext) -> None:
        found = decisions_of(turn.text)
        if not found or await self.book.logged_from(turn.message_id):
            return
        tags = tags_of(turn.text)
        for decision in found:
            reversed_id = (
                await self.book.reversed_one(turn.person_id, decision.text, turn.conversation_id)
                if reverses(decision.sentence)
                else None
            )
            logged = await self.book.log_decision(
                turn.person_id,
                decision.text,
                tags=tags,
                origin=Origin.CHAT,
                reverses_id=reversed_id,
                source_message_id=turn.message_id,
                at=turn.received_at,
            )
            log.info("turn %d: decision #%d: %s", turn.turn_id, logged.decision_id, logged.text)


@dataclass(frozen=True)
class ContinuityParts:
    """Built once by the composition root: the two context stages and the listener."""

    book: ContinuityBook
    handoffs: HandoffBook
    profiles: ProfileBook

    @property
    def context_stages(self) -> list[ProfileStage | FocusStage | HandoffStage | DecisionsStage]:
        # The fixed order after the lessons: profile → working memory → last
        # handoff → decisions (the observations come after, from the persona loop).
        stages: list[ProfileStage | FocusStage | HandoffStage | DecisionsStage] = []
        if self.book.config.profile_enabled:
            stages.append(ProfileStage(self.profiles))
        stages.append(FocusStage(self.book))
        if self.book.config.handoff_enabled:
            stages.append(HandoffStage(self.handoffs))
        stages.append(DecisionsStage(self.book))
        return stages

    async def session_ended(self, person_id: int, conversation_id: int) -> HandoffNote | None:
        """For ``Sessions(on_end=...)``: the session's handoff note."""
        if not self.book.config.handoff_enabled:
            return None
        return await self.handoffs.session_ended(person_id, conversation_id)

    @property
    def after_stage(self) -> ContinuityListenStage:
        return ContinuityListenStage(self.book)


def build_continuity(
    config: ContinuityConfig,
    store: Store,
    embedder: TextEmbedder | None = None,
    utility: UtilityModel | None = None,
) -> ContinuityParts:
    return ContinuityParts(
        ContinuityBook(store, config, embedder),
        HandoffBook(store, config, utility),
        ProfileBook(store, config),
    )

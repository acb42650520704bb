"""The persona loop's three context stages (before the prompt is composed, in this
order after the core's):

- ``PersonaStateStage`` extends the core's persona contract (``PersonaStage``)
  with the current PersonaState: measured voice and confirmed hard rules;
- ``ObservationsStage`` adds the OBSERVATIONS block (stable between passes);
- ``AnchorStage`` runs after the history stage: it puts back any message the
  observer has not read yet that the history budget dropped, applies the
  conversation's standing rebase, and carries out the planner's action for
  this turn (reinforcement, anchors or a new rebase), storing it with the turn.

Its after-turn stages and the tasks they start are ``persona.loop``; building the
loop from config is ``persona.build``.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, func, select

from gateway.brains.base import BlockKind, ChatMessage
from gateway.prompt import (
    HistoryEntry,
    PastMessage,
    PromptDraft,
    StageRead,
    TurnContext,
)
from gateway.store import Store
from gateway.store.models import Turn, utcnow
from gateway.tokens import estimate_tokens
from persona.anchor import (
    REINFORCE_PREFIX,
    PlannerSettings,
    build_rebase,
    place_anchors,
    plan,
)
from persona.judge import (
    Tier,
)
from persona.models import ActionKind, PersonaAction
from persona.observation.log import ObservationLog, stored_of
from persona.state import PersonaBook
from persona.turnfacts import facts_read, persona_turn

# -- history helpers -------------------------------------------------------------


def restore_unobserved(
    recent: Sequence[PastMessage],
    history: Sequence[HistoryEntry],
    observed_through: int,
    packed: Container[int] = frozenset(),
) -> tuple[list[HistoryEntry], list[int]]:
    """The history with every unobserved message in it, in order; and the ids put back.

    The history budget may drop old messages, but one the observer has not
    read yet would then be lost to the agent entirely: it stays until observed.
    One the memory pack holds (``packed``) is not lost, and stays out: a
    message is in the pack or in the history, never both.
    """
    present = {e.message_id for e in history if e.message_id is not None}
    missing = [
        m
        for m in recent
        if m.message_id > observed_through
        and m.message_id not in present
        and m.message_id not in packed
    ]
    if not missing:
        return list(history), []
    merged: list[HistoryEntry] = []
    pending = list(missing)
    for entry in history:
        while pending and entry.message_id is not None and pending[0].message_id < entry.message_id:
            past = pending.pop(0)
            merged.append(HistoryEntry(past.role, past.text, past.message_id))
        merged.append(entry)
    merged.extend(HistoryEntry(p.role, p.text, p.message_id) for p in pending)
    # The Messages API wants a user message first: bring the restored reply's question too.
    if merged and merged[0].role == "assistant":
        first_id = merged[0].message_id
        before = [m for m in recent if first_id is not None and m.message_id < first_id]
        question = next((m for m in reversed(before) if m.role == "user"), None)
        if question is not None:
            merged.insert(0, HistoryEntry("user", question.text, question.message_id))
    return merged, [m.message_id for m in missing]


# -- context stages -------------------------------------------------------------


@dataclass(frozen=True)
class PersonaStateStage:
    """The PersonaState after the core's persona contract, in the same cached block."""

    book: PersonaBook

    @property
    def name(self) -> str:
        return "persona_state"

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        facts = await persona_turn(self.book, turn, draft)
        draft.add(BlockKind.PERSONA, facts.version.state.render_contract())

    async def declare(self, turn: TurnContext) -> StageRead[tuple[Any, ...]]:
        # The turn's persona facts, which the anchor stage reuses (``persona_turn``).
        return facts_read(turn.conversation_id)


@dataclass(frozen=True)
class ObservationsStage:
    log: ObservationLog
    budget_tokens: int

    @property
    def name(self) -> str:
        return "observations"

    async def declare(self, turn: TurnContext) -> StageRead[Sequence[Row[Any]]]:
        return self.log.active_read(turn.person_id)

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        rows = await draft.read(self.log.active_read(turn.person_id), self.log.store)
        block = await self.log.block_of(turn.person_id, stored_of(rows), self.budget_tokens)
        draft.add(BlockKind.OBSERVATIONS, block)


@dataclass(frozen=True)
class AnchorStage:
    """Unobserved-message guard, standing rebase, and this turn's anchor action."""

    store: Store
    log: ObservationLog
    book: PersonaBook
    settings: PlannerSettings
    agent_name: str
    # Off when observing is off: then nothing is ever "observed" and the budget rules.
    guard_unobserved: bool = True

    @property
    def name(self) -> str:
        return "anchor"

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        # Version, cursor, standing rebase and drift: read once for the turn's persona stages.
        facts = await persona_turn(self.book, turn, draft)
        through = facts.observed_through
        if self.guard_unobserved:
            entries, restored = restore_unobserved(
                turn.recent, draft.history, through, draft.packed_message_ids
            )
        else:
            through = max((m.message_id for m in turn.recent), default=0)
            entries = list(draft.history)
            restored = []
        standing, last = facts.standing, facts.latest_action
        # The pipeline counts the turn when it starts; a context built by hand may not.
        turn_number = turn.turn_number or await self._turn_number(turn)
        drift = facts.drift
        since = None if standing is None else turn_number - int(standing["turn_number"])
        # The action taken on the turn just before this one, if any.
        previous = last[0] if last is not None and last[1] == turn_number - 1 else None
        decision = plan(
            self.settings,
            turn_number=turn_number,
            drift=drift,
            history_messages=len(entries),
            turns_since_rebase=since,
            previous_action=previous,
        )
        detail: dict[str, Any] = {"reason": decision.reason, "turn_number": turn_number}
        if restored:
            detail["restored_unobserved"] = restored
        state = facts.version.state
        kind = decision.kind
        guidance = ""
        if kind is ActionKind.REBASE:
            rebase = build_rebase(
                turn.recent,
                keep_turns=self.settings.rebase_keep_turns,
                summary_tokens=self.settings.rebase_summary_tokens,
                observed_through=through,
                agent_name=self.agent_name,
            )
            if rebase is None:
                # Too short to rebase: the strongest thing left is anchoring.
                kind = ActionKind.REINFORCE
            else:
                standing = {
                    "summary": rebase.summary,
                    "base_message_id": rebase.base_message_id,
                    "turn_number": turn_number,
                }
                detail.update(
                    standing,
                    summarized_ids=list(rebase.summarized_ids),
                    unobserved_in_summary=list(rebase.unobserved_in_summary),
                )
        if standing is not None:
            base = int(standing["base_message_id"])
            entries = [e for e in entries if e.message_id is None or e.message_id >= base]
            # The summary bridges to the first kept message; once the history has
            # moved past it (budget), the observations carry the past on their own.
            if any(e.message_id == base for e in entries):
                guidance = str(standing["summary"])
        history = entries
        if kind is ActionKind.ANCHOR:
            anchor = state.render_anchor(
                self.settings.anchor_min_tokens, self.settings.anchor_max_tokens, self.agent_name
            )
            placed, positions = place_anchors(
                [ChatMessage(e.role, e.text) for e in history], anchor
            )
            # An anchor rides on a stored message: the entry stays that message.
            history = [
                HistoryEntry(m.role, m.text, e.message_id)
                for m, e in zip(placed, history, strict=True)
            ]
            detail.update(anchor=anchor, positions=positions, history_messages=len(history))
            if not positions:
                kind = ActionKind.REINFORCE
        if kind in (ActionKind.REINFORCE, ActionKind.ANCHOR, ActionKind.REBASE):
            reinforcement = REINFORCE_PREFIX + state.render_reinforcement(
                self.settings.reinforcement_tokens
            )
            guidance = f"{guidance}\n\n{reinforcement}" if guidance else reinforcement
            detail["reinforcement"] = reinforcement
        if guidance:
            draft.add(BlockKind.GUIDANCE, guidance)
        draft.history = history
        if kind is not None:
            await self._record(turn, kind, drift.tier, drift.ewma, detail)

    async def _turn_number(self, turn: TurnContext) -> int:
        async with self.store.reader() as session:
            count = await session.scalar(
                select(func.count())
                .select_from(Turn)
                .where(Turn.conversation_id == turn.conversation_id, Turn.id <= turn.turn_id)
            )
        return int(count or 0)

    async def _record(
        self,
        turn: TurnContext,
        kind: ActionKind,
        tier: Tier,
        ewma: float | None,
        detail: dict[str, Any],
    ) -> None:
        tokens = sum(
            estimate_tokens(str(detail.get(key, "")))
            for key in ("summary", "anchor", "reinforcement")
        )
        if kind is ActionKind.ANCHOR:
            tokens += estimate_tokens(str(detail.get("anchor", ""))) * (
                len(detail.get("positions", [])) - 1
            )
        async with self.store.session() as session:
            session.add(
                PersonaAction(
                    turn_id=turn.turn_id,
                    conversation_id=turn.conversation_id,
                    kind=kind,
                    tier=tier.value,
                    ewma=ewma,
                    tokens=tokens,
                    detail=detail,
                    created_at=utcnow(),
                )
            )

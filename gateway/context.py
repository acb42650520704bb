"""The core's context stages: the persona contract, the clock, recent history."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import UTC
from importlib import resources
from pathlib import Path

from gateway.brains.base import BlockKind
from gateway.clock import local, zone_label
from gateway.prompt import HistoryEntry, PastMessage, PromptDraft, TurnContext
from gateway.store import Store
from gateway.store.repo import replied_by
from gateway.tokens import estimate_tokens
from gateway.zones import PersonZones


def load_persona(path: str, agent_name: str) -> str:
    """The persona file (or the bundled default) with ``{name}`` filled in."""
    if path:
        text = Path(path).read_text(encoding="utf-8")
    else:
        text = resources.files("persona").joinpath("default.md").read_text(encoding="utf-8")
    return text.replace("{name}", agent_name)


@dataclass(frozen=True)
class PersonaStage:
    """The agent's core identity, always first in the prompt and cached."""

    persona: str

    @property
    def name(self) -> str:
        return "persona"

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        draft.add(BlockKind.PERSONA, self.persona)


@dataclass(frozen=True)
class ClockStage:
    """When and where the message arrived, on the person's clock (``agent.timezone``);
    after the cached prefix, as it changes each turn."""

    zones: PersonZones = field(default_factory=lambda: PersonZones(None, UTC))

    @property
    def name(self) -> str:
        return "clock"

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        zone = await self.zones.of(turn.person_id)
        at = local(turn.received_at, zone)
        when = f"{at:%A %d %B %Y, %H:%M} ({zone_label(zone, at)})"
        draft.add(BlockKind.GUIDANCE, f"The person's message arrived on {when} via {turn.channel}.")


# Conversations whose window start the history stage remembers (least recent dropped).
_STARTS_KEPT = 4096


@dataclass(frozen=True)
class RecentHistoryStage:
    """The newest messages of the conversation that fit the token budget.

    With ``step_tokens``, the window's first message stays put while the window from
    it still fits the budget; when it no longer does, the window starts anew, holding
    at most ``budget_tokens - step_tokens``. Sliding a message a turn would change the
    history's beginning every turn, and with it the provider's cached prefix over the
    history; in steps, turn N+1 repeats turn N's history for several turns. The
    starts live in memory: after a restart a conversation's window starts anew once.
    """

    budget_tokens: int
    step_tokens: int = 0
    # conversation id → the message id its window starts at (turns of one conversation
    # run one at a time, in its lane).
    _starts: OrderedDict[int, int] = field(default_factory=OrderedDict, compare=False, repr=False)

    @property
    def name(self) -> str:
        return "history"

    def _fitting(self, turn: TurnContext, budget: int) -> list[PastMessage]:
        kept: list[PastMessage] = []
        used = estimate_tokens(turn.text)
        for past in reversed(turn.recent):
            if used + past.tokens > budget:
                break
            used += past.tokens
            kept.append(past)
        kept.reverse()
        return kept

    def _window(self, turn: TurnContext) -> list[PastMessage]:
        fits = self._fitting(turn, self.budget_tokens)
        if self.step_tokens <= 0 or not fits:
            return fits
        start = self._starts.get(turn.conversation_id)
        if start is not None and start >= fits[0].message_id:
            kept = [m for m in fits if m.message_id >= start]
        else:
            kept = self._fitting(turn, max(0, self.budget_tokens - self.step_tokens))
        if kept:
            self._starts[turn.conversation_id] = kept[0].message_id
            self._starts.move_to_end(turn.conversation_id)
            while len(self._starts) > _STARTS_KEPT:
                self._starts.popitem(last=False)
        return kept

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        kept = [HistoryEntry(m.role, m.text, m.message_id) for m in self._window(turn)]
        # The Messages API wants the first message from the user.
        while kept and kept[0].role != "user":
            kept.pop(0)
        draft.history = kept
        draft.window_ids = frozenset(e.message_id for e in kept if e.message_id is not None)


@dataclass(frozen=True)
class OfflineNoticeStage:
    """Whether the offline brain already said, in this conversation, that no model is
    configured: read from the stored turns, so a restart does not make it repeat."""

    store: Store
    brain: str = "offline"

    @property
    def name(self) -> str:
        return "offline-notice"

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        given = await replied_by(self.store, turn.conversation_id, self.brain, turn.turn_id)
        draft.recall = replace(draft.recall, offline_notice_given=given)

"""The core's context stages: the persona contract, the clock, recent history."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC
from importlib import resources
from pathlib import Path

from gateway.brains.base import BlockKind
from gateway.clock import local, zone_label
from gateway.prompt import HistoryEntry, PromptDraft, TurnContext
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


@dataclass(frozen=True)
class RecentHistoryStage:
    """The newest messages of the conversation that fit the token budget."""

    budget_tokens: int

    @property
    def name(self) -> str:
        return "history"

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        kept: list[HistoryEntry] = []
        used = estimate_tokens(turn.text)
        for past in reversed(turn.recent):
            if used + past.tokens > self.budget_tokens:
                break
            used += past.tokens
            kept.append(HistoryEntry(past.role, past.text, past.message_id))
        kept.reverse()
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

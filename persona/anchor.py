"""The anchor planner: what the next prompt does about drift.

Before each prompt is composed the planner reads the turn count and the
conversation's SyncScore EWMA, tier and trend:

- mild drift: a short reinforcement of the voice for the next turn;
- moderate drift: persona anchors (50-100 tokens, built from the
  PersonaState) inside long histories, at about a third and two thirds;
- severe drift: a rebase — the persona contract and the observations (the
  system prefix), a compacted summary of the earlier turns and only the last
  K turns. The rebase holds for the turns after it, until the next one.

How anchors travel: Claude's Messages API has one system prompt and no
system messages mid-conversation, and roles must alternate from a user turn.
A reinforcement therefore goes into the GUIDANCE system block, which sits
after the cached prefix (persona, observations) so the cache keeps hitting.
Anchors must sit *inside* the history to do their work (the model attends to
what is near, and drift grows in the middle of long contexts), so each is
attached to the user message at its position, wrapped in a gateway-note
frame that says it is not from the person. Attaching keeps the alternation
valid for every backend (Claude and strict OpenAI-compatible chat templates
alike), and putting it on a user turn never puts words in the agent's mouth.
The observer strips these frames, so an anchor never becomes a user "fact".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.brains.base import ChatMessage
from gateway.config import PersonaConfig
from gateway.prompt import PastMessage
from gateway.tokens import estimate_tokens
from memory.sanitize import sanitize
from persona.judge import DriftState, Tier, Trend
from persona.models import ActionKind

NOTE_OPEN = "[gateway note — persona anchor, not from the person]"
NOTE_CLOSE = "[end of gateway note]"
# Any gateway note, wherever a model or a person may have echoed it.
NOTE_PATTERN = re.compile(
    r"\[gateway note[^\]]*(?:\].*?(?:\[end of gateway note\]|\Z)|\Z)", re.DOTALL | re.IGNORECASE
)
REINFORCE_PREFIX = "Persona reminder (from the gateway): "
REBASE_PREFIX = "Conversation rebased to your voice."


@dataclass(frozen=True)
class PlannerSettings:
    warmup_turns: int = 3
    reinforcement_tokens: int = 40
    anchor_min_tokens: int = 50
    anchor_max_tokens: int = 100
    anchor_min_messages: int = 6
    periodic_anchor_turns: int = 0
    rebase_keep_turns: int = 4
    rebase_summary_tokens: int = 400
    rebase_cooldown_turns: int = 5
    escalate_when_falling: bool = False
    hold_anchors_until_ok: bool = False

    @classmethod
    def from_config(cls, config: PersonaConfig) -> PlannerSettings:
        return cls(
            warmup_turns=config.warmup_turns,
            reinforcement_tokens=config.reinforcement_tokens,
            anchor_min_tokens=config.anchor_min_tokens,
            anchor_max_tokens=config.anchor_max_tokens,
            anchor_min_messages=config.anchor_min_messages,
            periodic_anchor_turns=config.periodic_anchor_turns,
            rebase_keep_turns=config.rebase_keep_turns,
            rebase_summary_tokens=config.rebase_summary_tokens,
            rebase_cooldown_turns=config.rebase_cooldown_turns,
            escalate_when_falling=config.escalate_when_falling,
            hold_anchors_until_ok=config.hold_anchors_until_ok,
        )


@dataclass(frozen=True)
class Plan:
    kind: ActionKind | None
    reason: str


def plan(
    settings: PlannerSettings,
    *,
    turn_number: int,
    drift: DriftState,
    history_messages: int,
    turns_since_rebase: int | None,
    previous_action: ActionKind | None = None,
) -> Plan:
    """The action for the turn about to be composed (``turn_number`` counts from 1)."""
    long_history = history_messages >= settings.anchor_min_messages
    if turn_number <= settings.warmup_turns or drift.ewma is None:
        return Plan(None, "warm-up" if drift.ewma is not None else "no verdict yet")
    if drift.tier is Tier.SEVERE:
        cooling = turns_since_rebase is not None and (
            turns_since_rebase < settings.rebase_cooldown_turns
        )
        if not cooling:
            return Plan(ActionKind.REBASE, f"severe drift (EWMA {drift.ewma:.2f})")
        kind = ActionKind.ANCHOR if long_history else ActionKind.REINFORCE
        return Plan(kind, f"severe drift {turns_since_rebase} turns after a rebase")
    if drift.tier is Tier.MODERATE:
        kind = ActionKind.ANCHOR if long_history else ActionKind.REINFORCE
        return Plan(kind, f"moderate drift (EWMA {drift.ewma:.2f}, {drift.trend.value})")
    if drift.tier is Tier.MILD:
        held = previous_action in (ActionKind.ANCHOR, ActionKind.REBASE)
        if settings.hold_anchors_until_ok and held and long_history:
            return Plan(ActionKind.ANCHOR, f"mild drift after an anchor (EWMA {drift.ewma:.2f})")
        if settings.escalate_when_falling and drift.trend is Trend.DRIFTING and long_history:
            return Plan(ActionKind.ANCHOR, f"mild drift, still falling (EWMA {drift.ewma:.2f})")
        return Plan(ActionKind.REINFORCE, f"mild drift (EWMA {drift.ewma:.2f})")
    periodic = settings.periodic_anchor_turns
    if periodic and long_history and turn_number % periodic == 0:
        return Plan(ActionKind.ANCHOR, f"periodic anchor every {periodic} turns")
    return Plan(None, "in voice")


def anchor_positions(history: Sequence[ChatMessage]) -> list[int]:
    """Indexes of the user messages nearest a third and two thirds of the history."""
    users = [i for i, m in enumerate(history) if m.role == "user"]
    if len(users) < 2:
        return []
    positions: list[int] = []
    for fraction in (1 / 3, 2 / 3):
        target = fraction * len(history)
        best = min(users, key=lambda i: (abs(i - target), i))
        # The last user message is the newest context, not the middle: skip it.
        if best not in positions and best != len(history) - 1:
            positions.append(best)
    return sorted(positions)


def wrap_note(text: str) -> str:
    return f"{NOTE_OPEN}\n{text}\n{NOTE_CLOSE}"


def place_anchors(
    history: Sequence[ChatMessage], anchor: str
) -> tuple[list[ChatMessage], list[int]]:
    """The history with the anchor attached to the user messages at 1/3 and 2/3."""
    positions = anchor_positions(history)
    placed = list(history)
    for index in positions:
        message = placed[index]
        placed[index] = ChatMessage(message.role, f"{wrap_note(anchor)}\n\n{message.text}")
    return placed, positions


def strip_notes(text: str) -> str:
    """Text without any gateway note (anchors echoed back by a model or a person)."""
    return NOTE_PATTERN.sub(" ", text).strip()


@dataclass(frozen=True)
class Rebase:
    summary: str
    # The first message kept verbatim; earlier ones live in the summary and observations.
    base_message_id: int
    kept: tuple[PastMessage, ...]
    summarized_ids: tuple[int, ...]
    unobserved_in_summary: tuple[int, ...]


def _first_sentence(text: str, max_words: int = 24) -> str:
    flat = " ".join(strip_notes(text).split())
    sentence = re.split(r"(?<=[.!?])\s", flat, maxsplit=1)[0]
    words = sentence.split()
    return " ".join(words[:max_words]) + ("…" if len(words) > max_words else "")


def build_rebase(
    recent: Sequence[PastMessage],
    *,
    keep_turns: int,
    summary_tokens: int,
    observed_through: int,
    agent_name: str,
) -> Rebase | None:
    """Keep the last ``keep_turns`` turns; condense what came before.

    Messages the observer has not read yet are carried into the summary whole,
    whatever the budget: nothing unobserved leaves the prompt. Observed ones
    get a line each (their substance is in the observations block), newest
    first until the budget is spent.
    """
    users = [i for i, m in enumerate(recent) if m.role == "user"]
    if len(users) <= keep_turns:
        return None
    cut = users[-keep_turns]
    earlier, kept = recent[:cut], recent[cut:]
    unobserved = [m for m in earlier if m.message_id > observed_through]
    lines: list[str] = []
    for message in unobserved:
        who = "The person" if message.role == "user" else agent_name
        lines.append(f"- {who} (not yet condensed): {sanitize(strip_notes(message.text)).text}")
    observed_lines: list[str] = []
    used = sum(estimate_tokens(line) for line in lines)
    for message in reversed([m for m in earlier if m.message_id <= observed_through]):
        who = "The person" if message.role == "user" else agent_name
        line = f"- {who}: {sanitize(_first_sentence(message.text)).text}"
        if used + estimate_tokens(line) > summary_tokens:
            break
        used += estimate_tokens(line)
        observed_lines.append(line)
    observed_lines.reverse()
    body = "\n".join(observed_lines + lines) or "- (nothing before the kept turns)"
    summary = (
        f"{REBASE_PREFIX} The earlier part of this conversation is condensed below; the "
        f"observations above hold what matters from it. Answer the newest message in your "
        f"own voice, not in the tone of earlier replies.\nEarlier turns, oldest first:\n{body}"
    )
    return Rebase(
        summary=summary,
        base_message_id=kept[0].message_id,
        kept=tuple(kept),
        summarized_ids=tuple(m.message_id for m in earlier),
        unobserved_in_summary=tuple(m.message_id for m in unobserved),
    )

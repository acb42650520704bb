"""Forward triggers in the turn: the "Today" block before the reply, the scan after it.

``TodayStage`` (a context stage) puts the triggers of the person's today — in
their zone — into the prompt, with the memories the pack held when the day was
named and the sentence that named it, sanitised like the pack; the first time
a trigger is shown it is marked fired. ``TriggerScanStage`` (after the turn)
cancels what the message calls off, then stores a trigger for each day ahead it
names, with the ids the turn's pack trace kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, tzinfo

from gateway.brains.base import BlockKind
from gateway.clock import local
from gateway.prompt import PromptDraft, StageRead, TurnContext, TurnOutcome
from gateway.store import Store
from gateway.zones import PersonZones
from memory import repo as memory_repo
from memory.sanitize import sanitize
from memory.triggers import repo
from memory.triggers.detect import cancelled_by, days_ahead, is_cancellation
from memory.triggers.models import Trigger

log = logging.getLogger(__name__)

TODAY_HEADER = "Today"


@dataclass(frozen=True)
class TriggerSettings:
    # Days past this many ahead create none ("on 3000-01-01").
    horizon_days: int = 1826
    # Days one message may set.
    max_per_message: int = 3
    # The sentence kept with a trigger, in characters.
    context_chars: int = 300
    # Memories shown under one trigger in the Today block.
    memories_per_trigger: int = 5
    # Characters of one memory in the Today block.
    memory_chars: int = 300


def _clip(text: str, limit: int) -> str:
    text = " ".join(sanitize(text).text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def today_block(
    day: date,
    triggers: list[Trigger],
    memories: dict[int, str],
    settings: TriggerSettings,
    zone: tzinfo,
) -> str:
    """The block's text: each trigger's sentence and its memories, sanitised."""
    lines = [
        f"{TODAY_HEADER} is {day:%A %Y-%m-%d}. The person named this day earlier "
        "(bring it up if it fits; they have not mentioned it yet today):"
    ]
    for trigger in triggers:
        said = local(trigger.created_at, zone).date().isoformat()
        lines.append(f"- On {said} they said: “{_clip(trigger.context, settings.context_chars)}”")
        shown = [memories[i] for i in trigger.memory_ids if i in memories]
        for text in shown[: settings.memories_per_trigger]:
            lines.append(f"  - remembered then: “{_clip(text, settings.memory_chars)}”")
    return "\n".join(lines)


@dataclass
class TodayStage:
    """The person's triggers of today, before they ask."""

    store: Store
    zones: PersonZones
    settings: TriggerSettings = TriggerSettings()
    # When a trigger counts as fired (tests pass a fake clock).
    now: Callable[[], datetime] = lambda: datetime.now(UTC)

    @property
    def name(self) -> str:
        return "today"

    async def declare(self, turn: TurnContext) -> StageRead[list[Trigger]]:
        zone = await self.zones.of(turn.person_id)
        return repo.of_day_read(turn.person_id, local(turn.received_at, zone).date())

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        zone = await self.zones.of(turn.person_id)
        day = local(turn.received_at, zone).date()
        triggers = await draft.read(repo.of_day_read(turn.person_id, day), self.store)
        if not triggers:
            return
        ids = [i for trigger in triggers for i in trigger.memory_ids]
        memories = await repo.memory_texts(self.store, ids)
        draft.add(BlockKind.MEMORY, today_block(day, triggers, memories, self.settings, zone))
        await repo.mark_fired(self.store, [t.id for t in triggers], self.now())


@dataclass
class TriggerScanStage:
    """After the turn: what the message cancels, then the days ahead it names."""

    store: Store
    zones: PersonZones
    settings: TriggerSettings = TriggerSettings()

    @property
    def name(self) -> str:
        return "triggers"

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        zone = await self.zones.of(turn.person_id)
        today = local(turn.received_at, zone).date()
        if is_cancellation(turn.text):
            open_ones = await repo.open_triggers(self.store, turn.person_id, today)
            ids = cancelled_by(turn.text, [(t.id, t.context) for t in open_ones])
            done = await repo.cancel(self.store, ids, turn.received_at, turn.message_id)
            if done:
                log.info("turn %d: cancelled %d trigger(s) %s", turn.turn_id, done, ids)
        found = days_ahead(
            turn.text,
            today,
            horizon_days=self.settings.horizon_days,
            max_days=self.settings.max_per_message,
            context_chars=self.settings.context_chars,
        )
        if not found:
            return
        trace = await memory_repo.trace_for_turn(self.store, turn.turn_id)
        kept = tuple(trace.kept_ids) if trace is not None else ()
        created = await repo.add_triggers(
            self.store,
            [
                repo.NewTrigger(
                    turn.person_id,
                    turn.conversation_id,
                    turn.channel,
                    turn.message_id,
                    detected.day,
                    detected.phrase,
                    detected.sentence,
                    kept,
                )
                for detected in found
            ],
            turn.received_at,
        )
        days = [d.day.isoformat() for d in found]
        log.debug("turn %d: %d new trigger(s) for %s", turn.turn_id, len(created), days)

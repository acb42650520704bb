"""A message on the day of a forward trigger, before the person writes (issue 22).

Off unless ``triggers.proactive_channels`` names the trigger's channel. A
background task looks every ``triggers.poll_s`` for triggers whose day has come
in their person's zone (from ``triggers.proactive_hour``), claims each in the
store (``proactive_at``) *before* it is sent — a restart or a crash after the
claim never sends it again: at most once, by design — then stores the message
as the agent's in the conversation the day was named in and publishes it to
that conversation like any reply (open webchat pages, the Telegram chat). With
a model brain (claude, openai) the line is the utility model's, from the
sanitised sentence; without one, or when the call fails or answers nothing, a
templated line quoting the sentence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import insert, select

from gateway.brains.base import BlockKind, Brain, BrainRequest, ChatMessage, Purpose, SystemBlock
from gateway.clock import local
from gateway.config import TriggersConfig
from gateway.errors import AgentGWError
from gateway.hub import ConversationHub
from gateway.messages import TurnEvent, TurnEventKind
from gateway.store import MessageRole, Store
from gateway.store.models import Conversation, Identity, Message
from gateway.tokens import estimate_tokens
from gateway.zones import PersonZones
from memory.sanitize import sanitize
from memory.triggers import repo
from memory.triggers.models import Trigger

log = logging.getLogger(__name__)


LINE_INSTRUCTIONS = (
    "Today is the day the person mentioned earlier. Write the one short, warm message "
    "(at most 25 words) you send them this morning about it, before they write, such as "
    '"Good luck at the interview today!". Invent nothing beyond their words. Answer with '
    "the message only."
)
LINE_MAX_CHARS = 300


def templated_line(trigger: Trigger) -> str:
    """The day's message when no model words it."""
    said = " ".join(sanitize(trigger.context).text.split())
    return f"Today's the day you mentioned: “{said}” Good luck, and tell me how it goes!"


@dataclass
class ProactiveNotifier:
    store: Store
    hub: ConversationHub
    zones: PersonZones
    settings: TriggersConfig
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    # By channel: makes a conversation reachable before its message is published
    # (Telegram knows a chat only once its person wrote since the start).
    reach: Mapping[str, Callable[[int, str], None]] = field(default_factory=dict)
    # The model that words the line; None: the template.
    brain: Brain | None = None

    async def run_forever(self) -> None:
        while True:
            try:
                await self.send_due()
            except Exception:  # one bad round must not end the task
                log.exception("proactive trigger messages failed this round")
            await asyncio.sleep(self.settings.poll_s)

    async def send_due(self) -> int:
        """Send the messages whose day and hour came; how many were sent."""
        now = self.now()
        # The latest calendar day anywhere on Earth (UTC+14): each is checked in its zone.
        latest = local(now, UTC).date().toordinal() + 1
        sent = 0
        for trigger in await repo.due_unsent(self.store, datetime.fromordinal(latest).date()):
            if trigger.channel not in self.settings.proactive_channels:
                continue
            if trigger.conversation_id is None:
                continue
            moment = local(now, await self.zones.of(trigger.person_id))
            if moment.date() < trigger.trigger_date or (
                moment.date() == trigger.trigger_date and moment.hour < self.settings.proactive_hour
            ):
                continue
            if moment.date() > trigger.trigger_date:
                # The day went by (the gateway was down): a late "good luck" helps no one.
                await repo.claim_proactive(self.store, trigger.id, now)
                continue
            if not await repo.claim_proactive(self.store, trigger.id, now):
                continue  # claimed by another round: never twice
            await self._send(trigger, await self._line(trigger), now)
            sent += 1
        return sent

    async def _line(self, trigger: Trigger) -> str:
        if self.brain is None:
            return templated_line(trigger)
        said = " ".join(sanitize(trigger.context).text.split())
        request = BrainRequest(
            system=(SystemBlock(BlockKind.GUIDANCE, LINE_INSTRUCTIONS),),
            # The person's words as quoted data, never as instructions.
            messages=(ChatMessage("user", f"Their words, said on an earlier day: “{said}”"),),
            purpose=Purpose.UTILITY,
            max_tokens=80,
            temperature=0.7,
        )
        try:
            completion = await self.brain.complete(request)
        except AgentGWError as exc:  # the day's message still goes out, templated
            log.warning("trigger %d: the model could not word its message: %s", trigger.id, exc)
            return templated_line(trigger)
        line = " ".join(completion.text.split())
        return line[:LINE_MAX_CHARS] if line else templated_line(trigger)

    async def _send(self, trigger: Trigger, text: str, now: datetime) -> None:
        assert trigger.conversation_id is not None
        reach = self.reach.get(trigger.channel)
        if reach is not None:
            async with self.store.reader() as session:
                sender = await session.scalar(
                    select(Identity.external_id)
                    .join(Conversation, Conversation.identity_id == Identity.id)
                    .where(Conversation.id == trigger.conversation_id)
                )
            if sender is not None:
                reach(trigger.conversation_id, sender)
        async with self.store.session() as session:
            reply_id = await session.scalar(
                insert(Message)
                .values(
                    conversation_id=trigger.conversation_id,
                    person_id=trigger.person_id,
                    role=MessageRole.ASSISTANT,
                    channel=trigger.channel,
                    text=text,
                    tokens=estimate_tokens(text),
                    created_at=now,
                )
                .returning(Message.id)
            )
        await self.hub.publish(
            TurnEvent(
                TurnEventKind.REPLY,
                trigger.conversation_id,
                trigger.message_id or 0,
                text=text,
                reply_id=reply_id,
                created_at=now,
            )
        )
        log.info("trigger %d: its day's message sent to %d", trigger.id, trigger.conversation_id)

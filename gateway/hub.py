"""Fan-out of turn events to whoever watches a conversation (open pages, bots)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gateway.events import StageEvent
from gateway.messages import TurnEvent, TurnEventKind

log = logging.getLogger(__name__)

Subscriber = Callable[[TurnEvent], Awaitable[None]]
# Stage events go to every stage subscriber (metrics, traces), whatever the
# conversation; synchronous, so emitting one costs the turn no await.
StageSubscriber = Callable[[StageEvent], None]


@dataclass
class InFlight:
    """The reply being generated right now, so a page that reconnects mid-stream catches up."""

    message_id: int
    text: str = ""
    # The "looked up …" lines of the memory tools it called so far: (line, failed).
    tools: list[tuple[str, bool]] = field(default_factory=list)


class ConversationHub:
    def __init__(self) -> None:
        self._subscribers: dict[int, set[Subscriber]] = defaultdict(set)
        self._in_flight: dict[int, InFlight] = {}
        self._stage_subscribers: list[StageSubscriber] = []
        # In a cluster (gateway/fanout.py): hands each event published here to the
        # other processes, whose pages of the conversation get it too.
        self.relay: Callable[[TurnEvent], None] | None = None

    def subscribe_stages(self, subscriber: StageSubscriber) -> Callable[[], None]:
        """Receive every turn's stage events; returns the function that removes it."""
        self._stage_subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._stage_subscribers:
                self._stage_subscribers.remove(subscriber)

        return unsubscribe

    def emit(self, event: StageEvent) -> None:
        for subscriber in list(self._stage_subscribers):
            # A broken watcher must not fail the turn it watches.
            try:
                subscriber(event)
            except Exception:
                log.exception("stage subscriber failed on %s %s", event.stage, event.kind)

    def subscribe(self, conversation_id: int, subscriber: Subscriber) -> Callable[[], None]:
        """Add a subscriber; returns the function that removes it."""
        self._subscribers[conversation_id].add(subscriber)

        def unsubscribe() -> None:
            subs = self._subscribers.get(conversation_id)
            if subs is not None:
                subs.discard(subscriber)
                if not subs:
                    del self._subscribers[conversation_id]

        return unsubscribe

    def in_flight(self, conversation_id: int) -> InFlight | None:
        return self._in_flight.get(conversation_id)

    async def publish(self, event: TurnEvent) -> None:
        if self.relay is not None:
            self.relay(event)
        await self.deliver(event)

    async def deliver(self, event: TurnEvent) -> None:
        """To this process's subscribers only (an event relayed from another process)."""
        if event.kind is TurnEventKind.DELTA:
            flight = self._in_flight.get(event.conversation_id)
            if flight is None or flight.message_id != event.message_id:
                flight = self._in_flight[event.conversation_id] = InFlight(event.message_id)
            flight.text += event.text
        elif event.kind is TurnEventKind.TOOL:
            flight = self._in_flight.get(event.conversation_id)
            if flight is None or flight.message_id != event.message_id:
                flight = self._in_flight[event.conversation_id] = InFlight(event.message_id)
            flight.tools.append((event.text, event.code == "error"))
        elif event.kind in (TurnEventKind.REPLY, TurnEventKind.ERROR):
            self._in_flight.pop(event.conversation_id, None)
        for subscriber in list(self._subscribers.get(event.conversation_id, ())):
            # One broken page must not stop delivery to the others or the turn.
            try:
                await subscriber(event)
            except (ConnectionError, RuntimeError) as exc:
                log.info("dropping event for a closed subscriber: %s", exc)

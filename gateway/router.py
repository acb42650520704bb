"""Sender → person → conversation, store first, then one lane per conversation.

Turns of one conversation run strictly in arrival order (a lane is a queue
with one worker); different conversations run concurrently, at most
``max_running`` turns being answered at once (context, model, reply stored
and sent): the others wait their turn in arrival order (FIFO) instead of all
meeting at the store and the model together. A turn's after-turn stages
(memory ingest, judge, observer) run after it gives its place back, still on
its lane, so the conversation's next turn waits for them as before. The
inbound message is stored before ``accept`` returns, so a crash after that
loses nothing.

Past ``max_queued`` waiting turns a new message is still stored and queued
(it is answered in its turn: nothing is dropped), and ``backpressure`` tells
the channel how long the sender should hold off (webchat sends ``busy``).
A router may take messages before its pipeline exists (the gateway serves
while its models load): they are stored and acknowledged as always, and
their turns wait in their lanes until ``attach`` hands it the pipeline.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gateway.errors import AgentGWError, InputError
from gateway.hub import ConversationHub
from gateway.messages import Inbound, TurnEvent, TurnEventKind
from gateway.pipeline import TurnPipeline
from gateway.store import Store, TurnStatus
from gateway.store.repo import (
    Address,
    StoredInbound,
    find_address,
    reopen_failed_turn,
    resolve_address,
    store_inbound,
)
from gateway.supervisor import TaskSupervisor
from gateway.untrusted import storable

log = logging.getLogger(__name__)

# Turns answered at once, and waiting turns past which senders are asked to hold off.
MAX_RUNNING_TURNS = 512
MAX_QUEUED_TURNS = 100
# The retry-after given to a busy sender stays within these bounds (seconds).
RETRY_AFTER_MIN_S = 1
RETRY_AFTER_MAX_S = 300
# Weight of the newest turn in the running mean of a turn's duration.
_DURATION_WEIGHT = 0.2


class ShuttingDown(AgentGWError):
    code = "shutting_down"


@dataclass
class _Lane:
    queue: asyncio.Queue[tuple[StoredInbound, float]] = field(default_factory=asyncio.Queue)
    busy: bool = False


class _Place:
    """A running turn's place, given back once: when it is answered (before its
    after-turn stages, which need no place) or when it ends, whichever is first."""

    def __init__(self, places: asyncio.Semaphore, on_release: Callable[[], None]) -> None:
        self._places = places
        self._on_release = on_release
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._places.release()
            self._on_release()


class Router:
    def __init__(
        self,
        store: Store,
        pipeline: TurnPipeline | None,
        hub: ConversationHub,
        supervisor: TaskSupervisor,
        *,
        max_running: int = MAX_RUNNING_TURNS,
        max_queued: int = MAX_QUEUED_TURNS,
    ) -> None:
        if max_running < 1 or max_queued < 0:
            raise ValueError("max_running must be 1 or more and max_queued 0 or more")
        self.store = store
        self._pipeline = pipeline
        self._attached = asyncio.Event()
        if pipeline is not None:
            self._attached.set()
        self.hub = hub
        self.supervisor = supervisor
        self.max_running = max_running
        self.max_queued = max_queued
        self._running = asyncio.Semaphore(max_running)
        # Turns queued and not started yet, over all lanes.
        self._waiting = 0
        # A turn's mean duration (seconds), for the retry-after of a busy sender.
        self._turn_s = 1.0
        self._lanes: dict[int, _Lane] = {}
        self._accepting = True
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def pipeline(self) -> TurnPipeline | None:
        return self._pipeline

    @property
    def ready(self) -> bool:
        """Whether turns run (else they wait, stored, for ``attach``)."""
        return self._pipeline is not None

    def attach(self, pipeline: TurnPipeline) -> None:
        """The pipeline is built: the turns queued meanwhile start, in order."""
        if self._pipeline is not None:
            raise RuntimeError("the router already has a pipeline")
        self._pipeline = pipeline
        self._attached.set()

    async def known(self, channel: str, sender: str) -> Address | None:
        """The sender's address if they were seen before (a new one is not made)."""
        return await find_address(self.store, channel, sender)

    async def address(self, channel: str, sender: str, display_name: str = "") -> Address:
        return await resolve_address(self.store, channel, storable(sender), storable(display_name))

    async def accept(self, inbound: Inbound, address: Address | None = None) -> StoredInbound:
        """Store the message and queue its turn; a resent ``client_id`` is not queued again.

        Every channel's text comes through here, so here it is made storable
        (``untrusted.storable``): a lone surrogate or a NUL is replaced, never
        refused, so the message is kept and a page's outbox does not resend it
        for ever."""
        received_perf = time.perf_counter()
        if not self._accepting:
            raise ShuttingDown("the gateway is shutting down; send again in a moment")
        inbound = replace(
            inbound,
            text=storable(inbound.text),
            display_name=storable(inbound.display_name),
            client_id=None if inbound.client_id is None else storable(inbound.client_id),
        )
        if address is None:
            address = await self.address(inbound.channel, inbound.sender, inbound.display_name)
        stored = await store_inbound(
            self.store, address, inbound.text, inbound.received_at, inbound.client_id
        )
        if stored.duplicate:
            return stored
        await self.hub.publish(
            TurnEvent(
                TurnEventKind.MESSAGE,
                address.conversation_id,
                stored.message_id,
                text=stored.text,
                client_id=stored.client_id,
                created_at=stored.created_at,
            )
        )
        self._enqueue(stored, received_perf)
        return stored

    async def retry(self, address: Address, message_id: int) -> StoredInbound:
        """Queue a failed turn of this conversation again, on its lane."""
        received_perf = time.perf_counter()
        if not self._accepting:
            raise ShuttingDown("the gateway is shutting down; retry in a moment")
        stored = await reopen_failed_turn(self.store, address, message_id)
        if stored is None:
            raise InputError(
                f"message {message_id} is not a failed turn of this conversation",
                code="not_retryable",
            )
        self._enqueue(stored, received_perf)
        return stored

    def _enqueue(self, stored: StoredInbound, received_perf: float) -> None:
        conversation_id = stored.address.conversation_id
        lane = self._lanes.get(conversation_id)
        if lane is None:
            lane = self._lanes[conversation_id] = _Lane()
        lane.queue.put_nowait((stored, received_perf))
        self._waiting += 1
        if not lane.busy:
            lane.busy = True
            self._idle.clear()
            self.supervisor.spawn(f"lane-{conversation_id}", self._drain(conversation_id, lane))

    async def _drain(self, conversation_id: int, lane: _Lane) -> None:
        flushing = True
        try:
            await self._attached.wait()
            pipeline = self._pipeline
            assert pipeline is not None  # set before the event
            while True:
                while not lane.queue.empty():
                    stored, received_perf = lane.queue.get_nowait()
                    try:
                        await self._running.acquire()
                    finally:
                        self._waiting -= 1
                    place = _Place(self._running, self._timed(time.perf_counter()))
                    try:
                        await pipeline.run(stored, received_perf, place.release)
                    finally:
                        place.release()
                if not (flushing and pipeline.pending_values) or self._others_busy(lane):
                    break
                # The last busy lane writes what the turns left pending, then
                # looks at its queue again: a message may have come in meanwhile.
                flushing = await self._flush(pipeline)
        finally:
            # No await between the empty check and here: no message can slip in unseen.
            lane.busy = False
            if lane.queue.empty():
                self._lanes.pop(conversation_id, None)
            if not any(lane.busy for lane in self._lanes.values()):
                self._idle.set()

    def _timed(self, started: float) -> Callable[[], None]:
        def answered() -> None:
            # Answering time only: that is what a waiting turn waits for.
            self._turn_s += _DURATION_WEIGHT * (time.perf_counter() - started - self._turn_s)

        return answered

    def _others_busy(self, lane: _Lane) -> bool:
        return any(other.busy for other in self._lanes.values() if other is not lane)

    async def _flush(self, pipeline: TurnPipeline) -> bool:
        try:
            await pipeline.flush()
        except AgentGWError:
            # Only timings are pending: the next turn's write carries them.
            log.exception("could not write the pending turn values")
            return False
        return True

    @property
    def turns_waiting(self) -> int:
        """Turns queued that have not started yet."""
        return self._waiting

    def backpressure(self) -> float | None:
        """Seconds a sender should hold off when the queue is past ``max_queued``, else None.

        The estimate is the queue's length over the turns run at once, times a
        turn's running mean duration.
        """
        if self._waiting <= self.max_queued:
            return None
        estimate = self._waiting / self.max_running * self._turn_s
        return float(min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, math.ceil(estimate))))

    @property
    def turns_in_flight(self) -> int:
        return sum(lane.queue.qsize() + (1 if lane.busy else 0) for lane in self._lanes.values())

    def stop_accepting(self) -> None:
        self._accepting = False

    async def drain(self, timeout: float) -> bool:
        """Wait for queued and running turns; True when all finished in time."""
        if not self.ready:
            # Stopped while still starting: the waiting turns never began; their
            # messages are stored and the next start marks them interrupted (retryable).
            if self.turns_in_flight:
                log.warning("%d turns had not started at shutdown", self.turns_in_flight)
            return self._idle.is_set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            log.warning("%d turns still running at shutdown", self.turns_in_flight)
            return False
        return True


def is_open(status: TurnStatus) -> bool:
    return status in (TurnStatus.RECEIVED, TurnStatus.GENERATING)

"""Sender → person → conversation, store first, then one lane per conversation.

Turns of one conversation run strictly in arrival order (a lane is a queue
with one worker); different conversations run concurrently. The inbound
message is stored before ``accept`` returns, so a crash after that loses
nothing. A router may take messages before its pipeline exists (the gateway
serves while its models load): they are stored and acknowledged as always,
and their turns wait in their lanes until ``attach`` hands it the pipeline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from channels.base import Inbound, TurnEvent, TurnEventKind
from gateway.errors import AgentGWError, InputError
from gateway.hub import ConversationHub
from gateway.pipeline import TurnPipeline
from gateway.store import Store, TurnStatus
from gateway.store.repo import (
    Address,
    StoredInbound,
    reopen_failed_turn,
    resolve_address,
    store_inbound,
)
from gateway.supervisor import TaskSupervisor

log = logging.getLogger(__name__)


class ShuttingDown(AgentGWError):
    code = "shutting_down"


@dataclass
class _Lane:
    queue: asyncio.Queue[tuple[StoredInbound, float]] = field(default_factory=asyncio.Queue)
    busy: bool = False


class Router:
    def __init__(
        self,
        store: Store,
        pipeline: TurnPipeline | None,
        hub: ConversationHub,
        supervisor: TaskSupervisor,
    ) -> None:
        self.store = store
        self._pipeline = pipeline
        self._attached = asyncio.Event()
        if pipeline is not None:
            self._attached.set()
        self.hub = hub
        self.supervisor = supervisor
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

    async def address(self, channel: str, sender: str, display_name: str = "") -> Address:
        return await resolve_address(self.store, channel, sender, display_name)

    async def accept(self, inbound: Inbound, address: Address | None = None) -> StoredInbound:
        """Store the message and queue its turn; a resent ``client_id`` is not queued again."""
        received_perf = time.perf_counter()
        if not self._accepting:
            raise ShuttingDown("the gateway is shutting down; send again in a moment")
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
                    await pipeline.run(stored, received_perf)
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

"""Sender → person → conversation, store first, then one lane per conversation.

Turns of one conversation run strictly in arrival order (a lane is a queue
with one worker); different conversations run concurrently. The inbound
message is stored before ``accept`` returns, so a crash after that loses
nothing.
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
    find_address,
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
        pipeline: TurnPipeline,
        hub: ConversationHub,
        supervisor: TaskSupervisor,
    ) -> None:
        self.store = store
        self.pipeline = pipeline
        self.hub = hub
        self.supervisor = supervisor
        self._lanes: dict[int, _Lane] = {}
        self._accepting = True
        self._idle = asyncio.Event()
        self._idle.set()

    async def known(self, channel: str, sender: str) -> Address | None:
        """The sender's address if they were seen before (a new one is not made)."""
        return await find_address(self.store, channel, sender)

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
            while True:
                while not lane.queue.empty():
                    stored, received_perf = lane.queue.get_nowait()
                    await self.pipeline.run(stored, received_perf)
                if not (flushing and self.pipeline.pending_values) or self._others_busy(lane):
                    break
                # The last busy lane writes what the turns left pending, then
                # looks at its queue again: a message may have come in meanwhile.
                flushing = await self._flush()
        finally:
            # No await between the empty check and here: no message can slip in unseen.
            lane.busy = False
            if lane.queue.empty():
                self._lanes.pop(conversation_id, None)
            if not any(lane.busy for lane in self._lanes.values()):
                self._idle.set()

    def _others_busy(self, lane: _Lane) -> bool:
        return any(other.busy for other in self._lanes.values() if other is not lane)

    async def _flush(self) -> bool:
        try:
            await self.pipeline.flush()
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
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            log.warning("%d turns still running at shutdown", self.turns_in_flight)
            return False
        return True


def is_open(status: TurnStatus) -> bool:
    return status in (TurnStatus.RECEIVED, TurnStatus.GENERATING)

"""The router of a cluster process: turns claimed from the store (issue 25).

On SQLite (and PostgreSQL without ``store.cluster``) a conversation's turns
wait in an in-process lane (gateway/router.py). In a cluster the message may
be stored by any process, so the lane's queue is the store itself: a lane
here is a worker that claims the conversation's earliest open turn
(gateway/store/claims.py), runs it under a claim renewed every
``lease_s / 3``, and claims the next, until there is none it may take (none
open, or another process's live claim holds the conversation: that process
takes the next turn when it is done with its own).

A lane is started for a conversation when this process stores one of its
messages, when another process that cannot run turns yet (its models still
loading) stored one and asked the others (the fan-out's nudge), and by the
sweeper. The sweeper looks for conversations whose earliest open turn is
unclaimed (for ``lease_s / 3``: the process that stored it claims it itself),
claimed by a member that died (its session ended: gateway/store/liveness.py),
or whose claim expired, and claims them: every ``lease_s / 3``, at the moment
the earliest live claim would expire, and at once when the cluster node sees a
member die (``sweep_now``). So a turn whose process was killed is run by
another within about a second of the death; a process that stalls, or a
machine that vanished with its connections half-open, is taken over when its
claims expire (``lease_s``), with no restart and without touching the turns
other live processes are running.

Claims are taken only once the pipeline is attached (the models loaded): a
starting process does not hold turns it cannot run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.errors import AgentGWError
from gateway.fanout import TurnFanout
from gateway.hub import ConversationHub
from gateway.pipeline import TurnPipeline
from gateway.router import MAX_QUEUED_TURNS, MAX_RUNNING_TURNS, Router, _Lane, _Place
from gateway.store import Store
from gateway.store.claims import TurnClaims, open_heads
from gateway.store.notify import PgListener
from gateway.store.repo import StoredInbound
from gateway.supervisor import TaskSupervisor

log = logging.getLogger(__name__)

# The sweeper never sleeps less than this (a claim expiring "now" is met at once
# after), nor past lease_s / 3.
SWEEP_MIN_S = 0.2
# Start times kept for messages stored here (their turns may be claimed elsewhere).
RECEIVED_KEPT = 10_000


@dataclass
class _ClusterLane(_Lane):
    # Set by a nudge while the lane is busy: look in the store once more before ending.
    again: bool = False


class ClusterRouter(Router):
    def __init__(
        self,
        store: Store,
        pipeline: TurnPipeline | None,
        hub: ConversationHub,
        supervisor: TaskSupervisor,
        *,
        owner: str,
        lease_s: float,
        max_running: int = MAX_RUNNING_TURNS,
        max_queued: int = MAX_QUEUED_TURNS,
    ) -> None:
        super().__init__(
            store, pipeline, hub, supervisor, max_running=max_running, max_queued=max_queued
        )
        self.owner = owner
        self.lease_s = lease_s
        # When this process stored a message: its prepare time counts from then.
        self._received_perf: dict[int, float] = {}
        self.claims = 0
        self.takeovers = 0
        self.turn_claims = TurnClaims(store.url, owner, lease_s)
        self._sweep_woken = asyncio.Event()
        self._sweep_all = False

    def start_sweeper(self) -> None:
        self.supervisor.spawn("turn-sweeper", self._sweep())

    def _enqueue(self, stored: StoredInbound, received_perf: float) -> None:
        if len(self._received_perf) >= RECEIVED_KEPT:
            self._received_perf.pop(next(iter(self._received_perf)))
        self._received_perf[stored.turn_id] = received_perf
        self.poke(stored.address.conversation_id)

    def poke(self, conversation_id: int) -> None:
        """The conversation may have a turn to claim: make sure a lane looks."""
        lane = self._lanes.get(conversation_id)
        if lane is not None:
            if isinstance(lane, _ClusterLane):
                lane.again = True
            return
        if not self._accepting:
            return
        lane = self._lanes[conversation_id] = _ClusterLane(busy=True)
        self._idle.clear()
        self.supervisor.spawn(f"lane-{conversation_id}", self._claiming(conversation_id, lane))

    async def _claiming(self, conversation_id: int, lane: _ClusterLane) -> None:
        try:
            await self._attached.wait()
            pipeline = self._pipeline
            assert pipeline is not None  # set before the event
            while self._accepting:
                lane.again = False
                self._waiting += 1
                try:
                    await self._running.acquire()
                finally:
                    self._waiting -= 1
                place = _Place(self._running, self._timed(time.perf_counter()))
                try:
                    claimed = await self._claim(conversation_id)
                    if claimed is None:
                        if lane.again:
                            continue
                        break
                    await self._run_claimed(pipeline, claimed, place)
                finally:
                    place.release()
            if pipeline.pending_values and not self._others_busy(lane):
                await self._flush(pipeline)
        finally:
            lane.busy = False
            self._lanes.pop(conversation_id, None)
            if not any(other.busy for other in self._lanes.values()):
                self._idle.set()

    async def _claim(self, conversation_id: int) -> StoredInbound | None:
        try:
            return await self.turn_claims.claim(conversation_id)
        except AgentGWError:
            # The store is unreachable: the sweeper tries again in a moment.
            log.exception("could not claim a turn of conversation %d", conversation_id)
            return None

    async def _run_claimed(
        self, pipeline: TurnPipeline, claimed: StoredInbound, place: _Place
    ) -> None:
        self.claims += 1
        received_perf = self._received_perf.pop(claimed.turn_id, None)
        if received_perf is None:
            # Stored by another process, or taken over from one that died.
            self.takeovers += 1
            received_perf = time.perf_counter()
        self.turn_claims.held.add(claimed.turn_id)
        try:
            await pipeline.run(claimed, received_perf, place.release)
        finally:
            self.turn_claims.held.discard(claimed.turn_id)
            try:
                if await self.turn_claims.end(claimed.turn_id):
                    log.warning("turn %d ended open; marked interrupted", claimed.turn_id)
            except AgentGWError:
                log.exception("could not end the claim on turn %d", claimed.turn_id)

    def sweep_now(self) -> None:
        """Sweep at once, unclaimed turns of any age included (a member just died: the
        turns it held or stored are free now)."""
        self._sweep_all = True
        self._sweep_woken.set()

    async def _sweep(self) -> None:
        await self._attached.wait()
        period = self.lease_s / 3
        while self._accepting:
            wait = period
            take_all, self._sweep_all = self._sweep_all, False
            try:
                heads, now = await open_heads(self.store)
            except AgentGWError:
                log.exception("the turn sweeper could not read the open turns")
                heads, now = [], None
            for head in heads:
                if now is None:
                    break
                if head.claim_until is None:
                    # Unclaimed: the process that stored it claims it itself at once
                    # (taking it from here would run the conversation on a process
                    # without its memory open). Left this long, anyone may.
                    left = period - (now - head.received_at).total_seconds()
                    if take_all or left <= 0:
                        self.poke(head.conversation_id)
                    else:
                        wait = min(wait, left)
                elif head.claim_until <= now or head.holder_gone:
                    self.poke(head.conversation_id)
                else:
                    wait = min(wait, (head.claim_until - now).total_seconds())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sweep_woken.wait(), max(SWEEP_MIN_S, wait + 0.05))
            self._sweep_woken.clear()


async def open_cluster_router(
    parts: contextlib.AsyncExitStack,
    store: Store,
    hub: ConversationHub,
    supervisor: TaskSupervisor,
    *,
    lease_s: float,
    max_running: int,
    max_queued: int,
    owner: str,
    listener: PgListener,
    on_member_gone: list[Callable[[set[str]], None]],
) -> ClusterRouter:
    """The cluster's router with its fan-out and sweeper; their closes pushed on ``parts``
    (they run after the router drained, before the store closes). ``owner`` is the
    process's cluster member id; ``listener`` its LISTEN connection (the cluster node's);
    ``on_member_gone`` the cluster node's callbacks for members that died."""
    router = ClusterRouter(
        store,
        None,
        hub,
        supervisor,
        owner=owner,
        lease_s=lease_s,
        max_running=max_running,
        max_queued=max_queued,
    )
    fanout = TurnFanout(store, hub, listener, owner)
    fanout.on_remote_message = router.poke
    # Until its models are loaded this process stores messages but runs no turn:
    # then (only) the others are asked to claim them at once.
    fanout.asks_others = lambda: not router.ready
    await fanout.start()
    parts.push_async_callback(fanout.aclose)
    await router.turn_claims.start()
    parts.push_async_callback(router.turn_claims.aclose)
    router.start_sweeper()
    # A member died (its session ended): its turns are taken now, not at their claims' end.
    on_member_gone.append(lambda _gone: router.sweep_now())
    log.info("cluster process %s: turns are claimed from the store", owner)
    return router

"""The persona loop's after-turn stages and the work they start (in the
conversation's lane, slow work in supervised tasks):

- ``JudgeStage`` scores the reply (SyncScore) in the background; a severe
  verdict also has the observer read everything still unread, so a rebase on
  the next turn loses nothing;
- ``ObserveStage`` starts an observe pass when the unobserved messages reach
  the threshold (after the judge of the same conversation has finished, so
  the persona track sees the newest verdicts).

``PersonaLoop`` holds the loop's parts and hands out its stages (the context
stages are ``persona.stages``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from gateway.brains.base import BlockKind
from gateway.events import ObserverBacklog
from gateway.prompt import (
    AfterTurnStage,
    ContextStage,
    TurnContext,
    TurnOutcome,
)
from gateway.store import Store
from gateway.supervisor import TaskSupervisor
from persona.anchor import (
    PlannerSettings,
)
from persona.judge import (
    JudgeInput,
    SyncScorer,
    Tier,
)
from persona.observation.lag import observer_backlog
from persona.observation.log import ObservationLog
from persona.observation.run import ObservePass, PassResult
from persona.stages import AnchorStage, ObservationsStage, PersonaStateStage
from persona.state import PersonaBook

# The loop's one logger name, as before the split (log configs name it).
log = logging.getLogger("persona.stages")


@dataclass
class PersonaLoop:
    """The persona loop's parts, built once by the composition root."""

    store: Store
    supervisor: TaskSupervisor
    book: PersonaBook
    log: ObservationLog
    scorer: SyncScorer
    observe_pass: ObservePass
    planner: PlannerSettings
    agent_name: str
    observations_tokens: int
    observe_enabled: bool = True
    _judging: dict[int, asyncio.Task[Any]] = field(default_factory=dict)
    _observing: set[int] = field(default_factory=set)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[Any]:
        task = self.supervisor.spawn(name, coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def idle(self, timeout: float) -> bool:
        """Wait until no judge or observe task of this loop runs; True when they all ended."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._tasks:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=left)
        return True

    async def observer_backlog(self, threshold_tokens: int) -> ObserverBacklog:
        """Unread messages by the observer's cursors (for /metrics and /readyz)."""
        return await self.store.read(lambda c: observer_backlog(c, threshold_tokens))

    @property
    def context_stages(self) -> list[ContextStage]:
        return [
            PersonaStateStage(self.book),
            ObservationsStage(self.log, self.observations_tokens),
            AnchorStage(
                self.store,
                self.log,
                self.book,
                self.planner,
                self.agent_name,
                guard_unobserved=self.observe_enabled,
            ),
        ]

    @property
    def after_stages(self) -> list[AfterTurnStage]:
        stages: list[AfterTurnStage] = [JudgeStage(self)]
        if self.observe_enabled:
            stages.append(ObserveStage(self))
        return stages

    async def judge_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        request = outcome.request
        # The offline brain's notice is the gateway's voice, not the agent's: no verdict.
        if request is None or outcome.reply_text is None or not outcome.written_by_model:
            return
        state = (await self.book.latest()).state

        def block(kind: BlockKind) -> str:
            return "\n\n".join(b.text for b in request.system if b.kind is kind)

        item = JudgeInput(
            reply=outcome.reply_text,
            user_message=turn.text,
            pack=block(BlockKind.MEMORY),
            observations=block(BlockKind.OBSERVATIONS),
            history=request.messages[:-1],
            persona=block(BlockKind.PERSONA),
            state=state,
        )
        previous = self._judging.get(turn.conversation_id)
        task = self._spawn(
            f"judge-turn-{turn.turn_id}",
            self._judge(previous, turn, outcome.reply_id, item),
        )
        self._judging[turn.conversation_id] = task
        task.add_done_callback(lambda t: self._forget(turn.conversation_id, t))

    def _forget(self, conversation_id: int, task: asyncio.Task[Any]) -> None:
        if self._judging.get(conversation_id) is task:
            del self._judging[conversation_id]

    async def _judge(
        self,
        previous: asyncio.Task[Any] | None,
        turn: TurnContext,
        reply_id: int | None,
        item: JudgeInput,
    ) -> None:
        # Verdicts of one conversation are stored in turn order: the EWMA is a chain.
        if previous is not None:
            await asyncio.wait({previous})
        verdict = await self.scorer.score(
            turn_id=turn.turn_id,
            conversation_id=turn.conversation_id,
            reply_message_id=reply_id,
            item=item,
        )
        log.debug(
            "turn %d: SyncScore %s ewma=%s tier=%s by %s",
            turn.turn_id,
            verdict.composite,
            verdict.ewma,
            verdict.tier,
            verdict.judge,
        )
        if verdict.tier is Tier.SEVERE and self.observe_enabled:
            await self.observe_pass.run(turn.conversation_id, turn.person_id, force=True)

    async def observe_turn(self, turn: TurnContext) -> None:
        conversation_id = turn.conversation_id
        if conversation_id in self._observing or not await self.observe_pass.due(conversation_id):
            return
        self._observing.add(conversation_id)
        judging = self._judging.get(conversation_id)
        try:
            self._spawn(
                f"observe-conversation-{conversation_id}-turn-{turn.turn_id}",
                self._observe(judging, turn),
            )
        except RuntimeError:
            self._observing.discard(conversation_id)
            raise

    async def observe_now(self, conversation_id: int, person_id: int) -> PassResult | None:
        """A pass over the conversation's unobserved messages now, however few (the
        panel's "observe now"); None when none are left. It runs as this loop's task,
        like every pass: shutdown waits for it, and a page that goes away does not cut
        it short. A reply being judged is judged first (its verdict feeds the pass)."""
        done: list[PassResult | None] = []
        judging = self._judging.get(conversation_id)

        async def run() -> None:
            if judging is not None:
                await asyncio.wait({judging})
            done.append(await self.observe_pass.run(conversation_id, person_id, force=True))

        await asyncio.shield(self._spawn(f"observe-now-conversation-{conversation_id}", run()))
        return done[0] if done else None

    async def _observe(self, judging: asyncio.Task[Any] | None, turn: TurnContext) -> None:
        try:
            if judging is not None:
                await asyncio.wait({judging})
            await self.observe_pass.run(turn.conversation_id, turn.person_id)
        finally:
            self._observing.discard(turn.conversation_id)


@dataclass(frozen=True)
class JudgeStage:
    loop: PersonaLoop

    @property
    def name(self) -> str:
        return "judge"

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        await self.loop.judge_turn(turn, outcome)


@dataclass(frozen=True)
class ObserveStage:
    loop: PersonaLoop

    @property
    def name(self) -> str:
        return "observe"

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        await self.loop.observe_turn(turn)

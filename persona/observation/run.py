"""The observe pass: when it runs, and what one pass does.

A pass runs for one conversation when its unobserved messages reach the
token threshold: the observer writes observations (the log hands each to the
memory layer's sink), the cursor moves past the messages read, the persona
track feeds the PersonaState from the agent's in-voice replies, rules the
person stated are proposed, and when the person's observations pass their
own threshold the reflector condenses them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC

from sqlalchemy import select

from gateway.clock import local
from gateway.config import ObserveConfig
from gateway.errors import BrainError
from gateway.store import Store
from gateway.store.leases import Leases
from gateway.store.models import Message, MessageRole, Person, utcnow
from gateway.tokens import estimate_tokens
from gateway.zones import PersonZones
from memory.slots import UNNAMED_PERSON
from persona.models import ObserveRun, SyncScoreRow, VerdictStatus
from persona.observation.log import ObservationLog
from persona.observation.rules import RuleObserver
from persona.observation.types import KnownObservation, Observer, Reflector, SourceMessage
from persona.state import MergePolicy, PersonaBook
from persona.track import persona_signal, stated_rules

log = logging.getLogger(__name__)


def reflection_due(tokens: int, last_reflection_tokens: int | None, threshold: int) -> bool:
    """Reflect past the threshold, and again only once observations grew a quarter since.

    What a reflection keeps (high priority, current truths) may stay above the
    threshold; without the growth rule every later pass would reflect again.
    """
    if tokens < threshold:
        return False
    return last_reflection_tokens is None or tokens >= 1.25 * last_reflection_tokens


@dataclass(frozen=True)
class PassResult:
    observed_messages: int
    observations: int
    unextracted: int
    author: str
    persona_version: int | None
    proposed_rules: int
    reflected: bool
    notes: tuple[str, ...]


class ObservePass:
    """Runs the observer, the persona track and the reflector for one conversation at a time."""

    def __init__(
        self,
        store: Store,
        log_: ObservationLog,
        observer: Observer,
        reflector: Reflector,
        book: PersonaBook,
        config: ObserveConfig,
        policy: MergePolicy,
        *,
        agent_name: str,
        instructions: Callable[[], frozenset[str]],
        usd_per_mtok: tuple[float, float] = (1.0, 5.0),
        zones: PersonZones | None = None,
    ) -> None:
        self.store = store
        self.log = log_
        # Messages are read on the person's clock: "tomorrow" is their tomorrow.
        self.zones = zones if zones is not None else PersonZones(None, UTC)
        self.observer = observer
        self.reflector = reflector
        self.book = book
        self.config = config
        self.policy = policy
        self.agent_name = agent_name
        self.instructions = instructions
        self.prices = usd_per_mtok
        self._locks: dict[int, asyncio.Lock] = {}
        # A cluster's leases (issue 25), set by the app with store.cluster: then one
        # process at a time observes a conversation, reflects a person's observations
        # and commits a persona version. None: this process is the only one.
        self.leases: Leases | None = None

    def _cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.prices[0] + output_tokens * self.prices[1]) / 1_000_000

    async def due(self, conversation_id: int) -> bool:
        tokens = await self.log.unobserved_tokens(conversation_id)
        return tokens >= self.config.observer_tokens

    async def run(
        self, conversation_id: int, person_id: int, *, force: bool = False
    ) -> PassResult | None:
        """One pass if due (or forced); None when there was nothing to do."""
        lock = self._locks.setdefault(conversation_id, asyncio.Lock())
        async with lock, self._leased(f"observe:{conversation_id}") as held:
            if not held:
                # Another gateway of the cluster observes this conversation right now.
                return None
            messages = await self.log.unobserved(conversation_id)
            if not messages:
                return None
            if not force and sum(m.tokens for m in messages) < self.config.observer_tokens:
                return None
            return await self._run(conversation_id, person_id, messages)

    @asynccontextmanager
    async def _leased(self, name: str, *, wait_s: float = 0.0) -> AsyncIterator[bool]:
        """Held across the cluster when there is one (else at once)."""
        if self.leases is None:
            yield True
            return
        async with self.leases.hold(name, wait_s=wait_s) as held:
            yield held

    async def _speaker(self, person_id: int) -> str:
        async with self.store.session() as session:
            person = await session.get(Person, person_id)
        return (person.display_name if person is not None else "") or UNNAMED_PERSON

    async def _run(
        self, conversation_id: int, person_id: int, messages: Sequence[Message]
    ) -> PassResult:
        start = time.perf_counter()
        person_name = await self._speaker(person_id)
        zone = await self.zones.of(person_id)
        sources = [
            SourceMessage(
                m.id,
                "user" if m.role is MessageRole.USER else "assistant",
                person_name if m.role is MessageRole.USER else self.agent_name,
                m.text,
                local(m.created_at, zone),
            )
            for m in messages
        ]
        known = [s.observation.text for s in await self.log.active(person_id)]
        notes: list[str] = []
        try:
            result = await self.observer.observe(sources, known=known)
        except BrainError as exc:
            # A model that is down must not leave the conversation unobserved for
            # ever; the rules observe now, and say so in the run record.
            notes.append(f"{self.observer.name} failed ({exc.code}): rule-based fallback")
            result = await RuleObserver(self.instructions()).observe(sources, known=known)
        notes.extend(result.notes)
        await self.log.add(person_id, conversation_id, result.observations, result.author)
        await self.log.advance(conversation_id, max(m.id for m in messages))
        await self.log.record_run(
            ObserveRun(
                person_id=person_id,
                conversation_id=conversation_id,
                kind="observer",
                author=result.author,
                input_messages=len(messages),
                input_tokens=sum(m.tokens for m in messages),
                output_observations=len(result.observations),
                output_tokens=sum(estimate_tokens(o.text) for o in result.observations),
                unextracted_messages=result.unextracted,
                latency_ms=(time.perf_counter() - start) * 1000,
                cost_usd=self._cost(result.input_tokens, result.output_tokens),
                created_at=utcnow(),
            )
        )
        version = await self._persona_track(messages)
        proposed = 0
        for message in messages:
            if message.role is MessageRole.USER:
                for rule in stated_rules(message.text):
                    await self.book.propose_rule(rule, person_id=person_id, message_id=message.id)
                    proposed += 1
        reflected = await self.reflect_if_due(person_id, conversation_id)
        return PassResult(
            observed_messages=len(messages),
            observations=len(result.observations),
            unextracted=result.unextracted,
            author=result.author,
            persona_version=version,
            proposed_rules=proposed,
            reflected=reflected,
            notes=tuple(notes),
        )

    async def _persona_track(self, messages: Sequence[Message]) -> int | None:
        """Feed the PersonaState from the agent's replies that the judge found in voice."""
        reply_ids = [m.id for m in messages if m.role is MessageRole.ASSISTANT]
        if not reply_ids:
            return None
        async with self.store.session() as session:
            rows = (
                await session.execute(
                    select(SyncScoreRow.reply_message_id, SyncScoreRow.composite).where(
                        SyncScoreRow.reply_message_id.in_(reply_ids),
                        SyncScoreRow.status == VerdictStatus.SCORED,
                    )
                )
            ).all()
        in_voice = {
            rid
            for rid, composite in rows
            if composite is not None and composite >= self.config.persona_min_score
        }
        replies = [m.text for m in messages if m.id in in_voice]
        if not replies:
            return None
        # Read, merge and commit as one step across a cluster: two processes merging
        # into the same version would lose one's merge. Waits (bounded) for the other.
        wait_s = self.leases.lease_s if self.leases is not None else 0.0
        async with self._leased("persona-version", wait_s=wait_s) as held:
            if not held:
                log.warning("persona track: another process kept the persona's lease; skipped")
                return None
            current = await self.book.current()
            state = current.state.merged(persona_signal(replies), self.policy)
            version = await self.book.update(
                state, "observe", f"persona track: {len(replies)} in-voice replies"
            )
        return version.version if version is not None else None

    async def reflect_if_due(
        self, person_id: int, conversation_id: int | None, *, force: bool = False
    ) -> bool:
        # One reflector per person across a cluster; the other process's run counts.
        async with self._leased(f"reflect:{person_id}") as held:
            return held and await self._reflect_if_due(person_id, conversation_id, force=force)

    async def _reflect_if_due(
        self, person_id: int, conversation_id: int | None, *, force: bool
    ) -> bool:
        active = await self.log.active(person_id)
        tokens = sum(estimate_tokens(s.observation.text) for s in active)
        last = await self.log.last_reflection_tokens(person_id)
        if not active or not (force or reflection_due(tokens, last, self.config.reflector_tokens)):
            return False
        start = time.perf_counter()
        # Read on the person's clock: "recurring on two days" are two of their days.
        zone = await self.zones.of(person_id)
        known = [
            KnownObservation(
                s.observation_id,
                replace(s.observation, observed_at=local(s.observation.observed_at, zone)),
            )
            for s in active
        ]
        try:
            reflection = await self.reflector.reflect(
                known, target_tokens=self.config.reflector_tokens // 2
            )
        except BrainError as exc:
            log.warning(
                "reflector %s failed (%s); will retry at the next pass",
                self.reflector.name,
                exc.code,
            )
            return False
        counts = await self.log.apply(person_id, reflection)
        after = await self.log.active(person_id)
        await self.log.record_run(
            ObserveRun(
                person_id=person_id,
                conversation_id=conversation_id,
                kind="reflector",
                author=reflection.author,
                input_messages=len(active),
                input_tokens=tokens,
                output_observations=len(after),
                output_tokens=sum(estimate_tokens(s.observation.text) for s in after),
                unextracted_messages=0,
                latency_ms=(time.perf_counter() - start) * 1000,
                cost_usd=self._cost(reflection.input_tokens, reflection.output_tokens),
                created_at=utcnow(),
            )
        )
        log.info("reflection for person %d: %s", person_id, counts)
        return True

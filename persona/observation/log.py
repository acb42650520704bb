"""The observation log: the tables' side of observation.

The ``observations`` table (each also handed to the sink), the observer's
cursor per conversation (``observe_cursor``) and the runs of the observer and
reflector (``observe_runs``); the ORM classes are in ``persona.models``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC
from typing import Any

from sqlalchemy import Row, bindparam, func, select, update

from gateway.clock import local
from gateway.prompt import StageRead
from gateway.store import Store
from gateway.store.models import Message, utcnow
from gateway.tokens import estimate_tokens
from gateway.zones import PersonZones
from memory.repo.validity import ended_of
from persona.models import ObservationRow, ObservationStatus, ObserveCursor, ObserveRun
from persona.observation.block import BLOCK_HEADER, render_block
from persona.observation.types import (
    Category,
    Observation,
    ObservationSink,
    Priority,
    Reflection,
)

SUPERSEDED_NOTE = " [superseded DATE]: no longer true since DATE (a newer statement replaced it)."


@dataclass(frozen=True)
class StoredObservation:
    observation_id: int
    person_id: int
    conversation_id: int | None
    observation: Observation
    status: ObservationStatus
    generation: int
    author: str
    memory_item_id: int | None


def stored_of(rows: Sequence[Row[Any]]) -> list[StoredObservation]:
    """The observations of ``ObservationLog.active_read``'s rows."""
    return [_stored(row) for row in rows]


def _stored(row: ObservationRow | Row[Any]) -> StoredObservation:
    return StoredObservation(
        row.id,
        row.person_id,
        row.conversation_id,
        Observation(
            text=row.text,
            priority=Priority(row.priority),
            category=Category(row.category),
            observed_at=row.observed_at,
            source_message_ids=tuple(row.source_message_ids),
            referred_on=row.referred_on,
            relative_phrase=row.relative_phrase,
        ),
        row.status,
        row.generation,
        row.author,
        row.memory_item_id,
    )


# The per-turn reads, built once with their ids bound at execution: building them
# cost the event loop a share of every turn (issue 28, "CPU per turn").
_UNOBSERVED_TOKENS = select(func.coalesce(func.sum(Message.tokens), 0)).where(
    Message.conversation_id == bindparam("conversation_id"),
    Message.id
    > func.coalesce(
        select(ObserveCursor.observed_through_message_id)
        .where(ObserveCursor.conversation_id == bindparam("conversation_id"))
        .scalar_subquery(),
        0,
    ),
)
# Its columns, not the mapped class: Core rows (same attribute names) cost the reader
# thread no ORM session or identity map.
_ACTIVE = (
    select(ObservationRow.__table__)
    .where(
        ObservationRow.person_id == bindparam("person_id"),
        ObservationRow.status == ObservationStatus.ACTIVE,
    )
    .order_by(ObservationRow.observed_at, ObservationRow.id)
)


class ObservationLog:
    """The observations table, the observer's cursor and its run records."""

    def __init__(
        self,
        store: Store,
        sink: ObservationSink | None = None,
        *,
        zones: PersonZones | None = None,
    ) -> None:
        self.store = store
        self.sink = sink
        # Each person's zone: the days and times their block shows.
        self.zones = zones if zones is not None else PersonZones(None, UTC)

    async def cursor(self, conversation_id: int) -> int:
        async with self.store.reader() as session:
            row = await session.get(ObserveCursor, conversation_id)
        return row.observed_through_message_id if row is not None else 0

    async def unobserved(self, conversation_id: int) -> list[Message]:
        through = await self.cursor(conversation_id)
        async with self.store.reader() as session:
            rows = (
                await session.scalars(
                    select(Message)
                    .where(Message.conversation_id == conversation_id, Message.id > through)
                    .order_by(Message.id)
                )
            ).all()
        return list(rows)

    async def unobserved_tokens(self, conversation_id: int) -> int:
        """The tokens of the messages the observer has not read: one statement, no rows
        (every turn asks whether a pass is due)."""
        params = {"conversation_id": conversation_id}
        tokens = await self.store.read(
            lambda connection: connection.scalar(_UNOBSERVED_TOKENS, params)
        )
        return int(tokens or 0)

    async def advance(self, conversation_id: int, through_message_id: int) -> None:
        async with self.store.session() as session:
            row = await session.get(ObserveCursor, conversation_id)
            if row is None:
                session.add(
                    ObserveCursor(
                        conversation_id=conversation_id,
                        observed_through_message_id=through_message_id,
                        updated_at=utcnow(),
                    )
                )
            elif through_message_id > row.observed_through_message_id:
                row.observed_through_message_id = through_message_id
                row.updated_at = utcnow()

    async def add(
        self,
        person_id: int,
        conversation_id: int | None,
        observations: Sequence[Observation],
        author: str,
        generation: int = 0,
    ) -> list[int]:
        ids: list[int] = []
        async with self.store.session() as session:
            for observation in observations:
                row = ObservationRow(
                    person_id=person_id,
                    conversation_id=conversation_id,
                    text=observation.text,
                    priority=observation.priority.value,
                    category=observation.category.value,
                    observed_at=observation.observed_at,
                    referred_on=observation.referred_on,
                    relative_phrase=observation.relative_phrase[:100],
                    source_message_ids=list(observation.source_message_ids),
                    status=ObservationStatus.ACTIVE,
                    generation=generation,
                    author=author[:100],
                    tokens=estimate_tokens(observation.text),
                    created_at=utcnow(),
                )
                session.add(row)
                await session.flush()
                ids.append(row.id)
        if self.sink is not None:
            for observation_id, observation in zip(ids, observations, strict=True):
                item_id = await self.sink.observation_added(observation_id, person_id, observation)
                if item_id is not None:
                    async with self.store.session() as session:
                        await session.execute(
                            update(ObservationRow)
                            .where(ObservationRow.id == observation_id)
                            .values(memory_item_id=item_id)
                        )
        return ids

    async def active(self, person_id: int) -> list[StoredObservation]:
        # Every turn's observations block reads this: one hop on a reader thread (issue 28).
        return stored_of(await self.store.read(self.active_read(person_id).work))

    def active_read(self, person_id: int) -> StageRead[Sequence[Row[Any]]]:
        """What ``active`` reads (the observations stage declares it: gateway/prompt.py)."""
        params = {"person_id": person_id}
        return StageRead(
            "observations", lambda connection: connection.execute(_ACTIVE, params).all()
        )

    async def all(self, person_id: int) -> list[StoredObservation]:
        async with self.store.reader() as session:
            rows = (
                await session.scalars(
                    select(ObservationRow)
                    .where(ObservationRow.person_id == person_id)
                    .order_by(ObservationRow.id)
                )
            ).all()
        return [_stored(row) for row in rows]

    async def block(self, person_id: int, budget_tokens: int) -> str:
        return await self.block_of(person_id, await self.active(person_id), budget_tokens)

    async def block_of(
        self, person_id: int, active: Sequence[StoredObservation], budget_tokens: int
    ) -> str:
        """``block`` from the person's active observations (``active``)."""
        zone = await self.zones.of(person_id)
        # An observation whose memory item a newer statement ended (memory/validity.py)
        # is tagged as the pack tags it, so the block never states it as current.
        ended = await ended_of(self.store, [s.memory_item_id for s in active if s.memory_item_id])
        observations = [
            s.observation
            if s.memory_item_id not in ended
            else replace(
                s.observation,
                text=f"[superseded {local(ended[s.memory_item_id], zone):%Y-%m-%d}] "
                + s.observation.text,
            )
            for s in active
        ]
        block = render_block(observations, budget_tokens, zone)
        if ended:
            block = block.replace(BLOCK_HEADER, BLOCK_HEADER + SUPERSEDED_NOTE, 1)
        return block

    async def apply(self, person_id: int, reflection: Reflection) -> dict[str, int]:
        """Write a reflection: merged observations added, the replaced ones retired."""
        active = {s.observation_id: s for s in await self.active(person_id)}
        generation = 1 + max((s.generation for s in active.values()), default=0)
        replaced_by: dict[int, int] = {}
        for merge in reflection.merges:
            ids = [i for i in merge.ids if i in active]
            if not ids:
                continue
            (new_id,) = await self.add(
                person_id,
                active[ids[-1]].conversation_id,
                [merge.observation],
                reflection.author,
                generation,
            )
            for old in ids:
                replaced_by[old] = new_id
        retire: list[tuple[int, ObservationStatus, int | None]] = [
            (old, ObservationStatus.CONDENSED, new) for old, new in replaced_by.items()
        ]
        for old, newer in reflection.supersede:
            if old in active and old not in replaced_by:
                retire.append((old, ObservationStatus.SUPERSEDED, replaced_by.get(newer, newer)))
        retire.extend(
            (old, ObservationStatus.CONDENSED, None)
            for old in reflection.drops
            if old in active and old not in replaced_by
        )
        async with self.store.session() as session:
            for old, status, newer_id in retire:
                await session.execute(
                    update(ObservationRow)
                    .where(ObservationRow.id == old)
                    .values(status=status, superseded_by=newer_id)
                )
        if self.sink is not None:
            for old, _status, _newer in retire:
                await self.sink.observation_retired(old, active[old].memory_item_id)
        return {
            "merged": len(replaced_by),
            "superseded": sum(1 for r in retire if r[1] is ObservationStatus.SUPERSEDED),
            "dropped": sum(
                1 for r in retire if r[1] is ObservationStatus.CONDENSED and r[2] is None
            ),
        }

    async def record_run(self, run: ObserveRun) -> None:
        async with self.store.session() as session:
            session.add(run)

    async def last_reflection_tokens(self, person_id: int) -> int | None:
        """What the person's last reflection left standing, in tokens (None: never reflected)."""
        async with self.store.reader() as session:
            tokens = await session.scalar(
                select(ObserveRun.output_tokens)
                .where(ObserveRun.person_id == person_id, ObserveRun.kind == "reflector")
                .order_by(ObserveRun.id.desc())
                .limit(1)
            )
        return None if tokens is None else int(tokens)

    async def runs(self, person_id: int) -> list[ObserveRun]:
        async with self.store.reader() as session:
            rows = (
                await session.scalars(
                    select(ObserveRun)
                    .where(ObserveRun.person_id == person_id)
                    .order_by(ObserveRun.id)
                )
            ).all()
        return list(rows)

"""Reads and writes of the ``triggers`` table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

from sqlalchemy import bindparam, select, update

from gateway.prompt import StageRead
from gateway.store import Store
from gateway.store.threads import orm_work
from memory.models import MemoryItem
from memory.triggers.models import Trigger, TriggerStatus
from memory.types import ItemStatus


@dataclass(frozen=True)
class NewTrigger:
    person_id: int
    conversation_id: int | None
    channel: str
    message_id: int | None
    trigger_date: date
    phrase: str
    context: str
    memory_ids: tuple[int, ...]


async def add_triggers(store: Store, new: Sequence[NewTrigger], at: datetime) -> list[int]:
    """Store each unless the same message already made one for that day (a retried turn)."""
    ids: list[int] = []
    async with store.session() as session:
        for trigger in new:
            known = await session.scalar(
                select(Trigger.id).where(
                    Trigger.person_id == trigger.person_id,
                    Trigger.message_id == trigger.message_id,
                    Trigger.trigger_date == trigger.trigger_date,
                )
            )
            if known is not None:
                continue
            row = Trigger(
                person_id=trigger.person_id,
                conversation_id=trigger.conversation_id,
                channel=trigger.channel,
                message_id=trigger.message_id,
                trigger_date=trigger.trigger_date,
                phrase=trigger.phrase,
                context=trigger.context,
                memory_ids=list(trigger.memory_ids),
                status=TriggerStatus.UPCOMING,
                created_at=at,
            )
            session.add(row)
            await session.flush()
            ids.append(row.id)
    return ids


async def open_triggers(store: Store, person_id: int, from_day: date) -> list[Trigger]:
    """A person's triggers not cancelled whose day is ``from_day`` or later."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(Trigger)
            .where(
                Trigger.person_id == person_id,
                Trigger.trigger_date >= from_day,
                Trigger.status != TriggerStatus.CANCELLED,
            )
            .order_by(Trigger.trigger_date, Trigger.id)
        )
        return list(rows)


# Built once, the person and day bound at execution: building it cost the event
# loop a share of every turn (issue 28, "CPU per turn").
_OF_DAY = (
    select(Trigger)
    .where(
        Trigger.person_id == bindparam("person_id"),
        Trigger.trigger_date == bindparam("day"),
        Trigger.status != TriggerStatus.CANCELLED,
    )
    .order_by(Trigger.id)
)


async def triggers_of_day(store: Store, person_id: int, day: date) -> list[Trigger]:
    # Every turn's prompt reads this: one hop on a reader thread (issue 28).
    return await store.read(of_day_read(person_id, day).work)


def of_day_read(person_id: int, day: date) -> StageRead[list[Trigger]]:
    """What ``triggers_of_day`` reads (the today stage declares it: gateway/prompt.py)."""
    params = {"person_id": person_id, "day": day}
    return StageRead("today", orm_work(lambda session: list(session.scalars(_OF_DAY, params))))


async def mark_fired(store: Store, ids: Sequence[int], at: datetime) -> None:
    if not ids:
        return
    async with store.session() as session:
        await session.execute(
            update(Trigger)
            .where(Trigger.id.in_(ids), Trigger.status == TriggerStatus.UPCOMING)
            .values(status=TriggerStatus.FIRED, fired_at=at)
        )


async def cancel(
    store: Store, ids: Sequence[int], at: datetime, by_message: int | None = None
) -> int:
    """Cancel these triggers (those not cancelled already); how many."""
    if not ids:
        return 0
    async with store.session() as session:
        result = await session.execute(
            update(Trigger)
            .where(Trigger.id.in_(ids), Trigger.status != TriggerStatus.CANCELLED)
            .values(status=TriggerStatus.CANCELLED, cancelled_at=at, cancelled_by=by_message)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]


async def memory_texts(store: Store, ids: Sequence[int]) -> dict[int, str]:
    """The content of those items still recallable (a forgotten one stays forgotten)."""
    if not ids:
        return {}
    async with store.reader() as session:
        rows = await session.execute(
            select(MemoryItem.id, MemoryItem.content).where(
                MemoryItem.id.in_(ids), MemoryItem.status == ItemStatus.ACTIVE
            )
        )
        return {row.id: row.content for row in rows}


async def due_unsent(store: Store, up_to: date, limit: int = 100) -> list[Trigger]:
    """Triggers whose day (in their person's zone, checked by the caller) may have come,
    not cancelled and with no proactive message yet; at most ``limit``."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(Trigger)
            .where(
                Trigger.trigger_date <= up_to,
                Trigger.status != TriggerStatus.CANCELLED,
                Trigger.proactive_at.is_(None),
            )
            .order_by(Trigger.trigger_date, Trigger.id)
            .limit(limit)
        )
        return list(rows)


async def claim_proactive(store: Store, trigger_id: int, at: datetime) -> bool:
    """Mark the trigger's proactive message as sent, before it is; whether this call did.

    At most once: a restart (or a second task) finds it claimed and sends nothing.
    """
    async with store.session() as session:
        result = await session.execute(
            update(Trigger)
            .where(Trigger.id == trigger_id, Trigger.proactive_at.is_(None))
            .values(proactive_at=at)
        )
        claimed = int(result.rowcount) == 1  # type: ignore[attr-defined]
        if claimed:
            await session.execute(
                update(Trigger)
                .where(Trigger.id == trigger_id, Trigger.status == TriggerStatus.UPCOMING)
                .values(status=TriggerStatus.FIRED, fired_at=at)
            )
        return claimed


async def listed(store: Store, limit: int = 500) -> list[Trigger]:
    """Every trigger for the panel, the latest days first."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(Trigger).order_by(Trigger.trigger_date.desc(), Trigger.id.desc()).limit(limit)
        )
        return list(rows)

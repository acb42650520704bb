"""The cost meter: each turn's cost stored, the month's spend kept, the mode switched.

A stage-event subscriber (gateway/events.py): a context stage's END adds to the
turn's pack and context time ("memory" is the pack), the TURN's END prices the
model's usage with ``budget.prices`` (gateway/prices.py), takes the turn's
embedding and database figures (gateway/usage.py), adds the cost to the
month's spend in ``BudgetState`` (which may switch the mode, logged once) and
stores a ``turn_costs`` row. Writes run as tasks of their own, off the turn:
the subscriber is synchronous and costs the turn no await. The panel's cost
page and ``agentgw_cost_usd_total`` read what it keeps.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from gateway.brains.base import Completion
from gateway.budget import BudgetMode, BudgetState, ModeChange, month_of
from gateway.clock import local
from gateway.config import Config
from gateway.errors import AgentGWError
from gateway.events import CURRENT_TURN, StageEvent, StageKind, StagePhase
from gateway.prices import cost_usd
from gateway.store import Store
from gateway.store.cost_models import BudgetModeChange, TurnCost
from gateway.store.models import Person
from gateway.usage import current_usage

log = logging.getLogger(__name__)

# The channel of a utility-model call's row (no turn: gateway/utility_costs.py).
UTILITY_CHANNEL = "utility"

# The memory layer's context stage: its time is the pack's.
PACK_STAGE = "memory"


# The figures a retried turn's attempts add up to.
_SUMMED = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
    "embed_calls",
    "embed_texts",
    "embed_ms",
    "pack_ms",
    "context_ms",
    "db_calls",
    "db_ms",
)


@dataclass
class _Open:
    pack_ms: float = 0.0
    context_ms: float = 0.0


@dataclass
class CostMeter:
    store: Store
    config: Config
    state: BudgetState
    # Called with (model, USD) for each priced turn (the /metrics counter).
    on_cost: Callable[[str, float], None] | None = None
    _open: dict[int, _Open] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _unpriced: set[str] = field(default_factory=set)

    @classmethod
    async def start(
        cls,
        store: Store,
        config: Config,
        *,
        clock: Callable[[], datetime] | None = None,
        on_cost: Callable[[str, float], None] | None = None,
    ) -> CostMeter:
        """The meter, its month's spend read back from the store."""
        budget = config.budget
        state = BudgetState(
            budget.monthly_usd,
            config.zone,
            tight_share=budget.tight_share,
            over_pack_tokens=budget.over_pack_tokens,
            tight_fizzle=budget.tight_fizzle,
            **({"clock": clock} if clock is not None else {}),
        )
        now = state.clock()
        month = month_of(now, config.zone)
        state.start_month(month, await month_spend(store, month_start(now, config.zone)))
        meter = cls(store, config, state, on_cost)
        state.listeners.append(meter._mode_changed)
        if state.mode is not BudgetMode.NORMAL:
            log.warning(
                "budget: %s at start (%.4f of %.2f USD spent in %s)",
                state.mode.value,
                state.spent_usd,
                state.monthly_usd,
                month,
            )
        return meter

    def observe(self, event: StageEvent) -> None:
        """A stage event from the hub, in the turn's own context."""
        if event.phase is StagePhase.CONTEXT and event.kind is not StageKind.START:
            spent = (event.duration_s or 0.0) * 1000
            opened = self._open.setdefault(event.turn_id, _Open())
            opened.context_ms += spent
            if event.stage == PACK_STAGE:
                opened.pack_ms += spent
            return
        if event.phase is not StagePhase.TURN or event.kind is StageKind.START:
            return
        opened = self._open.pop(event.turn_id, _Open())
        self.record(event, opened)

    def record(self, event: StageEvent, opened: _Open) -> float:
        now = self.state.clock()
        model = event.model or ""
        usd = self._priced(
            model,
            input_tokens=event.input_tokens,
            output_tokens=event.output_tokens,
            cache_read_tokens=event.cache_read_tokens,
            cache_write_tokens=event.cache_write_tokens,
        )
        mode = self.state.mode_at(now)
        self.state.add(usd, now)
        usage = current_usage()
        ids = CURRENT_TURN.get()
        row: dict[str, Any] = {
            "turn_id": event.turn_id,
            "person_id": ids.person_id if ids is not None else None,
            "channel": event.channel,
            "day": local(now, self.config.zone).date(),
            "at": now,
            "model": model,
            "input_tokens": event.input_tokens,
            "output_tokens": event.output_tokens,
            "cache_read_tokens": event.cache_read_tokens,
            "cache_write_tokens": event.cache_write_tokens,
            "cost_usd": usd,
            "embed_calls": usage.embed_calls if usage else 0,
            "embed_texts": usage.embed_texts if usage else 0,
            "embed_ms": usage.embed_s * 1000 if usage else 0.0,
            "pack_ms": opened.pack_ms,
            "context_ms": opened.context_ms,
            "db_calls": usage.db_calls if usage else 0,
            "db_ms": usage.db_s * 1000 if usage else 0.0,
            "mode": mode.value,
        }
        self._spawn(self._write_cost(row))
        return usd

    def record_utility(self, completion: Completion) -> float:
        """A utility-model call (gateway/utility_costs.py): priced, added to the month's
        spend, stored as a row without a turn."""
        now = self.state.clock()
        model = completion.model or ""
        usage = completion.usage
        usd = self._priced(
            model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )
        mode = self.state.mode_at(now)
        self.state.add(usd, now)
        ids = CURRENT_TURN.get()
        row: dict[str, Any] = {
            "turn_id": None,
            "person_id": ids.person_id if ids is not None else None,
            "channel": UTILITY_CHANNEL,
            "day": local(now, self.config.zone).date(),
            "at": now,
            "model": model,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "cost_usd": usd,
            "mode": mode.value,
        }
        self._spawn(self._write_utility(row))
        return usd

    def _priced(
        self,
        model: str,
        *,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int,
        cache_write_tokens: int,
    ) -> float:
        if not model:
            return 0.0
        priced = cost_usd(
            self.config.budget.prices,
            model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
        )
        if priced is None:
            if model not in self._unpriced:
                self._unpriced.add(model)
                log.warning("budget: no price for model %r in budget.prices; counted 0", model)
            priced = 0.0
        if self.on_cost is not None:
            self.on_cost(model, priced)
        return priced

    async def _write_utility(self, row: dict[str, Any]) -> None:
        try:
            async with self.store.session() as session:
                await session.execute(insert(TurnCost).values(**row))
        except AgentGWError:
            log.exception("budget: could not store the cost of a utility call")

    def _mode_changed(self, change: ModeChange) -> None:
        self._spawn(self._write_change(change))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        # A context of its own: the write's database time is not the turn's.
        task = asyncio.get_running_loop().create_task(work, context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write_cost(self, row: dict[str, Any]) -> None:
        try:
            statement = _upsert_cost(self.store.is_sqlite)
            # Plain Core in the store's writer: one hop a turn (issue 28, "CPU per turn").
            await self.store.write(lambda connection: connection.execute(statement, row))
        except AgentGWError:
            log.exception("budget: could not store the cost of turn %s", row["turn_id"])

    async def _write_change(self, change: ModeChange) -> None:
        try:
            async with self.store.session() as session:
                await session.execute(
                    insert(BudgetModeChange).values(
                        at=change.at,
                        month=change.month,
                        previous=change.previous.value,
                        mode=change.mode.value,
                        spent_usd=change.spent_usd,
                        budget_usd=change.budget_usd,
                    )
                )
        except AgentGWError:
            log.exception("budget: could not store the mode change to %s", change.mode.value)

    async def settled(self) -> None:
        """Wait for the writes under way (tests, shutdown)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def aclose(self) -> None:
        await self.settled()


def month_start(at: datetime, zone: tzinfo) -> date:
    return local(at, zone).date().replace(day=1)


async def month_spend(store: Store, first_day: date) -> float:
    async with store.reader() as session:
        total = await session.scalar(
            select(func.coalesce(func.sum(TurnCost.cost_usd), 0.0)).where(TurnCost.day >= first_day)
        )
    return float(total or 0.0)


@dataclass(frozen=True)
class DaySpend:
    day: date
    usd: float
    turns: int


@dataclass(frozen=True)
class PersonSpend:
    person_id: int | None
    name: str
    usd: float
    turns: int
    tokens: int


@dataclass(frozen=True)
class CostSummary:
    days: list[DaySpend]
    people: list[PersonSpend]
    changes: list[ModeChange]
    month: str
    month_usd: float
    budget_usd: float
    mode: str
    # Means over the period's turns: what the page lists beside the charts.
    embed_calls: int
    pack_ms: float
    db_ms: float


async def cost_summary(
    store: Store, state: BudgetState | None, config: Config, *, days: int = 30
) -> CostSummary:
    """Spend per day and per person over the last ``days`` days, the month and its changes."""
    now = state.clock() if state is not None else datetime.now(UTC)
    zone = config.zone
    today = local(now, zone).date()
    since = today - timedelta(days=days - 1)
    async with store.reader() as session:
        by_day = (
            await session.execute(
                select(TurnCost.day, func.sum(TurnCost.cost_usd), func.count())
                .where(TurnCost.day >= since)
                .group_by(TurnCost.day)
                .order_by(TurnCost.day)
            )
        ).all()
        by_person = (
            await session.execute(
                select(
                    TurnCost.person_id,
                    Person.display_name,
                    func.sum(TurnCost.cost_usd),
                    func.count(),
                    func.sum(
                        TurnCost.input_tokens
                        + TurnCost.output_tokens
                        + TurnCost.cache_read_tokens
                        + TurnCost.cache_write_tokens
                    ),
                )
                .outerjoin(Person, Person.id == TurnCost.person_id)
                .where(TurnCost.day >= since)
                .group_by(TurnCost.person_id, Person.display_name)
                .order_by(func.sum(TurnCost.cost_usd).desc())
            )
        ).all()
        means = (
            await session.execute(
                select(
                    func.coalesce(func.sum(TurnCost.embed_calls), 0),
                    func.coalesce(func.avg(TurnCost.pack_ms), 0.0),
                    func.coalesce(func.avg(TurnCost.db_ms), 0.0),
                ).where(TurnCost.day >= since)
            )
        ).one()
        changes = (
            await session.scalars(
                select(BudgetModeChange).order_by(BudgetModeChange.at.desc()).limit(50)
            )
        ).all()
    month = month_of(now, zone)
    month_usd = await month_spend(store, month_start(now, zone))
    return CostSummary(
        days=[DaySpend(d, float(usd or 0.0), int(n)) for d, usd, n in by_day],
        people=[
            PersonSpend(pid, name or (f"person {pid}" if pid else "unknown"), float(u or 0), n, t)
            for pid, name, u, n, t in by_person
        ],
        changes=[
            ModeChange(
                c.at,
                c.month,
                BudgetMode(c.previous),
                BudgetMode(c.mode),
                c.spent_usd,
                c.budget_usd,
            )
            for c in changes
        ],
        month=month,
        month_usd=month_usd,
        budget_usd=config.budget.monthly_usd,
        mode=state.mode_at(now).value if state is not None else "normal",
        embed_calls=int(means[0]),
        pack_ms=float(means[1]),
        db_ms=float(means[2]),
    )


@functools.cache
def _upsert_cost(is_sqlite: bool) -> Any:
    """The cost row's insert, built once (building it cost ~0.5 ms of the loop's CPU a
    turn); the row's values are the execution's parameters."""
    dialect = sqlite if is_sqlite else postgresql
    inserted = dialect.insert(TurnCost)
    # A retried turn (the person's "retry" of a failed one) keeps its id: its
    # second attempt's spend adds to the first's, which was spent too.
    added = {key: getattr(TurnCost, key) + getattr(inserted.excluded, key) for key in _SUMMED}
    return inserted.on_conflict_do_update(
        index_elements=["turn_id"],
        set_={**added, "model": inserted.excluded.model, "mode": inserted.excluded.mode},
    )

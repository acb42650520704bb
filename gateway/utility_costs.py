"""Utility-model calls counted in the month's spend (issue 22, budget-aware).

The reply's cost is priced from the turn's END event (gateway/costs.py). The
calls of the utility model — the judge, the observer, lessons, the weekly
job's categories and summaries, the slot judge, the proactive messages — run
outside a turn's accounting, through ``Brain.complete`` with
``Purpose.UTILITY``. ``MeteredBrain`` wraps the configured brain and hands each
such completion to the cost meter, which prices it from ``budget.prices``,
adds it to the month's spend (it may switch the budget's mode) and stores it as
a ``turn_costs`` row without a turn (channel ``utility``), so the month read
back at start, the panel's chart and ``agentgw_cost_usd_total`` include it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from gateway.brains.base import Brain, BrainEvent, BrainRequest, Completion, Purpose


class UtilityMeter(Protocol):
    def record_utility(self, completion: Completion) -> float: ...


class MeteredBrain:
    """A brain whose utility completions are counted; everything else passes through."""

    def __init__(self, inner: Brain, meter: UtilityMeter) -> None:
        self.inner = inner
        self.meter = meter

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def supports_tools(self) -> bool:
        # The pipeline offers the model its tools only when the brain speaks tool
        # calling (gateway/pipeline.py): the wrapper must not hide that.
        return bool(getattr(self.inner, "supports_tools", False))

    def stream(self, request: BrainRequest) -> AsyncIterator[BrainEvent]:
        # The reply's stream: its cost is the turn's (priced at the turn's end).
        return self.inner.stream(request)

    async def complete(self, request: BrainRequest) -> Completion:
        completion = await self.inner.complete(request)
        if request.purpose is Purpose.UTILITY and completion.written_by_model:
            self.meter.record_utility(completion)
        return completion

    async def aclose(self) -> None:
        await self.inner.aclose()

"""The judge, the observer and the reflector under a monthly budget (issue 22).

Each wraps the model form and its no-model form and asks the budget's mode at
every call (gateway/budget.py): in ``normal`` the model runs, in ``tight`` and
``over`` the local judge, the rule observer and the rule reflector do, so the
utility model costs nothing once 80 % of the month's budget is spent. The
verdicts and observation runs name who made them, as always.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.budget import BudgetState
from persona.judge import Judge, JudgeInput, Judgement
from persona.observation.types import (
    KnownObservation,
    Observer,
    ObserveResult,
    Reflection,
    Reflector,
    SourceMessage,
)


class BudgetedJudge:
    def __init__(self, model: Judge, fallback: Judge, budget: BudgetState) -> None:
        self.model, self.fallback, self.budget = model, fallback, budget

    def _now(self) -> Judge:
        return self.model if BudgetState.models(self.budget.current()) else self.fallback

    @property
    def name(self) -> str:
        return self._now().name

    async def judge(self, item: JudgeInput) -> Judgement:
        return await self._now().judge(item)


class BudgetedObserver:
    def __init__(self, model: Observer, fallback: Observer, budget: BudgetState) -> None:
        self.model, self.fallback, self.budget = model, fallback, budget

    def _now(self) -> Observer:
        return self.model if BudgetState.models(self.budget.current()) else self.fallback

    @property
    def name(self) -> str:
        return self._now().name

    async def observe(
        self, messages: Sequence[SourceMessage], *, known: Sequence[str] = ()
    ) -> ObserveResult:
        return await self._now().observe(messages, known=known)


class BudgetedReflector:
    def __init__(self, model: Reflector, fallback: Reflector, budget: BudgetState) -> None:
        self.model, self.fallback, self.budget = model, fallback, budget

    def _now(self) -> Reflector:
        return self.model if BudgetState.models(self.budget.current()) else self.fallback

    @property
    def name(self) -> str:
        return self._now().name

    async def reflect(
        self, observations: Sequence[KnownObservation], *, target_tokens: int
    ) -> Reflection:
        return await self._now().reflect(observations, target_tokens=target_tokens)

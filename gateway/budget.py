"""The monthly budget's mode: what the pack, the observer and the judge may spend.

``BudgetState`` is the small object they read (given to them as an argument:
memory and persona never import the meter that feeds it). It holds the spend
of the current calendar month in ``agent.timezone`` and the mode that follows:

- ``normal``: below ``tight_share`` (80 %) of ``budget.monthly_usd``;
- ``tight``: from there, the pack budget halves, the dense path (query
  embedding and ANN search) is skipped, the observer and the judge use their
  forms without a model, and a memory that was packed but ignored loses
  strength (``tight_fizzle``) instead of gaining the usual small amount;
- ``over``: past 100 %, replies still go out, with the smallest pack
  (``over_pack_tokens``) and everything of ``tight``.

A month that begins puts the spend back to 0 and the mode back to ``normal``
(checked whenever the mode is read, so it does not wait for a turn to end).
With ``monthly_usd`` 0 there is no budget: always ``normal``.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from gateway.clock import local

log = logging.getLogger(__name__)


class BudgetMode(enum.StrEnum):
    NORMAL = "normal"
    TIGHT = "tight"
    OVER = "over"


@dataclass(frozen=True)
class ModeChange:
    at: datetime
    month: str
    previous: BudgetMode
    mode: BudgetMode
    spent_usd: float
    budget_usd: float


def month_of(at: datetime, zone: tzinfo) -> str:
    """ "2026-11": the calendar month of ``at`` in ``zone``."""
    return local(at, zone).strftime("%Y-%m")


class BudgetState:
    """The month's spend and mode; read by the pack, the observer and the judge."""

    def __init__(
        self,
        monthly_usd: float,
        zone: tzinfo,
        *,
        tight_share: float = 0.8,
        over_pack_tokens: int = 250,
        tight_fizzle: float = 0.25,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.monthly_usd = monthly_usd
        self.zone = zone
        self.tight_share = tight_share
        self.over_pack_tokens = over_pack_tokens
        self.tight_fizzle = tight_fizzle
        self.month = ""
        self.spent_usd = 0.0
        self.mode = BudgetMode.NORMAL
        self.clock = clock
        # Called with each change (the meter records it for the panel's chart).
        self.listeners: list[Callable[[ModeChange], None]] = []
        # Turns end on the loop, but the judge's fallback may ask from a worker thread.
        self._lock = threading.Lock()

    def start_month(self, month: str, spent_usd: float) -> None:
        """The spend of ``month`` so far (read from the store at start); no change logged."""
        with self._lock:
            self.month, self.spent_usd = month, spent_usd
            self.mode = self._mode_for(spent_usd)

    def _mode_for(self, spent: float) -> BudgetMode:
        if self.monthly_usd <= 0:
            return BudgetMode.NORMAL
        if spent >= self.monthly_usd:
            return BudgetMode.OVER
        if spent >= self.tight_share * self.monthly_usd:
            return BudgetMode.TIGHT
        return BudgetMode.NORMAL

    def _roll(self, at: datetime) -> ModeChange | None:
        month = month_of(at, self.zone)
        if month == self.month:
            return None
        self.month, self.spent_usd = month, 0.0
        return self._set(at, self._mode_for(0.0))

    def _set(self, at: datetime, mode: BudgetMode) -> ModeChange | None:
        if mode is self.mode:
            return None
        change = ModeChange(
            at, self.month, self.mode, mode, round(self.spent_usd, 6), self.monthly_usd
        )
        self.mode = mode
        for listener in self.listeners:
            listener(change)
        # Once per change, never per turn.
        log.warning(
            "budget: %s -> %s (%.4f of %.2f USD spent in %s)",
            change.previous.value,
            mode.value,
            self.spent_usd,
            self.monthly_usd,
            self.month,
        )
        return change

    def add(self, usd: float, at: datetime) -> list[ModeChange]:
        """Count a turn's cost; the mode changes it caused (a new month first)."""
        with self._lock:
            changes = [c for c in (self._roll(at),) if c is not None]
            self.spent_usd += usd
            change = self._set(at, self._mode_for(self.spent_usd))
            if change is not None:
                changes.append(change)
            return changes

    def mode_at(self, at: datetime) -> BudgetMode:
        """The mode at ``at``: a month that began since puts it back to normal."""
        with self._lock:
            self._roll(at)
            return self.mode

    def current(self) -> BudgetMode:
        """The mode now (the observer and the judge, which have no turn time)."""
        return self.mode_at(self.clock())

    # What each reader asks, for the mode of the moment.

    def pack_tokens(self, mode: BudgetMode, budget_tokens: int) -> int:
        if mode is BudgetMode.OVER:
            return min(self.over_pack_tokens, max(1, budget_tokens // 2))
        if mode is BudgetMode.TIGHT:
            return max(1, budget_tokens // 2)
        return budget_tokens

    @staticmethod
    def dense(mode: BudgetMode) -> bool:
        return mode is BudgetMode.NORMAL

    @staticmethod
    def models(mode: BudgetMode) -> bool:
        """Whether the observer and the judge may call a model."""
        return mode is BudgetMode.NORMAL

"""What one turn spent besides model tokens: embedding calls and database time.

The pipeline opens a ``TurnUsage`` for each turn (``metering``) in the turn's
context; the store (``timed_db``) and the memory layer's embedding calls
(``charge_embedding``) add to the one of the turn they run in. Work outside a
turn (upkeep, re-embedding, the judge after the reply) charges nothing: it has
no turn to belong to. ``asyncio.to_thread`` copies the context, and the store's
reader and writer threads are timed from the awaiting coroutine, so both count.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class TurnUsage:
    embed_calls: int = 0
    embed_texts: int = 0
    embed_s: float = 0.0
    db_calls: int = 0
    db_s: float = 0.0
    # Worker threads add to it too (an embedding in to_thread).
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_embedding(self, texts: int, seconds: float) -> None:
        with self._lock:
            self.embed_calls += 1
            self.embed_texts += texts
            self.embed_s += seconds

    def add_db(self, seconds: float) -> None:
        with self._lock:
            self.db_calls += 1
            self.db_s += seconds


CURRENT_USAGE: contextvars.ContextVar[TurnUsage | None] = contextvars.ContextVar(
    "agentgw_turn_usage", default=None
)


@contextmanager
def metering() -> Iterator[TurnUsage]:
    """A fresh ``TurnUsage`` for the code run inside (one turn)."""
    usage = TurnUsage()
    token = CURRENT_USAGE.set(usage)
    try:
        yield usage
    finally:
        CURRENT_USAGE.reset(token)


def current_usage() -> TurnUsage | None:
    return CURRENT_USAGE.get()


def charge_embedding(texts: int, seconds: float) -> None:
    usage = CURRENT_USAGE.get()
    if usage is not None:
        usage.add_embedding(texts, seconds)


@contextmanager
def timed_db() -> Iterator[None]:
    """Time a store call for the current turn (nothing outside a turn)."""
    usage = CURRENT_USAGE.get()
    if usage is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        usage.add_db(time.perf_counter() - started)

"""The store's own threads on SQLite files: their kept connections, the transaction a
write runs in, and the writes committed together (``Store.write``, ``Store.read``)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

log = logging.getLogger("gateway.store.db")

T = TypeVar("T")


class ThreadConnections:
    """One connection of ``engine`` per worker thread, kept open between calls.

    A checkout from the pool and its return (with the pool's reset, a rollback)
    cost about as much as a short statement: 0.16 against 0.08 ms a write of one
    statement (issue 28, "CPU per turn"). The pool still opens each connection
    (its pragmas). A connection that broke is closed and replaced on next use.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._local = threading.local()
        self._opened: list[Connection] = []
        self._lock = threading.Lock()

    def get(self) -> Connection:
        """This thread's connection (opened on first use)."""
        connection: Connection | None = getattr(self._local, "connection", None)
        if connection is None or connection.closed or connection.invalidated:
            connection = self.engine.connect()
            self._local.connection = connection
            with self._lock:
                self._opened.append(connection)
        return connection

    def end_read(self, connection: Connection) -> None:
        """Roll back what a read began; a connection that cannot is replaced."""
        try:
            connection.rollback()
        except SQLAlchemyError:
            log.warning("store: a reader connection broke; it is replaced", exc_info=True)
            self.discard(connection)

    def discard(self, connection: Connection) -> None:
        """Close ``connection`` after an error that broke it."""
        if getattr(self._local, "connection", None) is connection:
            self._local.connection = None
        with self._lock:
            if connection in self._opened:
                self._opened.remove(connection)
        with contextlib.suppress(SQLAlchemyError):
            connection.close()

    def close_all(self) -> None:
        """Close every connection (the threads have stopped, or this is the only one)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for connection in opened:
            connection.close()


def orm_work(work: Callable[[Session], T]) -> Callable[[Connection], T]:
    """``work`` run with a plain ORM ``Session`` on the connection it is given."""

    def run(connection: Connection) -> T:
        with Session(bind=connection) as session:
            return work(session)

    return run


def read_only(kept: ThreadConnections, work: Callable[[Connection], T]) -> T:
    connection = kept.get()
    try:
        return work(connection)
    finally:
        # Ends the read transaction (its WAL snapshot): nothing is ever committed.
        kept.end_read(connection)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one queued write gave: its result, or the exception it raised; the seconds
    its statements and its share of the commit took; the commits it made (one alone,
    one for the last of a batch committed together, else none)."""

    value: Any
    error: Exception | None
    seconds: float
    commits: int


def commit_together(
    kept: ThreadConnections, works: list[Callable[[Connection], Any]]
) -> list[Outcome]:
    """In the writer thread: ``works`` in order in one transaction, one commit.

    Under load a turn's commits were ~40 % of the writer's time inside transactions
    (issue 28, "CPU per turn"), and a hundred conversations queue several writes
    while one runs. If any of them raises, the transaction is rolled back and each
    runs again alone (``in_transaction``), so one failed write fails only its caller.
    """
    if len(works) > 1:
        connection = kept.get()
        started = time.perf_counter()
        values: list[Any] = []
        spent: list[float] = []
        try:
            with connection.begin():
                for work in works:
                    begun = time.perf_counter()
                    values.append(work(connection))
                    spent.append(time.perf_counter() - begun)
        except Exception:  # noqa: BLE001 - whichever failed, each runs again alone
            # Rolled back; the connection is kept unless the error broke it.
            if connection.invalidated:
                kept.discard(connection)
        else:
            commit_share = (time.perf_counter() - started - sum(spent)) / len(works)
            last = len(works) - 1
            return [
                Outcome(value, None, seconds + commit_share, int(n == last))
                for n, (value, seconds) in enumerate(zip(values, spent, strict=True))
            ]
    alone: list[Outcome] = []
    for work in works:
        begun = time.perf_counter()
        try:
            value = in_transaction(kept, work)
        except Exception as exc:  # noqa: BLE001 - handed to the write's caller
            alone.append(Outcome(None, exc, time.perf_counter() - begun, 0))
        else:
            alone.append(Outcome(value, None, time.perf_counter() - begun, 1))
    return alone


def in_transaction(kept: ThreadConnections, work: Callable[[Connection], T]) -> T:
    connection = kept.get()
    try:
        with connection.begin():
            return work(connection)
    except BaseException:
        # Rolled back; the connection is kept unless the error broke it.
        if connection.invalidated:
            kept.discard(connection)
        raise

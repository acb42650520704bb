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

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import RootTransaction
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from gateway.errors import StoreError

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
        # Commits made on this thread's connection: a write that committed the batch's
        # transaction itself is told from one that rolled it back (``commit_together``).
        event.listen(engine, "commit", self._count_commit)

    def _count_commit(self, _connection: Connection) -> None:
        self._local.commits = self.commits_here() + 1

    def commits_here(self) -> int:
        """The commits made so far on this thread's connections."""
        return int(getattr(self._local, "commits", 0))

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
    error: BaseException | None
    seconds: float
    commits: int


class TransactionEnded(StoreError):
    """A write committed or rolled back the transaction it was given (``connection.commit()``,
    ``connection.rollback()``, or an ORM ``Session`` on the connection that rolled back
    after a failed flush). In a batch that commits the writes before it halfway, or
    drops them while they are reported committed, so it is refused."""


Works = list[Callable[[Connection], Any]]


def commit_together(kept: ThreadConnections, works: Works) -> list[Outcome]:
    """In the writer thread: ``works`` in order in one transaction, one commit.

    The outcomes of ``works[:n]`` (n at least 1); the caller queues ``works[n:]`` again,
    first. Under load a turn's commits were ~40 % of the writer's time inside
    transactions (issue 28, "CPU per turn"), and a hundred conversations queue several
    writes while one runs.

    If write k raises an error of its own (a duplicate key, a race lost), the
    transaction is rolled back, ``works[:k]`` run together again and commit, and k gets
    its error: it met exactly the state it would have met alone. The writes after k
    are not run (n = k + 1). A write that ends the transaction itself fails the same
    way (``TransactionEnded``); if it committed, the writes before it stay committed as
    they were. If the commit fails, or the connection broke, each write runs again
    alone (``in_transaction``), so one failed write fails only its caller.
    """
    if len(works) == 1:
        return [_alone(kept, works[0])]
    try:
        connection = kept.get()
        tx = connection.begin()
    except Exception:  # each runs alone and meets the error itself
        log.warning("store: the writer could not begin a batch", exc_info=True)
        return [_alone(kept, work) for work in works]
    started = time.perf_counter()
    commits_before = kept.commits_here()
    values: list[Any] = []
    spent: list[float] = []
    for work in works:
        begun = time.perf_counter()
        try:
            values.append(work(connection))
            _check_still_in(connection, tx)
        except BaseException as exc:  # noqa: BLE001 - handed to this write's caller only
            spent.append(time.perf_counter() - begun)
            return _after_failure(kept, connection, tx, works, values, spent, exc, commits_before)
        spent.append(time.perf_counter() - begun)
    try:
        tx.commit()
    except Exception:  # the commit itself failed: each runs again alone
        log.warning("store: a batch's commit failed; its writes run again alone", exc_info=True)
        _roll_back(kept, connection, tx)
        return [_alone(kept, work) for work in works]
    commit_share = (time.perf_counter() - started - sum(spent)) / len(works)
    last = len(works) - 1
    return [
        Outcome(value, None, seconds + commit_share, int(n == last))
        for n, (value, seconds) in enumerate(zip(values, spent, strict=True))
    ]


def _after_failure(
    kept: ThreadConnections,
    connection: Connection,
    tx: RootTransaction,
    works: Works,
    values: list[Any],
    spent: list[float],
    failed: BaseException,
    commits_before: int,
) -> list[Outcome]:
    """The outcomes when write k (the last ``spent`` timed) raised or ended the
    transaction (``commit_together``)."""
    k = len(spent) - 1
    committed = kept.commits_here() != commits_before
    if not _roll_back(kept, connection, tx):
        # A broken connection is not k's own error: each runs again alone, on a new one.
        return [_alone(kept, work) for work in works]
    error = Outcome(None, failed, spent[k], int(committed))
    if committed:
        # Write k committed the ones before it (and its own statements up to there).
        done = [Outcome(v, None, s, 0) for v, s in zip(values[:k], spent[:k], strict=True)]
        return [*done, error]
    if k == 0:
        return [error]
    before = commit_together(kept, works[:k])
    if len(before) < k or any(outcome.error is not None for outcome in before):
        # One of them failed this time, not the first: k met a state that is gone, so
        # k and the writes after the failed one are queued again.
        return before
    return [*before, error]


def _check_still_in(connection: Connection, tx: RootTransaction) -> None:
    if not tx.is_active or connection.get_transaction() is not tx:
        raise TransactionEnded(
            "a write committed or rolled back the transaction it was given "
            "(Store.write runs it in one; it must not end it)"
        )


def _roll_back(kept: ThreadConnections, connection: Connection, tx: RootTransaction) -> bool:
    """End whatever transaction is open (the batch's, or one a write began after ending
    it); whether the connection is kept (one that broke is replaced)."""
    try:
        if tx.is_active:
            tx.rollback()
        elif connection.get_transaction() is not None:
            connection.rollback()
    except SQLAlchemyError:
        log.warning("store: the writer's connection broke; it is replaced", exc_info=True)
        kept.discard(connection)
        return False
    if connection.invalidated:
        kept.discard(connection)
        return False
    return True


def _alone(kept: ThreadConnections, work: Callable[[Connection], Any]) -> Outcome:
    begun = time.perf_counter()
    try:
        value = in_transaction(kept, work)
    except BaseException as exc:  # noqa: BLE001 - handed to the write's caller
        return Outcome(None, exc, time.perf_counter() - begun, 0)
    return Outcome(value, None, time.perf_counter() - begun, 1)


def in_transaction(kept: ThreadConnections, work: Callable[[Connection], T]) -> T:
    """``work`` in a transaction of its own, committed unless it raises (or ends the
    transaction itself: ``TransactionEnded``, as in a batch)."""
    connection = kept.get()
    tx = connection.begin()
    try:
        done = work(connection)
        _check_still_in(connection, tx)
    except BaseException:
        # Rolled back; the connection is kept unless the error broke it.
        _roll_back(kept, connection, tx)
        raise
    try:
        tx.commit()
    except BaseException:
        _roll_back(kept, connection, tx)
        raise
    return done

"""Engine, sessions and start-up migrations of the store."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session

from gateway.errors import StoreError
from gateway.store.threads import (
    Outcome,
    ThreadConnections,
    commit_together,
    in_transaction,
    orm_work,
    read_only,
)
from gateway.usage import current_usage, timed_db

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"

# pg_advisory_xact_lock's key around the migrations: the bytes of "agentgwM".
MIGRATION_LOCK = 0x6167656E7467774D

T = TypeVar("T")

# Reader threads (and connections) of ``Store.read``: two searches at once on 2 cores.
READERS = 2

# Sessions (``reader``) on at once by default; more wait their turn (store.read_sessions).
READ_SESSIONS = 4
# How long a session may wait for a pooled connection: a guard against a bug only,
# since sessions wait for their place first and never ask the pool for more than it has.
POOL_TIMEOUT_S = 60.0

# Writes committed together at most (``Store.write``): the rest wait for the next
# transaction. A batch holds SQLite's write lock until its commit, and another
# process (a job, the CLI) waits at most busy_timeout (5 s) for it. A turn's writes
# take 0.1-1 ms each, so 32 hold it a few ms, and a commit shared by 32 already costs
# each write a thirty-second of one: larger batches save little more.
BATCH_WRITES = 32


@dataclass(frozen=True, slots=True)
class _Queued:
    """A write waiting for the writer thread (``Store.write``)."""

    work: Callable[[Connection], Any]
    future: asyncio.Future[Outcome]
    alone: bool


# Set while this task (or a task it started) holds the store's write turn, so a
# session opened inside another one does not wait for itself.
_WRITING: ContextVar[bool] = ContextVar("agentgw_store_writing", default=False)
# The same for a reader session's place, so a nested reader does not wait for itself.
_READING: ContextVar[bool] = ContextVar("agentgw_store_reading", default=False)


def alembic_config(connection: Connection | None = None) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the panel read while a turn writes; NORMAL is durable across
    # process crashes (only an OS crash can lose the last commits).
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


class Store:
    """Owns the engine; ``open`` migrates to the newest schema, ``close`` disposes.

    SQLite allows one writer at a time, and a connection that finds the file
    locked sleeps in SQLite's busy handler (1, 2, 5 … 100 ms steps) in its own
    aiosqlite thread. Under load those sleeps, not work, were most of a turn's
    time. So transactions that may write (``session``, ``write``) take
    turns on an asyncio lock and never meet a lock inside SQLite; ``reader``
    sessions only read and run beside them (WAL keeps readers off the writer).

    ``write`` runs a whole transaction of plain statements as one call in a
    thread of its own, on a connection of its own: a turn's writes then cost
    one hop between threads instead of several per statement (aiosqlite's).
    The writes that queue while one transaction runs share the next one and its
    commit, up to ``BATCH_WRITES``; a long one runs alone (``write``,
    ``threads.commit_together``).
    ``read`` does the same for a read-only transaction, on reader threads and
    connections of their own (the Memory Pack's searches, on its critical path).
    Each of those threads keeps its connection open between calls
    (``ThreadConnections``).

    The sessions' connection pool is sized from that work: one connection for
    the one writer session, ``read_sessions`` for reader sessions, and as many
    again for a session opened inside another one. Reader sessions take a
    place in turn (FIFO, no timeout) before they take a connection, so a burst
    waits for the store instead of failing with SQLAlchemy's pool timeout
    (``QueuePool limit ... reached``: 400 first messages at once failed 2-90
    turns that way before).
    """

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        read_sessions: int = READ_SESSIONS,
        pool_timeout_s: float = POOL_TIMEOUT_S,
    ) -> None:
        if read_sessions < 1:
            raise StoreError("store.read_sessions must be 1 or more")
        self.url = url
        self._echo = echo
        self.read_sessions = read_sessions
        self._pool_timeout_s = pool_timeout_s
        self._read_places = asyncio.Semaphore(read_sessions)
        self._engine: AsyncEngine | None = None
        self._sessions: async_sessionmaker[AsyncSession] | None = None
        self._write_turn = asyncio.Lock()
        # SQLite files only: writes waiting for the writer thread, and the task that
        # runs them (``write``), those queued while one runs together in the next.
        self._queued_writes: list[_Queued] = []
        self._write_drain: asyncio.Task[None] | None = None
        # SQLite files only: the writer's own engine, thread and connection.
        self._writer_engine: Engine | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._writer_connection: ThreadConnections | None = None
        # SQLite files only: the readers' engine, threads and connections (``read``).
        self._reader_engine: Engine | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._reader_connections: ThreadConnections | None = None
        # This database's random name (migration 0009), read at open.
        self._identity = ""
        # Write transactions this process committed: a reader that polls for changes
        # (the memory mirror) skips its query while this has not moved.
        self.commits = 0

    @property
    def identity(self) -> str:
        """A random name given to this database when it was made (or migrated to 0009).

        Files kept beside the database (the memory indexes) record it, so files
        left over from another database are not trusted.
        """
        if not self._identity:
            raise StoreError("store is not open")
        return self._identity

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise StoreError("store is not open")
        return self._engine

    async def open(self) -> None:
        if self._engine is not None:
            raise StoreError("store is already open")
        database_file = sqlite_file(self.url)
        if database_file is not None:
            database_file.parent.mkdir(parents=True, exist_ok=True)
        # One writer session, read_sessions readers, and as many nested sessions (a
        # session opened while this task holds one does not wait for a place). The
        # timeout is only a guard against a bug: callers never ask for more.
        pool_size = 1 + self.read_sessions
        engine = (
            create_async_engine(
                self.url,
                echo=self._echo,
                pool_size=pool_size,
                max_overflow=pool_size,
                pool_timeout=self._pool_timeout_s,
            )
            if sqlite_file(self.url) is not None or not self.is_sqlite
            else create_async_engine(self.url, echo=self._echo)
        )
        if self.is_sqlite:
            event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(self._upgrade)
                self._identity = (await conn.execute(_IDENTITY)).scalar_one()
        except (SQLAlchemyError, OSError) as exc:
            await engine.dispose()
            raise StoreError(f"cannot open the database at {self.url}: {exc}") from exc
        except BaseException:
            await engine.dispose()
            raise
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        if self._has_file:
            # Sync twin of the aiosqlite URL; one connection, used by one thread.
            writer = create_engine(
                self.url.replace("+aiosqlite", "", 1),
                echo=self._echo,
                pool_size=1,
                max_overflow=0,
            )
            event.listen(writer, "connect", _sqlite_pragmas)
            self._writer_engine = writer
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer")
            self._writer_connection = ThreadConnections(writer)
            # One connection per reader thread, kept open (a new one per read would
            # pay the pragmas and SQLite's schema parse every time).
            readers = create_engine(
                self.url.replace("+aiosqlite", "", 1),
                echo=self._echo,
                pool_size=READERS,
                max_overflow=0,
            )
            event.listen(readers, "connect", _sqlite_pragmas)
            self._reader_engine = readers
            self._readers = ThreadPoolExecutor(
                max_workers=READERS, thread_name_prefix="store-reader"
            )
            self._reader_connections = ThreadConnections(readers)
            try:
                # Connect now: a broken writer fails the start, not the first turn.
                await self.write(_ping)
            except BaseException:
                await self.close()
                raise

    @property
    def _has_file(self) -> bool:
        return sqlite_file(self.url) is not None

    @staticmethod
    def _upgrade(connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            # Several gateways of a cluster may start at once: the first migrates, the
            # others wait here (the lock ends with this transaction) and then find the
            # schema current. Transaction-level, so it holds through any pooler.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        before = MigrationContext.configure(connection).get_current_revision()
        command.upgrade(alembic_config(connection), "head")
        after = MigrationContext.configure(connection).get_current_revision()
        if after != before:
            log.info("store: migrated the database from %s to %s", before or "empty", after)

    async def close(self) -> None:
        # The writes already queued are done before the writer stops.
        await self._drained()
        if self._readers is not None and self._reader_engine is not None:
            readers, self._readers = self._readers, None
            reader_engine, self._reader_engine = self._reader_engine, None
            kept, self._reader_connections = self._reader_connections, None
            await asyncio.to_thread(readers.shutdown, wait=True)
            # Pooled SQLite connections may be closed from any thread (check_same_thread
            # is off for pools); every reader thread has finished by now.
            if kept is not None:
                await asyncio.to_thread(kept.close_all)
            await asyncio.to_thread(reader_engine.dispose)
        if self._writer is not None and self._writer_engine is not None:
            # Cleared holding the write turn: a drain or a write reads them holding it,
            # so none is in the writer thread now, and any later finds the store closed.
            async with self._writing():
                writer, self._writer = self._writer, None
                engine, self._writer_engine = self._writer_engine, None
                kept, self._writer_connection = self._writer_connection, None
            # Its connection belongs to the writer thread: close it there.
            loop = asyncio.get_running_loop()
            if kept is not None:
                await loop.run_in_executor(writer, kept.close_all)
            await loop.run_in_executor(writer, engine.dispose)
            await asyncio.to_thread(writer.shutdown, wait=True)
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None
            self._sessions = None

    async def _drained(self) -> None:
        """Wait until no drain runs (one cancelled may have handed its queue to a new one).

        ``asyncio.wait``, not ``await``: a drain that was cancelled or failed must not
        make ``close`` raise and leave the threads and engines open, and a ``close``
        that is cancelled must not cancel the drain."""
        while (drain := self._write_drain) is not None and not drain.done():
            await asyncio.wait({drain})
        if drain is not None and not drain.cancelled() and drain.exception() is not None:
            log.error("store: the writes' drain failed", exc_info=drain.exception())
        self._write_drain = None

    async def __aenter__(self) -> Store:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @asynccontextmanager
    async def _writing(self) -> AsyncIterator[None]:
        """This task's turn to write (at once when it already holds it)."""
        if _WRITING.get():
            yield
            return
        async with self._write_turn:
            token = _WRITING.set(True)
            try:
                yield
            finally:
                _WRITING.reset(token)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session in a transaction, committed on success, rolled back on error."""
        if self._sessions is None:
            raise StoreError("store is not open")
        try:
            async with (
                self._writing(),
                self._sessions() as session,
                session.begin(),
            ):
                with timed_db():
                    yield session
        except SQLAlchemyError as exc:
            raise StoreError(f"database error: {exc.__class__.__name__}: {exc}") from exc
        self.commits += 1

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[None]:
        """A reader session's place (at once when this task already holds one, or the
        write turn: a writer must not queue behind readers while every write waits)."""
        if _READING.get() or _WRITING.get():
            yield
            return
        async with self._read_places:
            token = _READING.set(True)
            try:
                yield
            finally:
                _READING.reset(token)

    @asynccontextmanager
    async def reader(self) -> AsyncIterator[AsyncSession]:
        """A session for reads only: it does not wait for the writers' turn.

        It waits for a place among ``read_sessions`` instead of the pool's timeout.
        """
        if self._sessions is None:
            raise StoreError("store is not open")
        try:
            async with self._reading(), self._sessions() as session, session.begin():
                with timed_db():
                    yield session
        except SQLAlchemyError as exc:
            raise StoreError(f"database error: {exc.__class__.__name__}: {exc}") from exc

    async def write(self, work: Callable[[Connection], T], *, alone: bool = False) -> T:
        """Run ``work`` in a committed transaction (rolled back if it raises).

        ``work`` is plain synchronous Core code and must not block on anything
        but the database, nor end the transaction it is given (``TransactionEnded``):
        on SQLite it runs in the store's writer thread. There the writes that queue
        up while one transaction runs go together in the next one (up to
        ``BATCH_WRITES``), each in order, with one commit (``commit_together``). If
        one raises, the others run again without it, so ``work`` may run twice and
        must do nothing but its statements; its own error reaches only its caller.

        ``alone``: a long write (a rebuild, a bulk import, a loop over many rows)
        runs in a transaction of its own, in its place in the queue: the short writes
        queued before it do not wait for its commit, nor run again if it fails.
        """
        if self._writer is None or self._writer_connection is None or _WRITING.get():
            return await self._write_alone(work)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._queued_writes.append(_Queued(work, future, alone))
        if self._write_drain is None or self._write_drain.done():
            self._start_drain()
        outcome = await future
        # The turn's database time (gateway/usage.py): its statements and its share of
        # the commit, not the wait for the writer.
        usage = current_usage()
        if usage is not None:
            usage.add_db(outcome.seconds)
        error = outcome.error
        if isinstance(error, SQLAlchemyError):
            raise StoreError(f"database error: {error.__class__.__name__}: {error}") from error
        if error is not None:
            raise error
        return cast(T, outcome.value)

    def _start_drain(self) -> None:
        # A context of its own: it runs many callers' writes, and the first caller's
        # log ids and usage record (gateway/usage.py) are not theirs.
        self._write_drain = asyncio.get_running_loop().create_task(
            self._drain_writes(), name="store-writes", context=contextvars.Context()
        )

    def _next_batch(self) -> list[_Queued]:
        """The writes of the next transaction, taken off the queue: those not cancelled,
        in order, up to ``BATCH_WRITES``, or an ``alone`` write by itself."""
        queue = self._queued_writes
        batch: list[_Queued] = []
        taken = 0
        for queued in queue:
            if queued.future.done():  # cancelled while it waited
                taken += 1
                continue
            if queued.alone and batch:
                break
            batch.append(queued)
            taken += 1
            if queued.alone or len(batch) == BATCH_WRITES:
                break
        del queue[:taken]
        return batch

    async def _drain_writes(self) -> None:
        """Run the queued writes, those queued meanwhile together, until none is left."""
        loop = asyncio.get_running_loop()
        while self._queued_writes:
            batch: list[_Queued] = []
            try:
                async with self._writing():
                    # Taken once the turn is ours: a write cancelled during the wait does
                    # not run, and one queued during it joins.
                    batch = self._next_batch()
                    writer, kept = self._writer, self._writer_connection
                    if not batch:
                        continue
                    if writer is None or kept is None:
                        self._fail_queued(batch, StoreError("store is not open"))
                        continue
                    running = loop.run_in_executor(
                        writer, commit_together, kept, [queued.work for queued in batch]
                    )
                    try:
                        # Shielded: cancelling the drain must not mark as cancelled a
                        # batch the thread runs anyway.
                        outcomes = await asyncio.shield(running)
                    except asyncio.CancelledError:
                        # Still the writer's turn: nothing else starts on the file meanwhile.
                        await self._report_cancelled(batch, running)
                        raise
            except asyncio.CancelledError:
                # The writes still queued run in a new drain: only callers that were
                # cancelled themselves lose their write (``_report_cancelled``).
                if any(not queued.future.done() for queued in self._queued_writes):
                    self._start_drain()
                raise
            except Exception as exc:  # the writer thread is gone
                log.exception("store: a batch of writes could not run")
                self._fail_queued(batch, StoreError(f"the store's writer failed: {exc}"))
                continue
            self._settle(batch, outcomes)

    def _settle(self, batch: list[_Queued], outcomes: list[Outcome]) -> None:
        """Hand each write its outcome; those without one (after a failed write) are
        queued again, first, as the next batch."""
        self.commits += sum(outcome.commits for outcome in outcomes)
        for queued, outcome in zip(batch, outcomes, strict=False):
            if not queued.future.done():
                queued.future.set_result(outcome)
        self._queued_writes[:0] = batch[len(outcomes) :]

    async def _report_cancelled(
        self, batch: list[_Queued], running: asyncio.Future[list[Outcome]]
    ) -> None:
        """The drain was cancelled while the writer thread ran ``batch``. The thread
        finishes it whatever happens here, so its callers are told what it did:
        cancelling or failing them would report as lost writes that were committed
        (a turn's shielded failure record among them, gateway/pipeline.py)."""
        while not running.done():
            # Bounded: one batch. A second cancel does not leave it unreported.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({running})
        if running.cancelled() or running.exception() is not None:
            self._fail_queued(batch, StoreError("the store's writer failed"))
        else:
            self._settle(batch, running.result())

    def _fail_queued(self, batch: list[_Queued], error: StoreError) -> None:
        """Fail ``batch``'s writes and every queued one (the writer is gone)."""
        for queued in [*batch, *self._queued_writes]:
            if not queued.future.done():
                queued.future.set_exception(error)
        self._queued_writes.clear()

    async def _write_alone(self, work: Callable[[Connection], T]) -> T:
        """``write`` without the queue: on PostgreSQL and in-memory SQLite, and for a
        task that already holds the write turn (it must not wait for itself)."""
        async with self._writing():
            # Read with the turn held: close() clears them holding it.
            writer, kept = self._writer, self._writer_connection
            try:
                # The turn's database time (gateway/usage.py): the writer's wait is not in it.
                with timed_db():
                    if writer is not None and kept is not None:
                        loop = asyncio.get_running_loop()
                        done = await loop.run_in_executor(writer, in_transaction, kept, work)
                    else:
                        async with self.engine.begin() as connection:
                            done = await connection.run_sync(work)
            except SQLAlchemyError as exc:
                raise StoreError(f"database error: {exc.__class__.__name__}: {exc}") from exc
            self.commits += 1
            return done

    async def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work``, plain reads, on a connection of the readers.

        ``work`` is plain synchronous Core code that only reads: on SQLite files it
        runs in a reader thread, so a few statements cost one hop between threads
        (an aiosqlite session pays several per statement), and the rows are turned
        into Python objects off the event loop. It does not wait for the writers.
        """
        try:
            with timed_db():
                if self._readers is not None and self._reader_connections is not None:
                    loop = asyncio.get_running_loop()
                    return await loop.run_in_executor(
                        self._readers, read_only, self._reader_connections, work
                    )
                async with self.engine.connect() as connection:
                    return await connection.run_sync(work)
        except SQLAlchemyError as exc:
            raise StoreError(f"database error: {exc.__class__.__name__}: {exc}") from exc

    async def read_orm(self, work: Callable[[Session], T]) -> T:
        """``read`` with an ORM session on the reader's connection, for per-turn reads
        that want mapped rows: one hop, where ``reader()`` (aiosqlite) pays several
        a statement. The rows come back loaded and detached (no lazy loads after)."""

        return await self.read(orm_work(work))


_IDENTITY = text("SELECT value FROM store_info WHERE key = 'store_id'")


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for another database or an in-memory one."""
    if not url.startswith("sqlite"):
        return None
    # make_url, not a split at "///": "sqlite+aiosqlite://" is in memory too, and
    # a query ("?timeout=5") is no part of the file's name.
    parsed = make_url(url)
    path = parsed.database
    if not path or path == ":memory:" or parsed.query.get("mode") == "memory":
        return None
    return Path(path)


def vacuum_sqlite(url: str, *, wait_s: float = 2.0) -> tuple[Path, int, int]:
    """Give the space that deleted and shrunk rows left back to the disk (SQLite's
    VACUUM); the file, and its size before and after. Blocking.

    SQLite reuses that space before the file grows, so this only matters once a
    lot was freed (migration 0010 compresses old traces to a tenth). It rewrites
    the whole file and holds the write lock meanwhile, so ``agentgw vacuum`` runs
    it only while it holds the data directory and the file (``DataDirLock``,
    ``DatabaseFileLock``): never beside a running gateway.
    """
    if not url.startswith("sqlite"):
        raise StoreError(f"vacuum is for SQLite files; {url.split(':', 1)[0]} has its own")
    path = sqlite_file(url)
    if path is None or not path.is_file():
        raise StoreError(f"no SQLite database file at {path or url}")
    before = path.stat().st_size
    connection = sqlite3.connect(path, timeout=wait_s, isolation_level=None)
    try:
        connection.execute("VACUUM")
        # The rewritten pages go through the WAL: fold it into the file now.
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot vacuum {path}: {exc} (is the gateway running?)") from exc
    finally:
        connection.close()
    return path, before, path.stat().st_size


def _ping(connection: Connection) -> None:
    connection.execute(text("SELECT 1"))

"""One agentgw at a time per data directory, and per database.

Two gateways on one database would share its rows but not the memory layer:
each keeps its own in-memory indexes (ANN and full text) and finds only the
items it stored itself. On one data directory they would also overwrite each
other's index files at every save. And ``agentgw vacuum`` rewrites the
database, which a running gateway must not be writing meanwhile.

So the gateway holds two locks while it runs, and vacuum takes the same ones:

- ``DataDirLock``: an OS lock (``flock``) on ``<data_dir>/agentgw.lock``.
- ``claim_database``: on a SQLite file, ``flock`` on ``<database file>.lock``
  beside it (``DatabaseFileLock``), which catches two data directories
  configured with one ``store.url``; on PostgreSQL, a session-level advisory
  lock on a connection of its own (``PostgresLock``), whose
  ``application_name`` tells a refused gateway who holds it. An in-memory
  SQLite database belongs to one process already and needs none.

Both kinds end with the process, however it ends (the kernel closes the file,
the server ends the session): a crash leaves nothing stale to clean up. An
advisory lock also ends with its session while the gateway lives (a server
restart): the gateway checks it every ``store.lock_check_s`` (30 s) and takes
it again; if another gateway took it meanwhile, this one stops (exit 2), so
the one holding the lock is the only one writing. Lock files stay; each holds
the last holder's pid, for the error message.

Taking them is explicit (the gateway and vacuum do it), never part of
``Store.open``: tests and tools open stores on the same files many times.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import Row, make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from gateway.errors import DatabaseInUse, DataDirInUse, StoreError
from gateway.store.db import sqlite_file

log = logging.getLogger(__name__)

# pg_try_advisory_lock's key for agentgw: the bytes of "agentgw\0".
ADVISORY_KEY = 0x6167656E74677700

_NAME_SESSION = text("SELECT set_config('application_name', :name, false)")
_TRY_LOCK = text("SELECT pg_try_advisory_lock(:key)")
# A one-bigint advisory lock shows in pg_locks as classid (high half), objid (low
# half) and objsubid 1; advisory locks are per database.
_HOLDER = text(
    "SELECT l.pid, a.application_name, host(a.client_addr) AS client "
    "FROM pg_locks AS l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND ((l.classid::bigint << 32) | l.objid::bigint) = :key"
)


def _pid_in(fd: int) -> str:
    """The pid its holder wrote into a lock file ("?" when it wrote none)."""
    return os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"


class FileLock:
    """``flock`` on one file; ``acquire`` fails at once, naming the holder's pid, if it is held.

    ``subject`` names what the lock stands for in that error, ``in_use`` is its class.
    """

    def __init__(self, path: Path, subject: str, in_use: type[StoreError]) -> None:
        self.path = path
        self.subject = subject
        self._in_use = in_use
        self._fd: int | None = None

    def holder(self) -> str | None:
        """The pid of the process that holds the lock now, or None; changes nothing.

        A shared lock, tried and let go at once: it cannot be had beside the
        holder's exclusive one, and it writes no pid.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid_in(fd)
        finally:
            os.close(fd)  # and with it the shared lock, if it was had
        return None

    def acquire(self) -> None:
        if self._fd is not None:
            raise StoreError(f"{self.subject} is already held by this process")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _pid_in(fd)
            os.close(fd)
            raise self._in_use(
                f"{self.subject} is in use by another agentgw (pid {holder}); stop it first"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        # Closing the descriptor releases the lock.
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()


class DataDirLock(FileLock):
    """The lock on one data directory: ``<data_dir>/agentgw.lock``."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir / "agentgw.lock", str(data_dir), DataDirInUse)


class DatabaseFileLock(FileLock):
    """The lock on one SQLite database file: ``<database file>.lock``, beside it."""

    def __init__(self, database: Path) -> None:
        # Resolved, so a symlink to the file and the file itself share one lock.
        database = database.resolve()
        super().__init__(
            database.with_name(f"{database.name}.lock"), f"the database {database}", DatabaseInUse
        )


class PostgresLock:
    """``pg_try_advisory_lock(ADVISORY_KEY)`` on one PostgreSQL database.

    The lock belongs to the session, so it lives on a connection of its own,
    open while the lock is held; closing it (``release``) releases the lock.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.subject = f"the database {make_url(url).render_as_string(hide_password=True)}"
        self._engine: AsyncEngine | None = None
        self._connection: AsyncConnection | None = None

    async def acquire(self) -> None:
        if self._engine is not None:
            raise StoreError(f"{self.subject} is already held by this process")
        # NullPool: the connection is really closed on release, ending the session.
        engine = create_async_engine(self.url, poolclass=NullPool)
        try:
            connection = await engine.connect()
            try:
                await self._claim(connection)
            except BaseException:
                await connection.close()
                raise
        except (SQLAlchemyError, OSError) as exc:
            await engine.dispose()
            raise StoreError(f"cannot lock {self.subject}: {exc}") from exc
        except BaseException:
            await engine.dispose()
            raise
        self._engine, self._connection = engine, connection

    async def _claim(self, connection: AsyncConnection) -> None:
        # AUTOCOMMIT: no transaction stays open on this connection for the gateway's
        # lifetime (an idle one would hold back the server's vacuum horizon).
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        name = f"agentgw pid {os.getpid()} on {socket.gethostname()}"
        await connection.execute(_NAME_SESSION, {"name": name})
        if (await connection.execute(_TRY_LOCK, {"key": ADVISORY_KEY})).scalar_one():
            return
        holder = (await connection.execute(_HOLDER, {"key": ADVISORY_KEY})).first()
        raise DatabaseInUse(
            f"{self.subject} is in use by another agentgw ({_describe(holder)}); stop it first"
        )

    async def check(self) -> bool:
        """Whether the lock is still held; False when its session had been lost (a
        server restart, an administrator's ``pg_terminate_backend``) and it was taken
        again. Raises ``DatabaseInUse`` if another gateway took it meanwhile, and
        ``StoreError`` if the server cannot be reached (the next check tries again)."""
        if self._connection is not None:
            with contextlib.suppress(SQLAlchemyError, OSError):
                await self._connection.execute(text("SELECT 1"))
                return True
        await self.release()
        await self.acquire()
        return False

    async def keep(self, every_s: float) -> None:
        """``check`` every ``every_s`` seconds for as long as the gateway runs: a lock
        lost with its session would let a second gateway start unseen. Returns (raises
        ``DatabaseInUse``) only when another gateway took the lock meanwhile."""
        while True:
            await asyncio.sleep(every_s)
            try:
                if not await self.check():
                    log.warning(
                        "%s: the lock's session was lost; the lock is taken again", self.subject
                    )
            except DatabaseInUse as exc:
                raise DatabaseInUse(
                    f"{self.subject}: this agentgw lost its lock while its session was down, "
                    f"and another took it: {exc}"
                ) from exc
            except StoreError as exc:
                log.warning("cannot check the lock on %s: %s", self.subject, exc)

    async def release(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            # A lost session's connection fails to close cleanly; it is closed all the same.
            with contextlib.suppress(SQLAlchemyError, OSError):
                await connection.close()
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await engine.dispose()

    async def __aenter__(self) -> PostgresLock:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.release()


def _describe(holder: Row[Any] | None) -> str:
    """Who holds the advisory lock, from its pg_locks and pg_stat_activity row."""
    if holder is None:
        # Released between our try and the look-up.
        return "it may have just stopped: try again"
    who = holder.application_name or f"server process {holder.pid}"
    return f"{who}, from {holder.client}" if holder.client else who


@asynccontextmanager
async def claim_database(
    url: str,
    check_every_s: float = 30.0,
    on_lost: Callable[[DatabaseInUse], None] | None = None,
) -> AsyncIterator[None]:
    """Hold the database at ``url`` for this process until the block ends.

    Raises ``DatabaseInUse`` at once when another process holds it. A
    PostgreSQL lock is checked every ``check_every_s`` (``PostgresLock.keep``);
    if another process took it while this one's session was down, ``on_lost``
    is called with the error (the gateway stops) and the checks end. A file
    lock cannot be lost while its process lives.
    """
    database = sqlite_file(url)
    if database is not None:
        # flock with LOCK_NB never waits, so this stays on the loop (as DataDirLock
        # does in the gateway): a thread cancelled after it locked would leak the lock.
        with DatabaseFileLock(database):
            yield
    elif url.startswith("sqlite"):
        # In memory: no other process can open it.
        yield
    elif url.startswith("postgresql"):
        async with PostgresLock(url) as lock:
            keeping = asyncio.create_task(lock.keep(check_every_s), name="database-lock")

            def lost(task: asyncio.Task[None]) -> None:
                error = None if task.cancelled() else task.exception()
                if error is None:
                    return
                log.critical("%s", error)
                if on_lost is not None and isinstance(error, DatabaseInUse):
                    on_lost(error)

            keeping.add_done_callback(lost)
            try:
                yield
            finally:
                keeping.cancel()
                # A lock lost to another gateway was told to ``on_lost`` when it came.
                with contextlib.suppress(asyncio.CancelledError, DatabaseInUse):
                    await keeping
    else:
        scheme = url.split(":", 1)[0]
        raise StoreError(
            f"store.url: cannot keep a second agentgw off a {scheme} database; "
            "use SQLite or PostgreSQL"
        )

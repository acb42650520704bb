"""Engine, sessions and start-up migrations of the store."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Connection, event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from gateway.errors import StoreError

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"


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
    """Owns the engine; ``open`` migrates to the newest schema, ``close`` disposes."""

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        self._echo = echo
        self._engine: AsyncEngine | None = None
        self._sessions: async_sessionmaker[AsyncSession] | None = None

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
        if self.is_sqlite:
            path = self.url.split("///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(self.url, echo=self._echo)
        if self.is_sqlite:
            event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(self._upgrade)
        except (SQLAlchemyError, OSError) as exc:
            await engine.dispose()
            raise StoreError(f"cannot open the database at {self.url}: {exc}") from exc
        except BaseException:
            await engine.dispose()
            raise
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    @staticmethod
    def _upgrade(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), "head")

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None
            self._sessions = None

    async def __aenter__(self) -> Store:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session in a transaction, committed on success, rolled back on error."""
        if self._sessions is None:
            raise StoreError("store is not open")
        try:
            async with self._sessions() as session, session.begin():
                yield session
        except SQLAlchemyError as exc:
            raise StoreError(f"database error: {exc.__class__.__name__}: {exc}") from exc

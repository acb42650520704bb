"""The locks that keep a second agentgw off a data directory and off a database.

flock locks belong to an open file, so two locks taken in one process conflict
as two processes would; the real second gateway is in test_crash_recovery.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.errors import DatabaseInUse, DataDirInUse, StoreError
from gateway.store.datalock import DatabaseFileLock, DataDirLock, claim_database


def test_a_database_file_is_held_once_whatever_the_path_to_it(tmp_path: Path) -> None:
    database = tmp_path / "shared" / "agentgw.db"
    link = tmp_path / "link.db"
    link.symlink_to(database)
    with DatabaseFileLock(database) as held:
        assert held.path == database.with_name("agentgw.db.lock")
        with pytest.raises(DatabaseInUse) as refused:
            DatabaseFileLock(link).acquire()
        assert str(refused.value) == (
            f"the database {database} is in use by another agentgw (pid {os.getpid()}); "
            "stop it first"
        )
        assert refused.value.code == "database_in_use"
        # The data directory's lock is another lock.
        with (
            DataDirLock(tmp_path / "shared"),
            pytest.raises(DataDirInUse, match="shared is in use by another agentgw"),
        ):
            DataDirLock(tmp_path / "shared").acquire()
    with DatabaseFileLock(link):
        pass


async def test_claim_database_holds_a_sqlite_file_but_not_memory(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'agentgw.db'}"
    async with claim_database(url):
        with pytest.raises(DatabaseInUse, match=r"agentgw\.db is in use"):
            async with claim_database(url):
                pass
    async with claim_database(url):
        pass
    # An in-memory database is the process's own: nothing to hold, nothing refused.
    async with claim_database("sqlite+aiosqlite://"), claim_database("sqlite+aiosqlite://"):
        pass


async def test_claim_database_refuses_a_database_it_cannot_hold() -> None:
    with pytest.raises(StoreError, match="cannot keep a second agentgw off a mysql"):
        async with claim_database("mysql+aiomysql://agentgw@127.0.0.1/agentgw"):
            pass

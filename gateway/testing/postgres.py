"""A throwaway PostgreSQL server (Debian's binaries) for tests and benchmarks.

Started on a loopback port in a temporary folder, with fsync off, and removed
whole when done. Used by the PostgreSQL tests and by ``agentgw bench cluster``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg

PG_BINARIES = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def throwaway_postgres(*, max_connections: int = 200) -> Iterator[str]:
    """A server for as long as the block runs; yields its URL without a database name."""
    if not PG_BINARIES:
        raise RuntimeError("Debian's postgresql is not installed (scripts/setup installs it)")
    binaries = PG_BINARIES[-1].parent
    root = Path(tempfile.mkdtemp(prefix="agentgw-pg-"))
    # PostgreSQL refuses to run as root: then it runs as Debian's postgres user.
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    data, port = root / "data", free_port()
    subprocess.run(
        [*as_user, str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    options = (
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
        f"-c max_connections={max_connections}"
    )
    pg_ctl = [*as_user, str(binaries / "pg_ctl"), "-D", str(data)]
    subprocess.run(
        [*pg_ctl, "-w", "-l", str(root / "log"), "-o", options, "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


async def create_database(server: str) -> str:
    """A new, empty database on ``server``; its SQLAlchemy URL."""
    name = f"agentgw_{uuid.uuid4().hex[:12]}"
    dsn = server.replace("postgresql+asyncpg://", "postgresql://") + "/postgres"
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(f"CREATE DATABASE {name}")
    finally:
        await connection.close()
    return f"{server}/{name}"

"""Who is in the cluster (issue 25): one ``cluster_members`` row per live process.

Each process in cluster mode writes its row at start, its heartbeat (the
server's ``now()``) every third of ``store.lease_s``, and deletes the row (and
gives back its leases) on a clean stop. A process is dead once its member
session ended (its lock is free: gateway/store/liveness.py), or once
``lease_s`` has passed since its last heartbeat: ``live_members`` is what
``agentgw cluster status`` and ``/readyz`` ask. Rows of the dead stay an hour,
so the status can say who died, then the next start prunes them.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from gateway.store.db import Store
from gateway.store.leases import run_direct
from gateway.store.liveness import session_locked

# The rows of members dead this long are pruned at the next start.
PRUNE_AFTER_S = 3600.0

_JOIN = text(
    """
    INSERT INTO cluster_members (id, host, pid, listen, version, started_at, heartbeat_at)
    VALUES (:id, :host, :pid, :listen, :version, now(), now())
    ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()
    """
)
_PRUNE = text(
    "DELETE FROM cluster_members WHERE heartbeat_at < now() - make_interval(secs => :after_s)"
)
_BEAT = text("UPDATE cluster_members SET heartbeat_at = now() WHERE id = :id RETURNING id")
_LEAVE = text("DELETE FROM cluster_members WHERE id = :id")
_LIST = text(
    f"""
    SELECT id, host, pid, listen, version, started_at, heartbeat_at,
           EXTRACT(EPOCH FROM (now() - heartbeat_at))::float8 AS lag_s,
           {session_locked("id")} AS session_alive
    FROM cluster_members ORDER BY started_at, id
    """
)


@dataclass(frozen=True)
class Member:
    id: str
    host: str
    pid: int
    listen: str
    version: str
    started_at: datetime
    heartbeat_at: datetime
    # Seconds since its last heartbeat, on the server's clock.
    lag_s: float
    # A heartbeat within lease_s and its member session's lock held.
    alive: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "listen": self.listen,
            "version": self.version,
            "started_at": self.started_at.isoformat(),
            "heartbeat_at": self.heartbeat_at.isoformat(),
            "heartbeat_lag_s": round(self.lag_s, 2),
            "alive": self.alive,
        }


def new_member_id() -> str:
    """host:pid:random — a restarted process (same host, maybe the same pid) is new.

    At most 58 characters: it is also a turn's ``claimed_by`` (64)."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(4)}"


async def join(store: Store, member_id: str, *, listen: str, version: str) -> None:
    """Write this process's row (and prune the rows of members long dead)."""
    row = {
        "id": member_id,
        "host": member_id.split(":", 1)[0],
        "pid": os.getpid(),
        "listen": listen[:300],
        "version": version[:40],
    }

    def work(connection: Connection) -> None:
        connection.execute(_PRUNE, {"after_s": PRUNE_AFTER_S})
        connection.execute(_JOIN, row)

    await run_direct(store, work)


async def heartbeat(store: Store, member_id: str) -> bool:
    """This process is alive; False when its row is gone (then ``join`` again)."""
    return await run_direct(
        store, lambda c: c.execute(_BEAT, {"id": member_id}).first() is not None
    )


async def leave(store: Store, member_id: str) -> None:
    """A clean stop: the row goes, and the leases this member held are free at once."""

    def work(connection: Connection) -> None:
        connection.execute(_LEAVE, {"id": member_id})
        connection.execute(text("DELETE FROM cluster_leases WHERE holder = :id"), {"id": member_id})

    await run_direct(store, work)


async def members(store: Store, lease_s: float = 15.0) -> list[Member]:
    """Every member row, the dead (no heartbeat for ``lease_s``) marked so."""

    def work(connection: Connection) -> list[Member]:
        return [
            Member(
                id=row.id,
                host=row.host,
                pid=row.pid,
                listen=row.listen,
                version=row.version,
                started_at=row.started_at,
                heartbeat_at=row.heartbeat_at,
                lag_s=float(row.lag_s),
                alive=float(row.lag_s) < lease_s and bool(row.session_alive),
            )
            for row in connection.execute(_LIST)
        ]

    return await run_direct(store, work)


async def live_members(store: Store, lease_s: float = 15.0) -> list[Member]:
    """The members with a heartbeat within ``lease_s`` (pass ``config.store.lease_s``)."""
    return [m for m in await members(store, lease_s) if m.alive]

"""The cluster's own tables (issue 25): who is alive, and who holds which lease.

``cluster_members``: one row per gateway process in cluster mode, its heartbeat
written by PostgreSQL's clock (``now()``), so machines whose clocks disagree
still agree on who is late. ``cluster_leases``: one row per named lease (the
Telegram poller, an observer pass, ...), its holder a member id and its end
``until`` again on the server's clock. Both are read and written with plain
SQL in ``gateway/store/leases.py`` and ``gateway/store/members.py``.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base


class ClusterMember(Base):
    __tablename__ = "cluster_members"

    # host:pid:random, made at start: a restarted process is a new member.
    id: Mapped[str] = mapped_column(String(120), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    # Where this process serves (server.host:server.port), for `agentgw cluster status`.
    listen: Mapped[str] = mapped_column(String(300))
    version: Mapped[str] = mapped_column(String(40))
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime] = mapped_column(index=True)


class ClusterLease(Base):
    __tablename__ = "cluster_leases"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    holder: Mapped[str] = mapped_column(String(120))
    until: Mapped[datetime]
    # When the current holder took it (kept across its renewals).
    taken_at: Mapped[datetime]

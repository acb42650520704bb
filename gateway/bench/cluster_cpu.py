"""Where the CPU of a ``bench cluster`` stage goes: each gateway, PostgreSQL, the client.

A turns/s figure on a 2-core machine shared with other work moves with that
work; CPU seconds per turn do not. So the throughput stage snapshots, before
and after its measured window, the CPU time (user + system, all threads, from
``/proc``) of each gateway process, of the PostgreSQL server (its postmaster,
every backend, and the backends that exited meanwhile, which the postmaster
has reaped), of this bench process (the client's pages), and of the whole
machine (``/proc/stat``: what is left is other work's). Linux only, as the
benches are.
"""

from __future__ import annotations

import asyncio
import operator
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from gateway.bench.proc_cpu import (
    cpu_seconds,
    machine_busy_seconds,
    thread_cpu_seconds,
    tree_cpu_seconds,
)


def self_cpu_seconds() -> float:
    """This process's CPU (every thread): the bench's client pages."""
    return cpu_seconds(os.getpid())


async def postmaster_pid(server: str) -> int:
    """The pid of the PostgreSQL server at ``server`` (a URL without a database)."""
    dsn = server.replace("postgresql+asyncpg://", "postgresql://") + "/postgres"
    connection = await asyncpg.connect(dsn)
    try:
        data = str(await connection.fetchval("SHOW data_directory"))
    finally:
        await connection.close()
    text = await asyncio.to_thread((Path(data) / "postmaster.pid").read_text, encoding="ascii")
    return int(text.splitlines()[0])


@dataclass(frozen=True)
class CpuSeconds:
    """CPU seconds of each party: so far (a snapshot) or over a window (a difference)."""

    gateways: tuple[float, ...]
    # Each gateway's main thread: its event loop and the Python that holds the GIL
    # there, at most one core whatever the machine has.
    loops: tuple[float, ...]
    postgres: float
    client: float
    # Every core of the machine, busy with anything (ours and other work).
    machine: float

    def __sub__(self, earlier: CpuSeconds) -> CpuSeconds:
        return self._each(earlier, operator.sub)

    def __add__(self, other: CpuSeconds) -> CpuSeconds:
        return self._each(other, operator.add)

    def _each(self, other: CpuSeconds, op: Callable[[float, float], float]) -> CpuSeconds:
        def pairs(mine: tuple[float, ...], theirs: tuple[float, ...]) -> tuple[float, ...]:
            return tuple(op(a, b) for a, b in zip(mine, theirs, strict=True))

        return CpuSeconds(
            pairs(self.gateways, other.gateways),
            pairs(self.loops, other.loops),
            op(self.postgres, other.postgres),
            op(self.client, other.client),
            op(self.machine, other.machine),
        )

    @property
    def ours(self) -> float:
        return sum(self.gateways) + self.postgres + self.client


def snapshot(gateway_pids: list[int], postmaster: int) -> CpuSeconds:
    return CpuSeconds(
        gateways=tuple(cpu_seconds(pid) for pid in gateway_pids),
        loops=tuple(thread_cpu_seconds(pid, pid) for pid in gateway_pids),
        postgres=tree_cpu_seconds(postmaster),
        client=self_cpu_seconds(),
        machine=machine_busy_seconds(),
    )


def cpu_report(used: CpuSeconds, turns: int, wall_s: float) -> dict[str, Any]:
    """Milliseconds of CPU per turn of each party, and the cores each kept busy.

    ``total`` is the parties' sum; ``other`` the machine's busy time that none of
    them spent (other work on a shared machine)."""
    other = max(0.0, used.machine - used.ours)

    def per_turn(seconds: float) -> float:
        return round(seconds * 1000 / turns, 2) if turns else 0.0

    def cores(seconds: float) -> float:
        return round(seconds / wall_s, 2) if wall_s > 0 else 0.0

    def parties(scale: Callable[[float], float]) -> dict[str, Any]:
        return {
            "gateways": [scale(s) for s in used.gateways],
            "gateway_loops": [scale(s) for s in used.loops],
            "postgres": scale(used.postgres),
            "client": scale(used.client),
            "total": scale(used.ours),
        }

    return {
        "cpu_ms_per_turn": parties(per_turn),
        "cores_busy": {**parties(cores), "other": cores(other)},
    }


def ceiling_turns_per_s(used: CpuSeconds, turns: int, cores: int) -> float:
    """The most turns/s this CPU per turn allows on ``cores`` cores, however quiet the
    machine: every party together within the cores, and each gateway's main thread
    within one core (it runs the event loop; Python holds the GIL there). An upper
    bound: it counts no wait for the GIL, for the database or for the client."""
    if turns <= 0 or used.ours <= 0:
        return 0.0
    bounds = [cores * turns / used.ours]
    bounds += [turns / loop for loop in used.loops if loop > 0]
    return min(bounds)

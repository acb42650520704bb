"""The throughput stage of ``agentgw bench cluster``: turns/s with one process and two.

The same load each time (``--conversations`` pages, one per conversation, on
the processes in turn, each sending ``--turns`` messages, each after the
previous reply), on a fresh database and fresh processes. ``--warmup-turns``
untimed turns per conversation come first. ``--throughput-rounds`` rounds,
the order of one and two swapped each round. Beside turns/s, the CPU of each
party over the timed window (gateway/bench/cluster_cpu.py): a turns/s figure
on a shared 2-core machine moves with the other work on it; CPU per turn does
not, and says where the second process's core went.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import operator
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from gateway.bench.cluster_cpu import (
    CpuSeconds,
    ceiling_turns_per_s,
    cpu_report,
    postmaster_pid,
    snapshot,
)
from gateway.bench.cluster_pages import Page, cluster, message_text

TURN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Window:
    """One measured window of the throughput stage: its turns, wall time and CPU."""

    processes: int
    turns: int
    wall_s: float
    cpu: CpuSeconds


async def run_throughput(
    server: str, postmaster: int, root: Path, count: int, args: argparse.Namespace
) -> Window:
    """Turns/s of ``count`` processes under the bench's load, one page per conversation.

    Each conversation first sends ``--warmup-turns`` untimed turns (its person,
    conversation and indexes are made, the processes' caches fill); then every
    conversation sends ``--turns`` more, and that window is timed, with the CPU
    of each party over it."""
    run = uuid.uuid4().hex[:6]
    sessions = [f"tp-{run}-{i:04d}" for i in range(args.conversations)]
    async with (
        cluster(
            server,
            root,
            count,
            stages=args.stages,
            lease_s=args.lease_s,
            turns=args.turns + args.warmup_turns,
        ) as gateways,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client,
    ):
        pages = [Page(s, gateways.chooser(i), client) for i, s in enumerate(sessions)]
        await asyncio.gather(*(page.open() for page in pages))
        pids = [process.pid for process in gateways.processes]

        async def converse(page: Page, turns: range) -> None:
            for index in turns:
                await page.ask(
                    message_text(page.session, index), f"{page.session}-{index}", TURN_TIMEOUT_S
                )

        warmup = range(args.warmup_turns)
        await asyncio.gather(*(converse(page, warmup) for page in pages))
        before = snapshot(pids, postmaster)
        started = time.monotonic()
        measured = range(args.warmup_turns, args.warmup_turns + args.turns)
        await asyncio.gather(*(converse(page, measured) for page in pages))
        wall = time.monotonic() - started
        used = snapshot(pids, postmaster) - before
        for page in pages:
            await page.close()
    return Window(count, args.conversations * args.turns, wall, used)


async def throughput(server: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``--throughput-rounds`` rounds of one process and two, the order swapped each
    round (so a load that grows or fades on the machine does not favour one); the
    turns/s of each over all its rounds, their ratio, and the CPU per turn of each
    party. ``turns_per_s_ceiling_N``: the most turns/s the CPU per turn measured
    allows on this machine's cores, quiet (``cluster_cpu.ceiling_turns_per_s``);
    ``ratio_ceiling`` their ratio, the most ``throughput_ratio`` can be at that
    CPU per turn, whatever else runs on the machine."""
    postmaster = await postmaster_pid(server)
    windows: dict[int, list[Window]] = {1: [], 2: []}
    for round_ in range(args.throughput_rounds):
        for count in (1, 2) if round_ % 2 == 0 else (2, 1):
            windows[count].append(await run_throughput(server, postmaster, root, count, args))
    result: dict[str, Any] = {}
    rate: dict[int, float] = {}
    ceiling: dict[int, float] = {}
    cores = os.cpu_count() or 1
    for count, measured in windows.items():
        turns = sum(w.turns for w in measured)
        wall = sum(w.wall_s for w in measured)
        used = functools.reduce(operator.add, (w.cpu for w in measured))
        rate[count] = turns / wall
        report = cpu_report(used, turns, wall)
        result[f"turns_per_s_{count}"] = round(rate[count], 2)
        result[f"cpu_ms_per_turn_{count}"] = report["cpu_ms_per_turn"]
        result[f"cores_busy_{count}"] = report["cores_busy"]
        ceiling[count] = ceiling_turns_per_s(used, turns, cores)
        result[f"turns_per_s_ceiling_{count}"] = round(ceiling[count], 2)
    result["throughput_ratio"] = round(rate[2] / rate[1], 3)
    result["throughput_rounds"] = [
        {"processes": w.processes, "turns_per_s": round(w.turns / w.wall_s, 2)}
        for pair in zip(windows[1], windows[2], strict=True)
        for w in sorted(pair, key=lambda w: w.processes)
    ]
    if ceiling[1] > 0:
        result["ratio_ceiling"] = round(ceiling[2] / ceiling[1], 3)
    return result

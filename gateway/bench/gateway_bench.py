"""``agentgw bench gateway``: the gateway's own overhead under concurrent webchat load.

It starts the real gateway (``python -m gateway run``) as a subprocess on a
free loopback port, with the scripted brain (it answers at once) and a
temporary data folder, then drives ``--conversations`` concurrent WebSocket
connections, each its own session, each sending ``--turns`` messages in
sequence (the next one after the reply). Afterwards it stops the gateway and
reads the ``turns`` table of its database, where the pipeline stores, per
turn, ``prepare_ms`` (message received → brain called: store, queue, history,
context stages) and ``deliver_ms`` (brain done → reply stored and delivered
to the page). The overhead of a turn is their sum.

``--pause-ms`` is each page's mean pause between a reply and its next
message (drawn from 0.5-1.5 x, the first message staggered over 0-1 x, so
the pages do not send in lockstep). With the default 0 every page sends
again at once, so N turns are always in flight and, by Little's law, a
turn's overhead is about N / turns_per_s: at N = 100 that measures
throughput. A pause like a person's measures the overhead at that offered
load instead.

``--stages default`` runs the configured defaults (memory layer and persona
loop on: the honest headline figure); ``--stages core`` turns both off to
measure the core alone. ``--tree on|off`` sets ``memory.tree`` and
``--tree-window-s S`` its update window for the run: with the default window
(120 s) a person's tree update comes after a run this short ends, so
``--tree-window-s 0`` is the way to count the updates' CPU in ``cpu_s``.
``--profile PATH`` runs the gateway under cProfile and leaves its stats at
PATH (``python -m pstats PATH``).

JSON printed with ``--json``::

    {"stages", "memory", "context_stages", "after_turn_stages", "conversations",
     "pause_ms", "turns", "turns_per_s", "errors", "overhead_p50_ms", "overhead_p95_ms",
     "prepare_p95_ms", "deliver_p95_ms", "wall_s",
     "rtt_p50_ms", "rtt_p95_ms", "cpu_s", "cpu_ms_per_turn", "children_cpu_s",
     "other_cores"}

``turns`` counts replied turns; ``errors`` counts turns that did not end in
a reply (error frames, timeouts, dropped connections, failed turns in the
store); ``rtt_*`` is the client's view (message sent → reply received).
``cpu_s`` is the CPU time (user + system, all threads) the gateway process
and its child processes (an upkeep job's CPU-bound steps run in one) spent
from the first message until they fell idle after the last reply (its
after-turn work included), and ``cpu_ms_per_turn`` that over the replied
turns: unlike ``turns_per_s`` it does not drop when other processes share
the cores. ``children_cpu_s`` is the children's part of ``cpu_s``.
``other_cores`` is the mean number of cores the rest of the machine kept busy
over that window (``/proc/stat``, less the gateway and this bench's pages):
on a 2-core machine a run with ``other_cores`` near 1 had one core for the
gateway and the pages, and its ``turns_per_s`` and latencies say so more than
the code does.
Exit status 1 when there were errors.

``--burst N`` measures overload instead: see ``gateway/bench/burst_bench.py``.

``--new-people N`` measures memory instead: N sessions of one message each,
each a new person (8 at a time, after 20 to warm up), and the gateway's
resident set (``VmRSS``) before, every N/10 people and after::

    {"stages", "index_cache_mb", "new_people", "replied", "errors", "rss_before_mb", "rss_after_mb",
     "per_person_mb", "settled_at", "tail_per_person_mb", "rss_mb_by_people",
     "people_per_s"}

``tail_per_person_mb`` is the growth per person after the first 1,000 (after
the first half when N is 2,000 or less): flat once the process has settled.
``--index-cache-mb MB`` sets the gateway's ``memory.index_cache_mb`` for the
run (null in the JSON: the default), to see it fill and hold within N people.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import socket
import sqlite3
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp

from gateway.bench.proc_cpu import cpu_seconds, machine_busy_seconds, tree_cpu_seconds
from gateway.bench.report import Target, at_most, print_verdicts, progress
from gateway.errors import ConfigError

TARGET_OVERHEAD_P95_MS = 25.0
STARTUP_TIMEOUT_S = 60.0
TURN_TIMEOUT_S = 60.0
# After the last reply the gateway still finishes after-turn work (judge, observe);
# it counts as idle once it spends less than this share of one core.
IDLE_CPU_SHARE = 0.05
IDLE_POLL_S = 0.5
IDLE_WAIT_S = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_environment() -> dict[str, str]:
    """This process's environment without anything that would reconfigure the child."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AGENTGW_", "ANTHROPIC_", "OPENAI_", "TELEGRAM_"))
    }
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


class GatewayProcess:
    """``python -m gateway run --config PATH`` as a child process, for benchmarks and tests.

    ``start`` returns once ``/healthz`` says it is ready; ``kill`` is SIGKILL (a crash),
    ``stop`` is SIGTERM and a wait (a graceful shutdown). Output goes to
    ``log_path``.
    """

    def __init__(
        self,
        config_path: Path,
        port: int,
        log_path: Path,
        *,
        profile_path: Path | None = None,
    ) -> None:
        self.config_path = config_path
        self.port = port
        self.log_path = log_path
        # Run the child under cProfile; the stats are written when it exits cleanly.
        self.profile_path = profile_path
        self._process: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the gateway process is not running")
        return self._process.pid

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    async def start(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        if self._process is not None:
            raise RuntimeError("the gateway process is already started")
        self._log = await asyncio.to_thread(self.log_path.open, "ab")
        profiler = (
            ["-m", "cProfile", "-o", str(self.profile_path)]
            if self.profile_path is not None
            else []
        )
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            *profiler,
            "-m",
            "gateway",
            "run",
            "--config",
            str(self.config_path),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env=child_environment(),
        )
        try:
            await self._wait_healthy(timeout)
        except BaseException:
            await self.kill()
            raise

    async def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while True:
                if self._process is None or self._process.returncode is not None:
                    log = await asyncio.to_thread(self.log_text)
                    raise RuntimeError(f"the gateway exited at start:\n{log[-4000:]}")
                try:
                    async with session.get(f"{self.base_url}/healthz") as response:
                        # "starting" while the models load: the turns would wait for them.
                        if response.status == 200 and (await response.json())["status"] == "ok":
                            return
                except aiohttp.ClientConnectionError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the gateway did not answer /healthz in {timeout:g} s")
                await asyncio.sleep(0.1)

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash or a power cut of the process."""
        await self._end(signal.SIGKILL, timeout=10.0)

    async def exited(self, timeout: float) -> int:
        """Wait for the process to end by itself (``TimeoutError`` if it does not in
        ``timeout`` seconds). Returns the exit status."""
        if self._process is None:
            raise RuntimeError("the gateway process is not running")
        await asyncio.wait_for(self._process.wait(), timeout)
        return await self._end(signal.SIGKILL, timeout=0.0)  # ended: only closes the log

    async def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit status."""
        return await self._end(signal.SIGTERM, timeout=timeout)

    async def _end(self, sig: signal.Signals, timeout: float) -> int:
        process, self._process = self._process, None
        try:
            if process is None:
                return 0
            if process.returncode is None:
                process.send_signal(sig)
                try:
                    await asyncio.wait_for(process.wait(), timeout)
                except TimeoutError:
                    process.kill()
                    await process.wait()
            return int(process.returncode or 0)
        finally:
            if self._log is not None:
                await asyncio.to_thread(self._log.close)
                self._log = None

    async def __aenter__(self) -> GatewayProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


STAGE_SETS = ("default", "core")


def bench_config_text(
    data_dir: Path,
    port: int,
    turns: int,
    stages: str = "default",
    memory: Mapping[str, bool | float] | None = None,
) -> str:
    """The gateway's config for the run: scripted brain, temp store, no voice models.

    ``stages="default"`` keeps the configured defaults (memory layer and persona
    loop, lessons, forward triggers, focus and decisions on); ``"core"`` turns them off,
    leaving persona file, clock and history. ``memory`` sets ``[memory]`` keys over
    the defaults (``--tree``, ``--tree-window-s``), with the default stages only.
    """
    if stages not in STAGE_SETS:
        raise ConfigError(f"--stages must be one of {', '.join(STAGE_SETS)}, not {stages!r}")
    if memory and stages != "default":
        raise ConfigError("--tree and --tree-window-s need --stages default (core has no memory)")
    # Per-connection rate limit above what one conversation sends in a minute.
    rate = max(30, turns * 2)
    text = (
        f'[server]\nhost = "127.0.0.1"\nport = {port}\n'
        f"[store]\ndata_dir = {json.dumps(str(data_dir))}\n"
        '[brain]\nkind = "scripted"\n'
        "[scripted]\ndelay_s = 0.0\n"
        f"[webchat]\nrate_per_minute = {rate}\n"
        "[voice]\nenabled = false\n"
    )
    if stages == "core":
        text += (
            "[memory]\nenabled = false\n[persona]\nenabled = false\n[observe]\nenabled = false\n"
            "[lessons]\nenabled = false\n"
            "[triggers]\nenabled = false\n"
            "[continuity]\nenabled = false\n"
        )
    if memory:
        text += "[memory]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in memory.items())
    return text


async def running_stages(base_url: str) -> dict[str, list[str]]:
    """The pipeline's stages as the gateway reports them on ``/healthz``."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{base_url}/healthz") as response,
    ):
        body = await response.json()
    stages = body.get("stages", {})
    return {
        "context": [str(name) for name in stages.get("context", [])],
        "after_turn": [str(name) for name in stages.get("after_turn", [])],
    }


@dataclass
class DriveResult:
    replied: int = 0
    # Turns that did not end in a reply, filled in when the drive is over.
    errors: int = 0
    rtt_ms: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # A progress bar (gateway.bench.report.progress) moved on by each reply, if any.
    bar: Any = None


async def converse(
    session: aiohttp.ClientSession,
    base_url: str,
    name: str,
    turns: int,
    result: DriveResult,
    pause_s: float = 0.0,
) -> None:
    """One page: connect, then ``turns`` messages, each a pause after the previous reply.

    Pauses are drawn from 0.5-1.5 x ``pause_s`` and the first message waits
    0-1 x ``pause_s``, so pages do not send in lockstep as no real people do.
    """
    # Seeded by the page: the same run draws the same pauses.
    draw = random.Random(name)
    try:
        ws = await session.ws_connect(f"{base_url}/ws?session={name}", heartbeat=None)
    except aiohttp.ClientError as exc:
        result.problems.append(f"{name}: connect failed: {exc}")
        return
    try:
        while (await ws.receive_json(timeout=TURN_TIMEOUT_S))["type"] != "history":
            pass
        for index in range(turns):
            if pause_s:
                low, high = (0.5, 1.5) if index else (0.0, 1.0)
                await asyncio.sleep(pause_s * draw.uniform(low, high))
            await one_turn(ws, name, index, result)
    except (aiohttp.ClientError, TimeoutError, TypeError, ValueError) as exc:
        # A broken connection or frame: the turns not done are counted as errors.
        result.problems.append(f"{name}: connection broke: {exc!r}")
    finally:
        await ws.close()


async def one_turn(
    ws: aiohttp.ClientWebSocketResponse, name: str, index: int, result: DriveResult
) -> None:
    client_id = f"{name}-{index}"
    text = f"message {index} from {name}"
    sent = time.perf_counter()
    await ws.send_json({"type": "message", "text": text, "client_id": client_id})
    message_id: int | None = None
    while True:
        frame: dict[str, Any] = await ws.receive_json(timeout=TURN_TIMEOUT_S)
        kind = frame.get("type")
        if kind == "ack" and frame.get("client_id") == client_id:
            message_id = frame["message_id"]
        elif kind == "error":
            result.problems.append(f"{client_id}: {frame.get('code')}: {frame.get('message')}")
            return
        elif kind == "reply" and message_id is not None and frame.get("reply_to") == message_id:
            result.rtt_ms.append((time.perf_counter() - sent) * 1000)
            result.replied += 1
            if result.bar is not None:
                result.bar.update()
            return


async def drive(
    base_url: str, conversations: int, turns: int, run_id: str, pause_s: float = 0.0
) -> DriveResult:
    result = DriveResult()
    # limit=0: one connection per page, not aiohttp's default pool of 100.
    connector = aiohttp.TCPConnector(limit=0)
    with progress(conversations * turns, "turns", "turn") as result.bar:
        async with aiohttp.ClientSession(connector=connector) as session:
            await asyncio.gather(
                *(
                    converse(session, base_url, f"bench-{run_id}-{i:05d}", turns, result, pause_s)
                    for i in range(conversations)
                )
            )
    result.errors = conversations * turns - result.replied
    return result


def read_turn_timings(database: Path) -> tuple[list[tuple[float, float]], int]:
    """(prepare_ms, deliver_ms) of the replied turns, and the count of other turns."""
    with contextlib.closing(sqlite3.connect(database)) as connection:
        rows = connection.execute("SELECT status, prepare_ms, deliver_ms FROM turns").fetchall()
    timings = [
        (float(prepare), float(deliver))
        for status, prepare, deliver in rows
        if status == "replied" and prepare is not None and deliver is not None
    ]
    return timings, len(rows) - len(timings)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


async def run(
    conversations: int,
    turns: int,
    folder: Path,
    *,
    stages: str = "default",
    profile_path: Path | None = None,
    pause_ms: float = 0.0,
    memory: Mapping[str, bool | float] | None = None,
) -> dict[str, Any]:
    port = free_port()
    data_dir = folder / "data"
    config_path = folder / "agentgw.toml"
    await asyncio.to_thread(
        config_path.write_text, bench_config_text(data_dir, port, turns, stages, memory), "utf-8"
    )
    gateway = GatewayProcess(config_path, port, folder / "gateway.log", profile_path=profile_path)
    await gateway.start()
    try:
        ran = await running_stages(gateway.base_url)
        own_start = cpu_seconds(gateway.pid)
        cpu_start, bench_start = tree_cpu_seconds(gateway.pid), cpu_seconds(os.getpid())
        machine_start = machine_busy_seconds()
        started = time.perf_counter()
        driven = await drive(
            gateway.base_url, conversations, turns, run_id=str(port), pause_s=pause_ms / 1000
        )
        wall_s = time.perf_counter() - started
        cpu_s = await cpu_until_idle(gateway.pid) - cpu_start
        window_s = time.perf_counter() - started
        children_s = cpu_s - (cpu_seconds(gateway.pid) - own_start)
        # What the rest of the machine ran meanwhile: neither the gateway nor this
        # bench's pages. Above ~0.2 cores, turns/s and the latencies are not the code's.
        others_s = machine_busy_seconds() - machine_start - cpu_s
        others_s -= cpu_seconds(os.getpid()) - bench_start
    finally:
        status = await gateway.stop()
    timings, not_replied = await asyncio.to_thread(read_turn_timings, data_dir / "agentgw.db")
    overhead = [prepare + deliver for prepare, deliver in timings]
    # A turn the client saw answered but the store did not close counts too.
    errors = max(driven.errors, conversations * turns - len(timings), not_replied)
    if status != 0:
        driven.problems.append(f"the gateway exited with status {status}")
        errors += 1
    return {
        "stages": stages,
        "memory": dict(memory or {}),
        "context_stages": ran["context"],
        "after_turn_stages": ran["after_turn"],
        "conversations": conversations,
        "pause_ms": pause_ms,
        "turns": driven.replied,
        "turns_per_s": round(driven.replied / wall_s, 1) if wall_s > 0 else 0.0,
        "errors": errors,
        "overhead_p50_ms": round(percentile(overhead, 0.50), 2),
        "overhead_p95_ms": round(percentile(overhead, 0.95), 2),
        "prepare_p95_ms": round(percentile([p for p, _ in timings], 0.95), 2),
        "deliver_p95_ms": round(percentile([d for _, d in timings], 0.95), 2),
        "wall_s": round(wall_s, 2),
        "rtt_p50_ms": round(percentile(driven.rtt_ms, 0.50), 2),
        "rtt_p95_ms": round(percentile(driven.rtt_ms, 0.95), 2),
        "cpu_s": round(cpu_s, 2),
        "cpu_ms_per_turn": round(cpu_s * 1000 / driven.replied, 2) if driven.replied else 0.0,
        "children_cpu_s": round(max(children_s, 0.0), 2),
        "other_cores": round(max(others_s, 0.0) / window_s, 2) if window_s > 0 else 0.0,
        "problems": driven.problems[:10],
    }


async def cpu_until_idle(pid: int) -> float:
    """The CPU seconds of the process and its children (``tree_cpu_seconds``) once
    they have fallen idle (or after ``IDLE_WAIT_S``)."""
    deadline = time.monotonic() + IDLE_WAIT_S
    before = tree_cpu_seconds(pid)
    while time.monotonic() < deadline:
        await asyncio.sleep(IDLE_POLL_S)
        now = tree_cpu_seconds(pid)
        if now - before <= IDLE_CPU_SHARE * IDLE_POLL_S:
            return now
        before = now
    return before


def resident_mb(pid: int) -> float:
    """The process's resident set (VmRSS) in MB, from /proc."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


# People sent in before the first reading: the model and the first indexes are loaded
# lazily, once per process, and are not any one person's cost.
NEW_PEOPLE_WARMUP = 20
NEW_PEOPLE_CONCURRENCY = 8


async def run_new_people(
    people: int,
    folder: Path,
    *,
    stages: str = "default",
    every: int = 0,
    index_cache_mb: float | None = None,
) -> dict[str, Any]:
    """``--new-people N``: N sessions of one message each, each a new person; the
    gateway's resident memory before, along the way (every ``every`` people) and after.

    ``per_person_mb`` is the growth over the N people; ``tail_per_person_mb`` the
    growth over those after the first half (or after the first 1,000 when N > 2,000):
    what each further person costs once the process has settled.
    """
    port = free_port()
    data_dir = folder / "data"
    config_path = folder / "agentgw.toml"
    text = bench_config_text(data_dir, port, 1, stages)
    if index_cache_mb is not None and stages != "core":
        text += f"[memory]\nindex_cache_mb = {index_cache_mb}\n"
    await asyncio.to_thread(config_path.write_text, text, "utf-8")
    every = every or max(1, people // 10)
    settled_at = 1000 if people > 2000 else people // 2
    gateway = GatewayProcess(config_path, port, folder / "gateway.log")
    await gateway.start()
    result = DriveResult()
    readings: list[tuple[int, float]] = []
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def person(name: str) -> None:
                await converse(session, gateway.base_url, name, 1, result)

            async def people_from(start: int, count: int) -> None:
                # A few at a time, as people arrive, not N sockets at once.
                slots = asyncio.Semaphore(NEW_PEOPLE_CONCURRENCY)

                async def one(i: int) -> None:
                    async with slots:
                        await person(f"new-{port}-{i:06d}")

                await asyncio.gather(*(one(i) for i in range(start, start + count)))

            await people_from(-NEW_PEOPLE_WARMUP, NEW_PEOPLE_WARMUP)
            started = time.perf_counter()
            before = resident_mb(gateway.pid)
            readings.append((0, before))
            done = 0
            while done < people:
                step = min(every, people - done)
                await people_from(done, step)
                done += step
                readings.append((done, resident_mb(gateway.pid)))
            wall_s = time.perf_counter() - started
    finally:
        status = await gateway.stop()
    if status != 0:
        result.problems.append(f"the gateway exited with status {status}")
    after = readings[-1][1]
    settled = min(readings, key=lambda r: abs(r[0] - settled_at))
    tail = people - settled[0]
    return {
        "stages": stages,
        "index_cache_mb": index_cache_mb,
        "new_people": people,
        "replied": result.replied - NEW_PEOPLE_WARMUP,
        "errors": people + NEW_PEOPLE_WARMUP - result.replied + (status != 0),
        "rss_before_mb": round(before, 1),
        "rss_after_mb": round(after, 1),
        "per_person_mb": round((after - before) / people, 4),
        "settled_at": settled[0],
        "tail_per_person_mb": round((after - settled[1]) / tail, 4) if tail else 0.0,
        "rss_mb_by_people": [[n, round(mb, 1)] for n, mb in readings],
        "people_per_s": round(people / wall_s, 1) if wall_s > 0 else 0.0,
        "problems": result.problems[:10],
    }


def main_new_people(args: argparse.Namespace) -> int:
    if args.new_people < 1:
        raise ConfigError("--new-people must be 1 or more")
    cache_mb = getattr(args, "index_cache_mb", None)
    if cache_mb is not None and cache_mb <= 0:
        raise ConfigError("--index-cache-mb must be positive")
    with tempfile.TemporaryDirectory(prefix="agentgw-bench-gateway-") as folder:
        result = asyncio.run(
            run_new_people(
                args.new_people,
                Path(folder),
                stages=getattr(args, "stages", "default"),
                index_cache_mb=cache_mb,
            )
        )
    print_result(result, as_json=args.json, width=20)
    return 1 if result["errors"] else 0


def print_result(result: dict[str, Any], *, as_json: bool, width: int = 16) -> None:
    """The figures on stdout (JSON, or a key a line); what went wrong on stderr."""
    for problem in result.pop("problems"):
        print(f"bench gateway: {problem}", file=sys.stderr)
    if as_json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>{width}}: {value}")


def main(args: argparse.Namespace) -> int:
    if getattr(args, "new_people", None) is not None:
        return main_new_people(args)
    if args.conversations < 1 or args.turns < 1:
        raise ConfigError("--conversations and --turns must be 1 or more")
    pause_ms = float(getattr(args, "pause_ms", 0.0))
    if pause_ms < 0:
        raise ConfigError("--pause-ms must be 0 or more")
    profile = getattr(args, "profile", None)
    burst = int(getattr(args, "burst", 0) or 0)
    if burst < 0:
        raise ConfigError("--burst must be 1 or more")
    if burst:
        from gateway.bench.burst_bench import main_burst

        return main_burst(args, burst, profile)
    with tempfile.TemporaryDirectory(prefix="agentgw-bench-gateway-") as folder:
        result = asyncio.run(
            run(
                args.conversations,
                args.turns,
                Path(folder),
                stages=getattr(args, "stages", "default"),
                profile_path=Path(profile).resolve() if profile else None,
                pause_ms=pause_ms,
                memory=memory_settings(args),
            )
        )
    print_result(result, as_json=args.json)
    print_verdicts(gateway_targets(result), as_json_output=args.json)
    return 1 if result["errors"] else 0


def memory_settings(args: argparse.Namespace) -> dict[str, bool | float]:
    """``[memory]`` keys the flags set: the tree on or off, and its update window (0 runs
    a person's update as soon as the worker is free, so the run's CPU holds it)."""
    memory: dict[str, bool | float] = {}
    tree = getattr(args, "tree", None)
    if tree is not None:
        memory["tree"] = tree == "on"
    window = getattr(args, "tree_window_s", None)
    if window is not None:
        if window < 0:
            raise ConfigError("--tree-window-s must be 0 or more")
        memory["tree_update_window_s"] = float(window)
    return memory


def gateway_targets(result: dict[str, Any]) -> list[Target]:
    overhead = result["overhead_p95_ms"]
    return [
        at_most("gateway overhead p95", overhead, TARGET_OVERHEAD_P95_MS, "ms"),
        Target("every turn answered", result["errors"] == 0, f"{result['errors']} failed"),
    ]

"""``agentgw bench gateway --burst N``: overload, N first messages at the same moment.

N new pages (N new people) connect to the real gateway (a subprocess, as in
``gateway_bench``, scripted brain) at once, and once all are connected each
sends its first message at the same moment. JSON printed with ``--json``::

    {"stages", "burst", "replied", "errors", "busy", "error_codes",
     "ack_p50_ms", "ack_p95_ms", "reply_p50_ms", "reply_p95_ms",
     "connect_p95_ms", "wall_s"}

``errors`` counts messages that were not answered (an error frame, a
timeout, a broken connection, a turn not replied in the store), with their
codes in ``error_codes``; ``busy`` counts ``busy`` frames (back-pressure: the
message is stored and answered later, so a busy message that is answered is
not an error). ``ack_*`` is message sent → ``ack``, ``reply_*`` message sent
→ ``reply``; ``connect_p95_ms`` is a page's connect → ``history``.
Exit status 1 when there were errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from gateway.bench.gateway_bench import (
    STARTUP_TIMEOUT_S,
    TURN_TIMEOUT_S,
    GatewayProcess,
    bench_config_text,
    free_port,
    percentile,
)


@dataclass
class BurstResult:
    replied: int = 0
    busy: int = 0
    connect_ms: list[float] = field(default_factory=list)
    ack_ms: list[float] = field(default_factory=list)
    reply_ms: list[float] = field(default_factory=list)
    error_codes: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def failed(self, name: str, code: str, detail: str = "") -> None:
        self.error_codes[code] = self.error_codes.get(code, 0) + 1
        self.problems.append(f"{name}: {code}{': ' + detail if detail else ''}")


async def first_message(
    session: aiohttp.ClientSession,
    base_url: str,
    name: str,
    go: asyncio.Event,
    arrived: Callable[[str], None],
    result: BurstResult,
) -> None:
    """One new page: connect, wait for everyone, send one message, wait for its reply."""
    started = time.perf_counter()
    try:
        ws = await session.ws_connect(f"{base_url}/ws?session={name}", heartbeat=None)
    except aiohttp.ClientError as exc:
        result.failed(name, "connect_failed", repr(exc))
        arrived(name)
        return
    try:
        try:
            while (await ws.receive_json(timeout=TURN_TIMEOUT_S))["type"] != "history":
                pass
        finally:
            # Counted even when it broke, so the others do not wait for this page.
            arrived(name)
        result.connect_ms.append((time.perf_counter() - started) * 1000)
        await go.wait()
        client_id = f"{name}-0"
        sent = time.perf_counter()
        await ws.send_json(
            {"type": "message", "text": f"hello, I am {name}", "client_id": client_id}
        )
        message_id: int | None = None
        while True:
            frame: dict[str, Any] = await ws.receive_json(timeout=TURN_TIMEOUT_S)
            kind = frame.get("type")
            if kind == "ack" and frame.get("client_id") == client_id:
                message_id = frame["message_id"]
                result.ack_ms.append((time.perf_counter() - sent) * 1000)
            elif kind == "busy":
                result.busy += 1
            elif kind == "error" and (
                frame.get("client_id") == client_id
                or (message_id is not None and frame.get("reply_to") == message_id)
            ):
                result.failed(name, str(frame.get("code")), str(frame.get("message")))
                return
            elif kind == "reply" and message_id is not None and frame.get("reply_to") == message_id:
                result.reply_ms.append((time.perf_counter() - sent) * 1000)
                result.replied += 1
                return
    except TimeoutError:
        result.failed(name, "timeout", f"nothing for {TURN_TIMEOUT_S:g} s")
    except (aiohttp.ClientError, TypeError, ValueError) as exc:
        result.failed(name, "connection_broke", repr(exc))
    finally:
        await ws.close()


async def drive_burst(base_url: str, count: int, run_id: str) -> BurstResult:
    result = BurstResult()
    go = asyncio.Event()
    everyone = asyncio.Event()
    connected: list[str] = []

    def arrived(name: str) -> None:
        connected.append(name)
        if len(connected) == count:
            everyone.set()

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        pages = [
            asyncio.create_task(
                first_message(session, base_url, f"burst-{run_id}-{i:05d}", go, arrived, result)
            )
            for i in range(count)
        ]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(everyone.wait(), STARTUP_TIMEOUT_S)
        go.set()
        await asyncio.gather(*pages)
    return result


async def run_burst(
    count: int, folder: Path, *, stages: str = "default", profile_path: Path | None = None
) -> dict[str, Any]:
    port = free_port()
    data_dir = folder / "data"
    config_path = folder / "agentgw.toml"
    await asyncio.to_thread(
        config_path.write_text, bench_config_text(data_dir, port, 1, stages), "utf-8"
    )
    gateway = GatewayProcess(config_path, port, folder / "gateway.log", profile_path=profile_path)
    await gateway.start()
    try:
        started = time.perf_counter()
        driven = await drive_burst(gateway.base_url, count, run_id=str(port))
        wall_s = time.perf_counter() - started
    finally:
        status = await gateway.stop()
    statuses = await asyncio.to_thread(read_turn_statuses, data_dir / "agentgw.db")
    # deliver_ms may still be pending at the stop, so replied turns are counted by status.
    errors = max(count - driven.replied, count - statuses.get("replied", 0))
    if status != 0:
        driven.problems.append(f"the gateway exited with status {status}")
        errors += 1
    return {
        "stages": stages,
        "burst": count,
        "replied": driven.replied,
        "errors": errors,
        "busy": driven.busy,
        "error_codes": dict(sorted(driven.error_codes.items())),
        "ack_p50_ms": round(percentile(driven.ack_ms, 0.50), 1),
        "ack_p95_ms": round(percentile(driven.ack_ms, 0.95), 1),
        "reply_p50_ms": round(percentile(driven.reply_ms, 0.50), 1),
        "reply_p95_ms": round(percentile(driven.reply_ms, 0.95), 1),
        "connect_p95_ms": round(percentile(driven.connect_ms, 0.95), 1),
        "wall_s": round(wall_s, 2),
        "problems": driven.problems[:10],
    }


def read_turn_statuses(database: Path) -> dict[str, int]:
    """How many turns the store holds in each status."""
    with contextlib.closing(sqlite3.connect(database)) as connection:
        rows = connection.execute("SELECT status, count(*) FROM turns GROUP BY status").fetchall()
    return {str(status): int(count) for status, count in rows}


def main_burst(args: argparse.Namespace, count: int, profile: str | None) -> int:
    with tempfile.TemporaryDirectory(prefix="agentgw-bench-burst-") as folder:
        result = asyncio.run(
            run_burst(
                count,
                Path(folder),
                stages=getattr(args, "stages", "default"),
                profile_path=Path(profile).resolve() if profile else None,
            )
        )
    from gateway.bench.gateway_bench import print_result

    print_result(result, as_json=args.json)
    return 1 if result["errors"] else 0

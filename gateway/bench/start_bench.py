"""``agentgw bench start``: how long a restart keeps a message from being acknowledged.

Each run starts the real gateway (``python -m gateway run``) on a free
loopback port with the configured defaults (the MiniLM embedder, its queries
on ONNX, the scripted brain so no API is called) over the same data folder,
and times, from just before the process is spawned:

- ``serving_s``: the first WebSocket connection that the gateway answers
  (its ``hello``);
- ``ack_s``: a webchat message sent at once acknowledged, i.e. stored;
- ``reply_s``: its reply (the turn ran: models loaded, pack built);
- ``ready_s``: ``/healthz`` says ``ok`` (polled every 50 ms beside it).

Then SIGTERM, and the next run. One start before the runs is not counted
(``warm_up``): it fills the OS's file cache and the one-time ONNX export into
the shared model cache, so the runs are those of a warm machine. With
``--items N`` the store first gets N memory items of the page's own person
(the synthetic sentences of ``bench pack``, embedded and indexed), as a used
store; the reply then also pays for opening that person's indexes.

``--pythonpath PATH`` runs the gateway of another checkout. ``--against PATH``
alternates each run with one of the gateway in PATH over the same store (a
before/after in one sitting, as the machine's speed drifts) and reports its
figures under ``against`` and ``ack_p50_ratio`` (theirs / ours). JSON printed
with ``--json``::

    {"items", "runs", "target_ack_s", "warm_up", "serving_s", "ack_s", "reply_s",
     "ready_s", "ack_p50_s", "ack_max_s", "reply_p50_s", "exit_codes",
     "against": {...the same...}, "ack_p50_ratio"}

Exit status 1 when a run's ack took longer than ``TARGET_ACK_S`` or a run failed
(of this checkout's runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from gateway.bench.gateway_bench import child_environment, free_port
from gateway.config import load_config
from gateway.errors import ConfigError

TARGET_ACK_S = 3.0
RUN_TIMEOUT_S = 120.0
SESSION = "bench-start-session"


def write_config(folder: Path, port: int) -> Path:
    path = folder / "agentgw.toml"
    path.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\n'
        f"[store]\ndata_dir = {json.dumps(str(folder / 'data'))}\n"
        '[brain]\nkind = "scripted"\n',
        encoding="utf-8",
    )
    return path


async def fill_store(folder: Path, items: int) -> None:
    """``items`` memory items of the webchat page's person, through the real ingest path."""
    from gateway.bench.pack_bench import fill
    from gateway.store import Store
    from gateway.store.repo import resolve_address
    from memory.service import MemoryService, load_embedder

    config = load_config(write_config(folder, free_port()), env={})
    embedder = await asyncio.to_thread(load_embedder, config.memory)
    async with Store(config.database_url) as store:
        service = MemoryService(store, config.memory, config.data_dir / "memory-index", embedder)
        address = await resolve_address(store, "webchat", SESSION)
        await fill(service, address.person_id, address.conversation_id, items)
        await service.aclose()


async def one_start(folder: Path, number: int, env: dict[str, str]) -> dict[str, Any]:
    """Start, send one message, time it; stop. Seconds from the spawn."""
    port = free_port()
    config = write_config(folder, port)
    base = f"http://127.0.0.1:{port}"
    with (folder / f"run-{number}.log").open("wb") as log_file:
        began = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway",
            "run",
            "--config",
            str(config),
            stdin=asyncio.subprocess.DEVNULL,
            # Not this checkout's folder: ``-m`` would import the gateway from there
            # ahead of PYTHONPATH (--pythonpath).
            cwd=folder,
            stdout=log_file,
            stderr=log_file,
            env=env,
        )
        return await _time_start(process, base, number, began)


async def _time_start(
    process: asyncio.subprocess.Process, base: str, number: int, began: float
) -> dict[str, Any]:
    result: dict[str, Any] = {}

    def since() -> float:
        return round(time.perf_counter() - began, 3)

    async def watch_health(session: aiohttp.ClientSession) -> None:
        while True:
            try:
                async with session.get(f"{base}/healthz") as response:
                    if response.status == 200 and (await response.json())["status"] == "ok":
                        result["ready_s"] = since()
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)

    try:
        async with asyncio.timeout(RUN_TIMEOUT_S), aiohttp.ClientSession() as session:
            health = asyncio.create_task(watch_health(session), name="bench-start-health")
            try:
                while True:
                    if process.returncode is not None:
                        raise RuntimeError(f"the gateway exited with {process.returncode}")
                    try:
                        ws = await session.ws_connect(f"{base}/ws?session={SESSION}")
                        break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.02)
                async with ws:
                    frame = await ws.receive_json()
                    result["serving_s"] = since()
                    await ws.send_json(
                        {
                            "type": "message",
                            "text": f"hello again, start {number}",
                            "client_id": f"start-{number}",
                        }
                    )
                    while frame.get("type") != "reply":
                        frame = await ws.receive_json()
                        if frame.get("type") == "error":
                            raise RuntimeError(f"error frame: {frame}")
                        if frame.get("type") == "ack":
                            result["ack_s"] = since()
                    result["reply_s"] = since()
                await health
            finally:
                health.cancel()
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
        result["exit_code"] = process.returncode
    return result


def summary(results: list[dict[str, Any]], warm_up: dict[str, Any]) -> dict[str, Any]:
    acks = [r["ack_s"] for r in results]
    replies = [r["reply_s"] for r in results]
    return {
        "warm_up": warm_up,
        "serving_s": [r["serving_s"] for r in results],
        "ack_s": acks,
        "reply_s": replies,
        "ready_s": [r.get("ready_s") for r in results],
        "ack_p50_s": round(statistics.median(acks), 3),
        "ack_max_s": max(acks),
        "reply_p50_s": round(statistics.median(replies), 3),
        "exit_codes": [r["exit_code"] for r in results],
    }


async def run(
    items: int, runs: int, pythonpath: str | None, against: str | None = None
) -> dict[str, Any]:
    env = child_environment()
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    other = {**env, "PYTHONPATH": against} if against is not None else None
    with tempfile.TemporaryDirectory(prefix="agentgw-bench-start-") as name:
        folder = Path(name)
        if items:
            await fill_store(folder, items)
        warm_up = await one_start(folder, 0, env)
        other_warm_up = await one_start(folder, 0, other) if other is not None else {}
        mine: list[dict[str, Any]] = []
        theirs: list[dict[str, Any]] = []
        for n in range(1, runs + 1):
            # Alternated over the same store, so both see the same machine.
            mine.append(await one_start(folder, n, env))
            if other is not None:
                theirs.append(await one_start(folder, n, other))
    ours = summary(mine, warm_up)
    figures: dict[str, Any] = {"items": items, "runs": runs, "target_ack_s": TARGET_ACK_S, **ours}
    if other is not None:
        before = summary(theirs, other_warm_up)
        figures["against"] = {"pythonpath": against, **before}
        figures["ack_p50_ratio"] = round(before["ack_p50_s"] / ours["ack_p50_s"], 2)
    return figures


def main(args: argparse.Namespace) -> int:
    if args.items < 0 or args.runs < 1:
        raise ConfigError("--items must be 0 or more and --runs 1 or more")
    for flag, path in (("--pythonpath", args.pythonpath), ("--against", args.against)):
        if path is not None and not os.path.isdir(path):
            raise ConfigError(f"{flag} {path} is not a folder")
    figures = asyncio.run(run(args.items, args.runs, args.pythonpath, args.against))
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key:>12}: {value}")
    slow = figures["ack_max_s"] > TARGET_ACK_S
    failed = any(code != 0 for code in figures["exit_codes"])
    return 1 if slow or failed else 0

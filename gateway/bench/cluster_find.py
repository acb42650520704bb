"""Stored by one gateway, found by another's pack: ``cross_process_find_ms`` (issue 25).

Two processes on one PostgreSQL database, each with its own store connections,
index folder and LISTEN connection: this one (A) stores items through its memory
service; a child process (B, ``python -m gateway.bench.cluster_find URL DIR PERSON``)
has the person's indexes open and packs, again and again, a question about
the item A is about to store, until its pack quotes it. The figure is B's
wall clock when the pack first quotes it minus A's when its store returned
(one machine: one clock), over ``runs`` items.

Only the index feed is measured (memory/feed.py: NOTIFY → apply → the next
pack), with the real embedder on both sides; the turn machinery around it is
``bench cluster``'s.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from gateway.bench.gateway_bench import percentile
from gateway.config import MemoryConfig
from gateway.store import Store
from gateway.store.notify import PgListener
from gateway.store.repo import resolve_address
from memory.embed import SentenceEmbedder
from memory.feed import IndexFeed
from memory.service import Episode, MemoryService, PackRequest

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
# A pack that still lacks the word after this long counts as not found.
FIND_TIMEOUT_S = 20.0
WORDS = ("cello", "kayak", "sourdough", "telescope", "ukulele", "origami", "falconry")


def _memory_config() -> MemoryConfig:
    return MemoryConfig(embedder="minilm")


async def _member(url: str, index_dir: Path, name: str) -> tuple[Store, MemoryService, PgListener]:
    store = Store(url)
    await store.open()
    embedder = await asyncio.to_thread(SentenceEmbedder.load)
    memory = MemoryService(store, _memory_config(), index_dir, embedder)
    listener = PgListener(url, name=name)
    feed = IndexFeed(memory, listener)
    await feed.start()
    await listener.start()
    return store, memory, listener


async def _finder(url: str, index_dir: Path, person_id: int) -> None:
    """B: for each word read from stdin, pack until the pack quotes it; print when."""
    store, memory, listener = await _member(url, index_dir, "cluster_find B")
    loop = asyncio.get_running_loop()
    # Opens the person's indexes: from here on only the feed brings A's items.
    await memory.build_pack(PackRequest(person_id, "hello", T0))
    print("ready", flush=True)
    try:
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            deadline = time.monotonic() + FIND_TIMEOUT_S
            found = 0.0
            while time.monotonic() < deadline:
                pack = await memory.build_pack(
                    PackRequest(person_id, f"what about the {line.split()[0]}?", T0)
                )
                if line in pack.text:
                    found = time.time()
                    break
            print(f"{found:.6f}", flush=True)
    finally:
        await listener.aclose()
        await memory.aclose()
        await store.close()


def _read_line(stream: IO[str]) -> str:
    line = stream.readline()
    if not line:
        raise RuntimeError("the finder process ended early")
    return line.strip()


def _start_finder(url: str, index_dir: Path, person_id: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.bench.cluster_find", url, str(index_dir), str(person_id)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def cross_process_find(url: str, work_dir: Path, runs: int = 30) -> dict[str, float | int]:
    """A stores ``runs`` items one after another; B's packs find each. Milliseconds."""
    store, memory, listener = await _member(url, work_dir / "index-a", "cluster_find A")
    try:
        person = await resolve_address(store, "webchat", f"find-{uuid.uuid4().hex[:8]}")
        await memory.ingest([Episode(person.person_id, "Hello there", T0, "user", "Sam")])
        finder = await asyncio.to_thread(_start_finder, url, work_dir / "index-b", person.person_id)
        assert finder.stdin is not None
        assert finder.stdout is not None
        try:
            if await asyncio.to_thread(_read_line, finder.stdout) != "ready":
                raise RuntimeError("the finder process did not start")
            gaps: list[float] = []
            missed = 0
            for n in range(runs):
                word = WORDS[n % len(WORDS)]
                marker = f"{word} lesson number {n} {uuid.uuid4().hex[:6]}"
                finder.stdin.write(marker + "\n")
                finder.stdin.flush()
                await memory.ingest(
                    [Episode(person.person_id, f"I booked a {marker}", T0, "user", "Sam")]
                )
                stored = time.time()
                found = float(await asyncio.to_thread(_read_line, finder.stdout))
                if found:
                    gaps.append(max(0.0, found - stored) * 1000)
                else:
                    missed += 1
            finder.stdin.write("\n")
            finder.stdin.flush()
        finally:
            try:
                await asyncio.to_thread(finder.wait, 30)
            except subprocess.TimeoutExpired:
                finder.kill()
                await asyncio.to_thread(finder.wait)
            finder.stdin.close()
            finder.stdout.close()
        return {
            "cross_process_find_ms": round(percentile(gaps, 0.95), 1) if gaps else -1.0,
            "cross_process_find_p50_ms": round(percentile(gaps, 0.5), 1) if gaps else -1.0,
            "cross_process_find_runs": runs,
            "cross_process_find_missed": missed,
        }
    finally:
        await listener.aclose()
        await memory.aclose()
        await store.close()


def main(argv: list[str]) -> None:
    url, index_dir, person = argv[1], Path(argv[2]), int(argv[3])
    asyncio.run(_finder(url, index_dir, person))


if __name__ == "__main__":
    main(sys.argv)

"""Webchat pages against a cluster of gateway processes: for ``bench cluster`` and tests.

``cluster`` starts the processes on a new database of a PostgreSQL server.

A ``Page`` is one browser tab of a conversation: a WebSocket to one process,
every frame it gets kept with its arrival time. When its process dies, it
reconnects to another live one with ``?after=`` its last seen message and
resends its unanswered message with the same ``client_id`` (the page's own
resend rule, channels/webchat.py), as web/static's page does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from gateway.bench.gateway_bench import GatewayProcess, bench_config_text, free_port
from gateway.store import Store
from gateway.testing.postgres import create_database

PREFIX = "You said: "
# Several processes load their models at once on a shared machine.
START_TIMEOUT_S = 300.0


def cluster_config_text(
    data_dir: Path,
    port: int,
    url: str,
    *,
    lease_s: float,
    stages: str = "core",
    delay_s: float = 0.0,
    turns: int = 5,
) -> str:
    """A gateway's config in a cluster: the gateway bench's, on the shared PostgreSQL."""
    text = bench_config_text(data_dir, port, turns, stages)
    store = f"[store]\nurl = {json.dumps(url)}\ncluster = true\nlease_s = {lease_s}\n"
    text = text.replace("[store]\n", store, 1)
    return text.replace("delay_s = 0.0", f"delay_s = {delay_s}", 1)


@dataclass
class Frame:
    at: float
    body: dict[str, Any]


@dataclass
class Page:
    """One tab of ``session``; ``urls()`` gives the live processes, first choice first."""

    session: str
    urls: Callable[[], list[str]]
    client: aiohttp.ClientSession
    frames: list[Frame] = field(default_factory=list)
    last_seen: int = 0
    reconnects: int = 0
    _ws: aiohttp.ClientWebSocketResponse | None = None
    _reader: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _closed: asyncio.Event = field(default_factory=asyncio.Event)
    _stopping: bool = False

    async def open(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for base in self.urls():
                url = f"{base}/ws?session={self.session}&after={self.last_seen}"
                try:
                    self._ws = await self.client.ws_connect(url, heartbeat=None)
                except (aiohttp.ClientError, OSError):
                    continue
                self._closed.clear()
                self._reader = asyncio.create_task(self._read(self._ws))
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.session}: no process took the page")
            await asyncio.sleep(0.2)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            async for message in ws:
                if message.type is not aiohttp.WSMsgType.TEXT:
                    break
                body = json.loads(message.data)
                self.frames.append(Frame(time.monotonic(), body))
                if body.get("type") == "history":
                    for entry in body.get("messages", []):
                        self.last_seen = max(self.last_seen, int(entry["message_id"]))
                elif body.get("type") in ("message", "reply") and body.get("message_id"):
                    self.last_seen = max(self.last_seen, int(body["message_id"]))
                self._changed.set()
        finally:
            self._closed.set()
            self._changed.set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def reconnect(self) -> None:
        await self.close()
        self._stopping = False
        self.reconnects += 1
        await self.open()

    async def send(self, text: str, client_id: str) -> None:
        assert self._ws is not None
        with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
            await self._ws.send_json({"type": "message", "text": text, "client_id": client_id})

    def reply_to(self, text: str) -> tuple[int, str, float] | None:
        """The reply to ``text`` this page has seen (live or in a history): its id,
        text and arrival time."""
        wanted = PREFIX + text
        for frame in self.frames:
            body = frame.body
            if body.get("type") == "reply" and body.get("text") == wanted:
                return int(body["message_id"]), wanted, frame.at
            if body.get("type") == "history":
                for entry in body.get("messages", []):
                    if entry.get("role") == "assistant" and entry.get("text") == wanted:
                        return int(entry["message_id"]), wanted, frame.at
        return None

    async def ask(self, text: str, client_id: str, timeout: float) -> tuple[int, float]:
        """Send, and wait for the reply; across process deaths (reconnect and resend)."""
        deadline = time.monotonic() + timeout
        await self.send(text, client_id)
        while True:
            found = self.reply_to(text)
            if found is not None:
                return found[0], found[2]
            if self.closed:
                await self.reconnect()
                await self.send(text, client_id)
                continue
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{client_id}: no reply in {timeout:g} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))

    async def watch_until(self, texts: list[str], timeout: float) -> None:
        """A page that only watches: wait until it has seen the replies to ``texts``."""
        deadline = time.monotonic() + timeout
        while any(self.reply_to(text) is None for text in texts):
            if self.closed:
                await self.reconnect()
                continue
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.session}: watched replies missing")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))

    def live_replies(self) -> list[tuple[int, int]]:
        """(reply_to, reply message id) of every ``reply`` frame, in arrival order."""
        return [
            (int(f.body["reply_to"]), int(f.body["message_id"]))
            for f in self.frames
            if f.body.get("type") == "reply"
        ]

    async def close(self) -> None:
        self._stopping = True
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        self._ws, self._reader = None, None


@dataclass
class Cluster:
    """Gateway processes on one database; ``dead`` holds the indexes of those killed."""

    url: str
    processes: list[GatewayProcess]
    dead: set[int] = field(default_factory=set)

    def urls(self, first: int) -> list[str]:
        """The live processes' URLs, starting at ``first``'s."""
        count = len(self.processes)
        order = [(first + k) % count for k in range(count)]
        return [self.processes[i].base_url for i in order if i not in self.dead]

    def chooser(self, first: int) -> Callable[[], list[str]]:
        return lambda: self.urls(first % len(self.processes))


@contextlib.asynccontextmanager
async def cluster(
    server: str, root: Path, count: int, *, stages: str, lease_s: float, turns: int
) -> AsyncIterator[Cluster]:
    """``count`` gateways in cluster mode on a new database of ``server``, each with its
    own port, config and data folder under ``root``; stopped when the block ends."""
    url = await create_database(server)
    async with Store(url):
        pass  # migrated once, before the processes start
    processes = []
    for index in range(count):
        port = free_port()
        config = root / f"{uuid.uuid4().hex[:6]}-gw{index}.toml"
        config.write_text(
            cluster_config_text(
                root / f"data-{config.stem}", port, url, lease_s=lease_s, stages=stages, turns=turns
            )
        )
        processes.append(GatewayProcess(config, port, root / f"{config.stem}.log"))
    try:
        await asyncio.gather(*(process.start(START_TIMEOUT_S) for process in processes))
        yield Cluster(url, processes)
    finally:
        await asyncio.gather(*(process.stop() for process in processes))


def message_text(session: str, index: int) -> str:
    """The ``index``-th message a bench page of ``session`` sends."""
    return f"message {index} of {session}"

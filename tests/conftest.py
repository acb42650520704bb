"""Shared fixtures: a config in a temp folder, the real app on a loopback port,
and a guard that keeps tests off every network but loopback."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.app import GATEWAY, Gateway, create_app
from gateway.brains.base import Brain
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config, load_config

_real_connect = socket.socket.connect


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    if self.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0]
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise OSError(f"tests may only connect to loopback, not {host}")
    return _real_connect(self, address)


@pytest.fixture(autouse=True, scope="session")
def _loopback_only() -> Iterator[None]:
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    yield
    socket.socket.connect = _real_connect  # type: ignore[method-assign]


def make_config(tmp_path: Path, **sections: dict[str, Any]) -> Config:
    """A config rooted in ``tmp_path``, with no environment leaking in."""
    overrides: dict[str, dict[str, Any]] = {
        "store": {"data_dir": str(tmp_path / "data")},
        # The memory layer runs on full text unless a test passes an embedder to
        # create_app (tests/test_memory_*.py share one loaded model per session).
        "memory": {"embedder": "none"},
    }
    for name, values in sections.items():
        overrides.setdefault(name, {}).update(values)
    empty = tmp_path / "agentgw.toml"
    empty.touch()
    return load_config(empty, env={}, overrides=overrides)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path)


@pytest.fixture
def brain() -> ScriptedBrain:
    return ScriptedBrain()


class RunningGateway:
    """The real app served on a loopback port, with helpers to talk to it."""

    def __init__(self, server: TestServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    @property
    def app(self) -> web.Application:
        return self.server.app  # type: ignore[return-value]

    @property
    def gateway(self) -> Gateway:
        return self.app[GATEWAY]

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))

    async def ws(
        self, session_id: str = "test-session-1", after: int = 0
    ) -> aiohttp.ClientWebSocketResponse:
        return await self.session.ws_connect(self.url(f"/ws?session={session_id}&after={after}"))


async def start_gateway(
    config: Config, brain: Brain | None
) -> tuple[TestServer, aiohttp.ClientSession]:
    server = TestServer(create_app(config, brain=brain), host="127.0.0.1")
    await server.start_server()
    return server, aiohttp.ClientSession()


@pytest.fixture
async def running(config: Config, brain: ScriptedBrain) -> AsyncIterator[RunningGateway]:
    server, session = await start_gateway(config, brain)
    try:
        yield RunningGateway(server, session)
    finally:
        await session.close()
        await server.close()

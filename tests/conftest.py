"""Shared fixtures: a config in a temp folder, the real app on a loopback port,
and a guard that keeps tests off every network but loopback."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from alembic import command
from playwright.async_api import Browser, Page, async_playwright, expect
from sqlalchemy import Connection, create_engine, text

from gateway.app import create_app
from gateway.brains.base import Brain
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config, load_config
from gateway.runtime import GATEWAY, Gateway
from gateway.store import Store
from gateway.store.db import alembic_config
from tests.browser_socket import BrowserLikeSocket

_real_connect = socket.socket.connect

CHROMIUM = Path("/usr/bin/chromium")
# The flags ENVIRONMENT.md lists for Debian's Chromium on these machines.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Screenshots the browser tests save (CI keeps the folder as an artifact).
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
requires_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian chromium is not installed"
)


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
        # Days and dates in UTC whatever the machine's zone (tests of zones set their own).
        "agent": {"timezone": "UTC"},
    }
    for name, values in sections.items():
        overrides.setdefault(name, {}).update(values)
    empty = tmp_path / "agentgw.toml"
    empty.touch()
    return load_config(empty, env={}, overrides=overrides)


@contextmanager
def database_at(path: Path, revision: str) -> Iterator[Connection]:
    """A SQLite file migrated to an older ``revision``, with one person (id 1, Sam):
    fill it through the connection, then open it with ``Store`` to migrate the rest."""
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection), revision)
            connection.execute(
                text(
                    "INSERT INTO people (id, display_name, created_at) "
                    "VALUES (1, 'Sam', '2024-01-01 00:00:00')"
                )
            )
            yield connection
    finally:
        engine.dispose()


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path)


@pytest.fixture
async def store(config: Config) -> AsyncIterator[Store]:
    """The store of ``config``, migrated and open."""
    async with Store(config.database_url) as opened:
        yield opened


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
    # Serving starts before the models are loaded; tests start from a ready gateway
    # (tests/test_startup.py covers the time before).
    await server.app[GATEWAY].ready.wait()
    # Sockets answer the server's heartbeat while a test awaits other work, as a
    # browser's do (tests/browser_socket.py).
    return server, aiohttp.ClientSession(ws_response_class=BrowserLikeSocket)


@pytest.fixture
async def running(config: Config, brain: ScriptedBrain) -> AsyncIterator[RunningGateway]:
    server, session = await start_gateway(config, brain)
    try:
        yield RunningGateway(server, session)
    finally:
        await session.close()
        await server.close()


# playwright's assertions wait 5 s by default; a turn on a loaded 2-core CI machine
# (the suite beside other work) can take longer. They return as soon as they hold,
# so only a failing assertion waits the longer time.
expect.set_options(timeout=15_000)


@pytest.fixture
def browser_args() -> list[str]:
    """Extra Chromium flags; a test module overrides this (a fake microphone, say)."""
    return []


@pytest.fixture
async def browser(browser_args: list[str]) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=[*CHROMIUM_ARGS, *browser_args]
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A phone-sized page that fails the test on any script error it logs."""
    context = await browser.new_context(viewport={"width": 420, "height": 760})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: errors.append(msg.text) if msg.type == "error" else None,
    )
    # Whatever its level: anything the Content-Security-Policy refused (web/guard.py).
    refused = csp_reports(page)
    try:
        yield page
        assert refused == []
        # Refused reconnects are expected noise in the console; script errors are not.
        assert [e for e in errors if "WebSocket" not in e and "503" not in e] == []
    finally:
        await context.close()


def csp_reports(page: Page) -> list[str]:
    """Console messages, of any level, about something the Content-Security-Policy refused."""
    reports: list[str] = []
    page.on(
        "console",
        lambda msg: reports.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    return reports


async def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def espeak_wav(text: str, folder: Path) -> Path:
    """``text`` spoken by espeak-ng into a WAV file (22,050 Hz mono, 16-bit)."""
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is needed for the voice tests: apt-get install -y espeak-ng")
    path = folder / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(path), text], check=True, timeout=30)
    return path

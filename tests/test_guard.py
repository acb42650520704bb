"""The HTTP guard (web/guard.py): host names, origins, token guesses, headers, the log.

Every test runs a real server on loopback; foreign names reach it through the
Host header, as they do after DNS rebinding (evil.example resolving to 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from tests.conftest import make_config
from web import guard
from web.guard import SECURITY_HEADERS, AllowedHosts, GuessLimit

TOKEN = "guard-test-token-0123456789"
# A state-changing route that needs no data: past the guard it is the route's own 404.
CHANGE = "/api/memory/items/999/archive"


async def serve(config: Config, **runner: Any) -> TestServer:
    server = TestServer(create_app(config, brain=ScriptedBrain()), host="127.0.0.1")
    await server.start_server(**runner)
    return server


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[TestServer]:
    server = await serve(
        make_config(tmp_path, voice={"enabled": False}, server={"allowed_hosts": ["proxy.lan"]})
    )
    try:
        yield server
    finally:
        await server.close()


async def call(
    server: TestServer, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, str, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, str(server.make_url(path)), headers=headers or {}) as response,
    ):
        return response.status, await response.text(), dict(response.headers)


def here(server: TestServer) -> str:
    return f"127.0.0.1:{server.port}"


# -- host names -------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/panel", "/api/conversations/1", "/api/overview"])
async def test_a_foreign_host_name_is_not_served(local: TestServer, path: str) -> None:
    status, body, _ = await call(local, "GET", path, {"Host": f"evil.example:{local.port}"})
    assert status == 421
    assert "server.allowed_hosts" in body


async def test_rebinding_post_with_matching_foreign_host_and_origin_is_refused(
    local: TestServer,
) -> None:
    evil = f"evil.example:{local.port}"
    status, _, _ = await call(local, "POST", CHANGE, {"Host": evil, "Origin": f"http://{evil}"})
    assert status == 421


@pytest.mark.parametrize(
    "host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "LOCALHOST", "proxy.lan:8443"]
)
async def test_loopback_and_listed_names_are_served(local: TestServer, host: str) -> None:
    status, _, _ = await call(local, "GET", "/api/overview", {"Host": host.format(port=local.port)})
    assert status == 200


async def test_healthz_answers_any_host_name(local: TestServer) -> None:
    status, _, _ = await call(local, "GET", "/healthz", {"Host": "probe.internal"})
    assert status == 200


def test_the_bound_host_is_allowed_unless_a_wildcard() -> None:
    assert AllowedHosts((), "gateway.lan").allows("gateway.lan:8080")
    assert AllowedHosts((), "192.168.1.20").allows("192.168.1.20")
    assert AllowedHosts((), "fd00::5").allows("[fd00::5]:8080")
    assert not AllowedHosts((), "0.0.0.0").allows("192.168.1.20:8080")
    assert not AllowedHosts((), "::").allows("example.org")
    assert AllowedHosts(("example.org:443",), "::").allows("example.org:443")
    assert not AllowedHosts(("example.org:443",), "::").allows("example.org:8080")
    assert AllowedHosts(("*",), "::").allows("anything.example")
    for bad in ("", "a b", "evil.example/x", "user@127.0.0.1", "127.0.0.1:notaport"):
        assert not AllowedHosts((), "127.0.0.1").allows(bad)


# -- origins ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "http://127.0.0.1:1",  # another local app is another site
        "http://localhost.evil.example",
        "null",
        "file://",
        "chrome-extension://abcdef",
    ],
)
async def test_foreign_origins_cannot_change_anything(local: TestServer, origin: str) -> None:
    status, body, _ = await call(local, "POST", CHANGE, {"Origin": origin})
    assert status == 403
    assert "cross-site" in body
    status, _, _ = await call(local, "DELETE", "/api/memory/items/999", {"Origin": origin})
    assert status == 403


async def test_same_origin_listed_origin_and_non_browsers_pass(local: TestServer) -> None:
    for headers in (
        {"Origin": f"http://{here(local)}"},
        {"Origin": "https://proxy.lan"},
        {"Referer": f"http://{here(local)}/panel/memory"},
        {},  # curl: no Origin, no Referer
        # Referrer-Policy: no-referrer makes a same-origin POST say "null"; the
        # browser's own Sec-Fetch-Site tells it from a sandboxed foreign page.
        {"Origin": "null", "Sec-Fetch-Site": "same-origin"},
    ):
        status, _, _ = await call(local, "POST", CHANGE, headers)
        assert status == 404, headers
    status, _, _ = await call(
        local, "POST", CHANGE, {"Origin": "null", "Sec-Fetch-Site": "cross-site"}
    )
    assert status == 403


async def test_the_websocket_upgrade_obeys_the_origin_rule(local: TestServer) -> None:
    url = str(local.make_url("/ws?session=guard-test"))
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(url, origin="http://evil.example")
        assert refused.value.status == 403
        ws = await session.ws_connect(url, origin=f"http://{here(local)}")
        try:
            assert (await ws.receive_json(timeout=5))["type"] == "hello"
        finally:
            await ws.close()


async def test_voice_upload_obeys_the_origin_rule(local: TestServer) -> None:
    status, _, _ = await call(local, "POST", "/api/voice", {"Origin": "http://evil.example"})
    assert status == 403


# -- token guesses ----------------------------------------------------------------


class FakeTime:
    now = 1000.0

    @classmethod
    def monotonic(cls) -> float:
        return cls.now


def test_guess_limit_doubles_the_wait_up_to_the_cap_and_forgets_on_success() -> None:
    clock = FakeTime()
    limit = GuessLimit(2, 10.0, clock=clock.monotonic, max_addresses=2)
    assert [limit.failed("a") for _ in range(7)] == [0, 0, 1, 2, 4, 8, 10]
    assert limit.wait_s("a") == 10.0
    assert limit.wait_s("b") == 0.0
    limit.succeeded("a")
    assert limit.wait_s("a") == 0.0
    assert limit.failed("a") == 0  # counting starts again
    limit.failed("b")
    limit.failed("c")  # over max_addresses: the longest quiet ("a") goes
    assert set(limit._records) == {"b", "c"}


async def test_wrong_tokens_earn_a_wait_that_even_the_right_token_must_sit_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guard, "time", FakeTime)
    FakeTime.now = 1000.0
    config = make_config(
        tmp_path,
        voice={"enabled": False},
        server={"host": "0.0.0.0", "access_token": TOKEN, "auth_free_failures": 2},
    )
    server = await serve(config)
    try:
        wrong = {"Authorization": "Bearer wrong-token-guess-0000"}
        right = {"Authorization": f"Bearer {TOKEN}"}
        assert (await call(server, "GET", "/api/overview", wrong))[0] == 401
        assert (await call(server, "GET", "/api/overview", wrong))[0] == 401
        status, _, headers = await call(server, "GET", "/api/overview", wrong)
        assert (status, headers["Retry-After"]) == (401, "1")
        status, body, headers = await call(server, "GET", "/api/overview", right)
        assert (status, headers["Retry-After"]) == (429, "1")
        assert "too many wrong access tokens" in body
        FakeTime.now += 1.5
        status, _, headers = await call(server, "GET", "/api/overview", wrong)
        assert (status, headers["Retry-After"]) == (401, "2")
        FakeTime.now += 2.5
        assert (await call(server, "GET", "/api/overview", right))[0] == 200
        # The right token cleared the record: two free guesses again.
        assert (await call(server, "GET", "/api/overview", wrong))[0] == 401
        assert "Retry-After" not in (await call(server, "GET", "/api/overview", wrong))[2]
    finally:
        await server.close()


# -- headers and the access log ---------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/panel", "/panel/memory", "/static/chat.js", "/api/overview", "/nothing"]
)
async def test_every_response_carries_the_security_headers(local: TestServer, path: str) -> None:
    _, _, headers = await call(local, "GET", path)
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name) == value, (path, name)
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp


async def test_refusals_carry_the_security_headers_too(local: TestServer) -> None:
    _, _, headers = await call(local, "GET", "/", {"Host": "evil.example"})
    assert headers.get("X-Frame-Options") == "DENY"


async def test_tokens_in_urls_are_redacted_from_the_access_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, voice={"enabled": False})
    server = await serve(config, access_log_class=guard.ACCESS_LOG_CLASS)
    try:
        with caplog.at_level(logging.INFO, logger="aiohttp.access"):
            await call(
                server,
                "GET",
                f"/?lang=en&token={TOKEN}",
                {"Referer": f"http://{here(server)}/?access_token={TOKEN}&x=1"},
            )
    finally:
        await server.close()
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "aiohttp.access")
    assert "GET /?lang=en&token=[redacted]" in logged
    assert "access_token=[redacted]&x=1" in logged
    assert TOKEN not in logged


@pytest.mark.parametrize(
    "path",
    [
        "/static/../guard.py",
        "/static/%2e%2e/guard.py",
        "/static/..%2fguard.py",
        "/static/%2e%2e%2f%2e%2e%2fgateway/config.py",
        "/static//etc/passwd",
        "/static/..\\guard.py",
    ],
)
async def test_static_files_do_not_reach_outside_their_folder(local: TestServer, path: str) -> None:
    """What held in issue 26's review, kept: web/guard.py is one folder up from static/.

    Sent on a raw socket: an HTTP client would tidy the ".." away before sending."""
    assert (await raw_get(local, "/static/chat.js")).startswith("HTTP/1.1 200")
    answer = await raw_get(local, path)
    status = int(answer.split(" ", 2)[1])
    assert status in (400, 403, 404), (path, answer[:200])
    assert "import" not in answer
    assert "root:" not in answer


async def raw_get(server: TestServer, path: str) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {here(server)}\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        return (await asyncio.wait_for(reader.read(), 10)).decode(errors="replace")
    finally:
        writer.close()


def test_a_wildcard_bind_without_allowed_hosts_says_what_is_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, server={"host": "0.0.0.0", "access_token": TOKEN})
    with caplog.at_level(logging.WARNING, logger="web.guard"):
        create_app(config, brain=ScriptedBrain())
    assert "server.allowed_hosts is empty" in caplog.text
    caplog.clear()
    listed = make_config(
        tmp_path, server={"host": "0.0.0.0", "access_token": TOKEN, "allowed_hosts": ["gw.lan"]}
    )
    with caplog.at_level(logging.WARNING, logger="web.guard"):
        create_app(listed, brain=ScriptedBrain())
    assert "allowed_hosts" not in caplog.text

"""Access rules: open on loopback; bound elsewhere, everything but /healthz needs the token.

The middleware decides by the configured host, so these tests configure
0.0.0.0 and still serve the app on 127.0.0.1 (tests only reach loopback).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from tests.conftest import make_config
from web.guard import TOKEN_COOKIE

TOKEN = "correct-horse-battery-staple"
SESSION = "access-test-session"
# Not served yet (later issues add the panel); the token is still checked first.
# Served paths answer 200 past the middleware; the rest are the route's own 404.
GUARDED_PATHS = {
    "/": 200,
    "/panel": 200,
    "/panel/memory": 200,
    "/api/overview": 200,
    "/api/voice/audio/nothing.ogg": 404,
    "/panel/timeline": 404,
}


@pytest.fixture
def remote_config(tmp_path: Path) -> Config:
    return make_config(
        tmp_path,
        server={"host": "0.0.0.0", "access_token": TOKEN},
        voice={"enabled": False},
    )


@pytest.fixture
async def remote(remote_config: Config) -> AsyncIterator[TestServer]:
    server = TestServer(create_app(remote_config, brain=ScriptedBrain()), host="127.0.0.1")
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    # unsafe=True: keep cookies for an IP-address host such as 127.0.0.1.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


def url(server: TestServer, path: str) -> str:
    return str(server.make_url(path))


async def status_of(
    client: aiohttp.ClientSession, server: TestServer, path: str, **kwargs: object
) -> int:
    async with client.get(url(server, path), **kwargs) as response:  # type: ignore[arg-type]
        await response.read()
        return response.status


async def ws_opens(client: aiohttp.ClientSession, server: TestServer, query: str = "") -> bool:
    """True when /ws accepts the connection and says hello; False on a 401."""
    try:
        ws = await client.ws_connect(url(server, f"/ws?session={SESSION}{query}"))
    except aiohttp.WSServerHandshakeError as exc:
        if exc.status != 401:
            raise
        return False
    try:
        hello = await ws.receive_json(timeout=5)
        assert hello["type"] == "hello"
        return True
    finally:
        await ws.close()


@pytest.mark.parametrize("path", GUARDED_PATHS)
async def test_remote_paths_refuse_requests_without_the_token(
    remote: TestServer, client: aiohttp.ClientSession, path: str
) -> None:
    assert await status_of(client, remote, path) == 401


@pytest.mark.parametrize("path", GUARDED_PATHS)
async def test_wrong_tokens_are_refused(
    remote: TestServer, client: aiohttp.ClientSession, path: str
) -> None:
    assert await status_of(client, remote, path, headers={"Authorization": "Bearer nope"}) == 401
    assert await status_of(client, remote, f"{path}?token=nope") == 401
    client.cookie_jar.update_cookies({TOKEN_COOKIE: "nope"}, remote.make_url("/"))
    assert await status_of(client, remote, path) == 401


@pytest.mark.parametrize("path", GUARDED_PATHS)
async def test_bearer_header_opens_every_path(
    remote: TestServer, client: aiohttp.ClientSession, path: str
) -> None:
    status = await status_of(client, remote, path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == GUARDED_PATHS[path]


async def test_post_to_the_api_needs_the_token(
    remote: TestServer, client: aiohttp.ClientSession
) -> None:
    async with client.post(url(remote, "/api/voice"), data=b"x") as response:
        assert response.status == 401
    async with client.post(
        url(remote, "/api/voice"), data=b"x", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as response:
        assert response.status != 401


async def test_query_token_opens_the_page_and_sets_a_cookie_for_later_requests(
    remote: TestServer, client: aiohttp.ClientSession
) -> None:
    async with client.get(url(remote, f"/?token={TOKEN}")) as response:
        assert response.status == 200
        assert "<html" in (await response.text()).lower()
        cookie = response.cookies[TOKEN_COOKIE]
        assert cookie.value == TOKEN
        assert cookie["httponly"]
    # The page's own requests carry only the cookie.
    assert await status_of(client, remote, "/") == 200
    assert await ws_opens(client, remote)


async def test_websocket_needs_the_token(remote: TestServer, client: aiohttp.ClientSession) -> None:
    assert not await ws_opens(client, remote)
    assert not await ws_opens(client, remote, "&token=nope")
    assert await ws_opens(client, remote, f"&token={TOKEN}")


async def test_websocket_with_bearer_header_holds_a_conversation(
    remote: TestServer, client: aiohttp.ClientSession
) -> None:
    ws = await client.ws_connect(
        url(remote, f"/ws?session={SESSION}"), headers={"Authorization": f"Bearer {TOKEN}"}
    )
    try:
        assert (await ws.receive_json(timeout=5))["type"] == "hello"
        assert (await ws.receive_json(timeout=5))["type"] == "history"
        await ws.send_json({"type": "message", "text": "let me in", "client_id": "a-1"})
        while (frame := await ws.receive_json(timeout=10))["type"] != "reply":
            assert frame["type"] in ("ack", "message", "delta")
        assert frame["text"] == "You said: let me in"
    finally:
        await ws.close()


async def test_healthz_stays_open(remote: TestServer, client: aiohttp.ClientSession) -> None:
    async with client.get(url(remote, "/healthz")) as response:
        assert response.status == 200
        body = await response.json()
    assert body["status"] == "ok"
    # Full text only here (no embedder), and nothing waits for vectors.
    assert body["memory"] == {
        "dense": False,
        "people_being_embedded": 0,
        "items_embedded_since_start": 0,
    }


async def test_loopback_config_is_open_without_a_token(
    tmp_path: Path, client: aiohttp.ClientSession
) -> None:
    config = make_config(tmp_path, voice={"enabled": False})
    assert config.is_loopback
    server = TestServer(create_app(config, brain=ScriptedBrain()), host="127.0.0.1")
    await server.start_server()
    try:
        assert await status_of(client, server, "/") == 200
        assert await status_of(client, server, "/healthz") == 200
        assert await status_of(client, server, "/api/voice/audio/nothing.ogg") == 404
        assert await ws_opens(client, server)
    finally:
        await server.close()


async def test_loopback_config_with_a_token_stays_open(
    tmp_path: Path, client: aiohttp.ClientSession
) -> None:
    """A token in a loopback config is not demanded: loopback is trusted."""
    config = make_config(tmp_path, server={"access_token": TOKEN}, voice={"enabled": False})
    server = TestServer(create_app(config, brain=ScriptedBrain()), host="127.0.0.1")
    await server.start_server()
    try:
        assert await status_of(client, server, "/") == 200
        assert await ws_opens(client, server)
    finally:
        await server.close()

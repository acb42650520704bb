"""The tests' webchat sockets outlive the server's heartbeat while the test is busy.

The server's heartbeat is shortened here (30 s in production) so the test is quick:
a socket that nobody reads for several heartbeats must still carry the next turn,
as a browser's does (tests/browser_socket.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from gateway.brains.scripted import ScriptedBrain
from tests.conftest import RunningGateway
from tests.test_lessons_turns import session
from tests.test_persona_loop import say

HEARTBEAT_S = 0.2


class QuickHeartbeat(web.WebSocketResponse):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "heartbeat": HEARTBEAT_S})


async def test_an_unread_socket_survives_the_servers_heartbeat(
    running: RunningGateway, brain: ScriptedBrain, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("channels.webchat.web.WebSocketResponse", QuickHeartbeat)
    ws = await session(running, "heartbeat-page")
    # Ten pings go unanswered by a client that only answers inside receive().
    await asyncio.sleep(10 * HEARTBEAT_S)
    assert not ws.closed
    brain.script = ["Still here."]
    assert await say(ws, "Are you there?", "hb1") == "Still here."
    await ws.close()

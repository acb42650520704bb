"""A test client websocket that answers the server's heartbeat like a browser does.

The webchat server pings an idle socket every 30 s and closes it when no pong comes
within 15 s (``channels/webchat.py``, ``heartbeat=30.0``). A browser answers pings
in its network stack whatever the page's script is doing. aiohttp's client answers
a ping only inside ``receive()``, so a test that holds a socket while it awaits
something else for over 45 s — ``agentgw`` CLI subprocesses on a loaded machine
take 15-30 s each — had its socket closed under it, and the next ``send_json``
failed with "Cannot write to closing transport". This class reads the socket in a
background task from the moment it opens (pongs go out as pings arrive) and hands
the frames to ``receive()`` in order, so the test sees the same frames as before.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp import WSMsgType

# Frames after which the socket delivers nothing more.
_FINAL = {WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR}


class BrowserLikeSocket(aiohttp.ClientWebSocketResponse):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inbox: asyncio.Queue[aiohttp.WSMessage] = asyncio.Queue()
        self._pump = asyncio.get_running_loop().create_task(self._read_ahead())

    async def _read_ahead(self) -> None:
        while True:
            # The parent's receive() answers pings and handles a close frame.
            message = await super().receive()
            self._inbox.put_nowait(message)
            if message.type in _FINAL:
                return

    async def receive(self, timeout: float | None = None) -> aiohttp.WSMessage:
        if self._pump.done() and self._inbox.empty():
            # Closed: the parent answers with its closed message (it no longer reads).
            return await super().receive(timeout)
        # A timeout here leaves the socket open: only this wait is abandoned.
        return await asyncio.wait_for(self._inbox.get(), timeout)

"""The webchat channel: the WebSocket at ``/ws``.

Protocol (JSON text frames):

client → server
    {"type": "message", "text": str, "client_id": str}
    {"type": "ping"}
server → client
    {"type": "hello", "conversation_id", "agent", "brain", "limits": {...}}
    {"type": "history", "messages": [...], "in_flight": {...} | null}
    {"type": "ack", "client_id", "message_id", "duplicate": bool}
    {"type": "message", "message_id", "client_id", "text", "created_at"}   (any open page)
    {"type": "delta", "text", "reply_to"}
    {"type": "reply", "message_id", "reply_to", "text", "created_at"}
    {"type": "error", "code", "message", "reply_to"?, "client_id"?}
    {"type": "pong"}

The page is identified by ``?session=<id>`` (a random id the page keeps in
localStorage); on reconnect it passes ``&after=<last message id>`` and gets
only what it missed. Bad frames get an ``error`` frame; the socket stays open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from channels.base import Inbound, TurnEvent, TurnEventKind
from gateway.errors import AgentGWError, FrameTooLarge, InputError, MalformedFrame, RateLimited
from gateway.hub import ConversationHub
from gateway.router import Router
from gateway.store.repo import Address, HistoryEntry, StoredInbound, conversation_history

log = logging.getLogger(__name__)

CHANNEL = "webchat"
_SESSION = re.compile(r"^[A-Za-z0-9_-]{8,100}$")
_CLIENT_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")


@dataclass(frozen=True)
class WebchatLimits:
    max_frame_bytes: int
    max_message_chars: int
    rate_per_minute: int
    history_on_connect: int


class RateWindow:
    """At most ``limit`` events in any 60-second window."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._times: deque[float] = deque()

    def allow(self) -> bool:
        now = self._clock()
        while self._times and now - self._times[0] >= 60.0:
            self._times.popleft()
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        return True


def parse_frame(data: str, limits: WebchatLimits) -> dict[str, Any]:
    """Validate one client frame; raises an ``InputError`` saying what is wrong."""
    if len(data.encode("utf-8")) > limits.max_frame_bytes:
        raise FrameTooLarge(f"frame is larger than {limits.max_frame_bytes} bytes")
    try:
        frame = json.loads(data)
    except json.JSONDecodeError as exc:
        raise MalformedFrame(f"frame is not JSON: {exc.msg}") from exc
    if not isinstance(frame, dict):
        raise MalformedFrame("frame must be a JSON object")
    kind = frame.get("type")
    if kind == "ping":
        return frame
    if kind != "message":
        raise MalformedFrame(f"unknown frame type {kind!r}")
    text = frame.get("text")
    if not isinstance(text, str) or not text.strip():
        raise MalformedFrame("message.text must be a non-empty string")
    if len(text) > limits.max_message_chars:
        raise FrameTooLarge(f"message is longer than {limits.max_message_chars} characters")
    client_id = frame.get("client_id")
    if not isinstance(client_id, str) or not _CLIENT_ID.match(client_id):
        raise MalformedFrame("message.client_id must be a string of 1-100 letters, digits or -_.:")
    return frame


def history_frame(entry: HistoryEntry) -> dict[str, Any]:
    return {
        "message_id": entry.message_id,
        "role": entry.role.value,
        "text": entry.text,
        "channel": entry.channel,
        "created_at": entry.created_at.isoformat(),
        "client_id": entry.client_id,
        "status": entry.status.value if entry.status else None,
        "error_code": entry.error_code,
        "reply_to": entry.reply_to,
    }


def event_frame(event: TurnEvent) -> dict[str, Any]:
    created = event.created_at.isoformat() if event.created_at else None
    if event.kind is TurnEventKind.DELTA:
        return {"type": "delta", "text": event.text, "reply_to": event.message_id}
    if event.kind is TurnEventKind.REPLY:
        return {
            "type": "reply",
            "message_id": event.reply_id,
            "reply_to": event.message_id,
            "text": event.text,
            "created_at": created,
        }
    if event.kind is TurnEventKind.ERROR:
        return {
            "type": "error",
            "code": event.code,
            "message": event.text,
            "reply_to": event.message_id,
        }
    return {
        "type": "message",
        "message_id": event.message_id,
        "client_id": event.client_id,
        "text": event.text,
        "created_at": created,
    }


def error_frame(error: AgentGWError, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "code": error.code, "message": str(error), **extra}


class WebchatChannel:
    """Serves ``/ws``; tracks open sockets so shutdown can close them."""

    def __init__(
        self,
        router: Router,
        hub: ConversationHub,
        limits: WebchatLimits,
        *,
        agent_name: str,
        brain_name: str,
    ) -> None:
        self.router = router
        self.hub = hub
        self.limits = limits
        self.agent_name = agent_name
        self.brain_name = brain_name
        self._sockets: set[web.WebSocketResponse] = set()

    async def close_all(self) -> None:
        for ws in list(self._sockets):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        session = request.query.get("session", "")
        if not _SESSION.match(session):
            raise web.HTTPBadRequest(text="?session= must be 8-100 letters, digits, - or _")
        try:
            after = int(request.query.get("after", "0"))
        except ValueError as exc:
            raise web.HTTPBadRequest(text="?after= must be a message id") from exc
        # The transport limit sits well above ours, so an oversized frame gets
        # an error frame from us instead of a closed connection.
        ws = web.WebSocketResponse(
            heartbeat=30.0, max_msg_size=max(4 * self.limits.max_frame_bytes, 1 << 20)
        )
        await ws.prepare(request)
        self._sockets.add(ws)
        try:
            address = await self.router.address(CHANNEL, session)
            await self._serve(ws, address, after)
        except AgentGWError as exc:
            log.warning("webchat connection ended: %s", exc)
            if not ws.closed:
                await ws.send_json(error_frame(exc))
        finally:
            self._sockets.discard(ws)
            if not ws.closed:
                await ws.close()
        return ws

    async def _serve(self, ws: web.WebSocketResponse, address: Address, after: int) -> None:
        send_lock = asyncio.Lock()

        async def send(frame: dict[str, Any]) -> None:
            if ws.closed:
                return
            async with send_lock:
                await ws.send_json(frame)

        async def on_event(event: TurnEvent) -> None:
            await send(event_frame(event))

        unsubscribe = self.hub.subscribe(address.conversation_id, on_event)
        try:
            await send(
                {
                    "type": "hello",
                    "conversation_id": address.conversation_id,
                    "agent": self.agent_name,
                    "brain": self.brain_name,
                    "limits": {
                        "max_message_chars": self.limits.max_message_chars,
                        "rate_per_minute": self.limits.rate_per_minute,
                    },
                }
            )
            entries = await conversation_history(
                self.router.store,
                address.conversation_id,
                after_id=after,
                limit=self.limits.history_on_connect,
            )
            flight = self.hub.in_flight(address.conversation_id)
            await send(
                {
                    "type": "history",
                    "messages": [history_frame(e) for e in entries],
                    "in_flight": (
                        {"reply_to": flight.message_id, "text": flight.text} if flight else None
                    ),
                }
            )
            rate = RateWindow(self.limits.rate_per_minute)
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    await self._on_text(msg.data, address, rate, send)
                elif msg.type is WSMsgType.BINARY:
                    await send(error_frame(MalformedFrame("binary frames are not accepted here")))
                elif msg.type is WSMsgType.ERROR:
                    log.info("webchat socket error: %s", ws.exception())
        finally:
            unsubscribe()

    async def _on_text(
        self,
        data: str,
        address: Address,
        rate: RateWindow,
        send: Callable[[dict[str, Any]], Any],
    ) -> None:
        try:
            frame = parse_frame(data, self.limits)
        except InputError as exc:
            await send(error_frame(exc))
            return
        if frame["type"] == "ping":
            await send({"type": "pong"})
            return
        client_id = frame["client_id"]
        if not rate.allow():
            await send(
                error_frame(
                    RateLimited(f"more than {self.limits.rate_per_minute} messages a minute"),
                    client_id=client_id,
                )
            )
            return
        inbound = Inbound(
            channel=CHANNEL,
            sender="",
            text=frame["text"],
            received_at=datetime.now(UTC),
            client_id=client_id,
        )
        try:
            stored = await self.router.accept(inbound, address)
        except AgentGWError as exc:
            await send(error_frame(exc, client_id=client_id))
            return
        await send(
            {
                "type": "ack",
                "client_id": client_id,
                "message_id": stored.message_id,
                "duplicate": stored.duplicate,
            }
        )
        if stored.duplicate:
            await self._replay(stored, send)

    async def _replay(self, stored: StoredInbound, send: Callable[[dict[str, Any]], Any]) -> None:
        """A resent message: say again what became of it, without running it twice."""
        if stored.reply_id is not None and stored.reply_text is not None:
            await send(
                {
                    "type": "reply",
                    "message_id": stored.reply_id,
                    "reply_to": stored.message_id,
                    "text": stored.reply_text,
                }
            )
        elif stored.error_code is not None:
            await send(
                {
                    "type": "error",
                    "code": stored.error_code,
                    "message": "this message failed earlier; it is saved",
                    "reply_to": stored.message_id,
                }
            )
        # Still running: the reply reaches this page through the hub.

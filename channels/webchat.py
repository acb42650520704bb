"""The webchat channel: the WebSocket at ``/ws``.

Protocol (JSON text frames):

client → server
    {"type": "message", "text": str, "client_id": str}
        A message. ``client_id`` is the page's own id for it: a resent
        ``client_id`` is acknowledged again (``duplicate: true``) and answered
        from the store, never processed twice.
    {"type": "retry", "message_id": int}
        Run a failed turn of this conversation again. Answered by
        ``retrying``, then the turn's ``delta``s and ``reply`` (or ``error``);
        an ``error`` with code ``not_retryable`` and ``retry_of`` when the
        message is not a failed turn of this conversation.
    {"type": "ping"}
    {"type": "link_code"}
        A one-time code that ``/link <code>`` on Telegram redeems to make
        that Telegram account and this page one person (gateway/linking.py).
server → client
    {"type": "hello", "conversation_id", "agent", "brain", "starting", "limits": {...}}
    {"type": "history", "messages": [...],
     "in_flight": {"reply_to", "text", "tool_lines"} | null}
        A reply's entry carries ``tool_lines`` ([{"text", "error"}], only when
        the model called memory tools before it), as does ``in_flight``: a
        page that reconnects shows the "looked up …" lines the live one did.
    {"type": "ack", "client_id", "message_id", "duplicate": bool}
    {"type": "message", "message_id", "client_id", "text", "created_at"}   (any open page)
    {"type": "delta", "text", "reply_to"}
    {"type": "reply", "message_id", "reply_to", "text", "created_at"}
    {"type": "retrying", "message_id"}
    {"type": "busy", "retry_after_s", "client_id", "message_id"}
        After the ``ack`` of a message that found more than
        ``server.max_queued_turns`` turns waiting: the message is stored and
        queued and WILL be answered in its turn (its ``reply`` or ``error``
        follows as usual; nothing is dropped). The page should hold off new
        messages for ``retry_after_s`` seconds (an estimate of the wait).
    {"type": "status", "state": "waiting", "reply_to", "waited_s"}
        The model has sent nothing yet ``brain.waiting_notice_s`` seconds
        after it was called (again every as many seconds, ``waited_s`` growing).
        Cleared by the first ``delta`` (or the ``reply`` / ``error``).
    {"type": "status", "state": "tool", "reply_to", "text", "error": bool}
        The model called a memory tool (issue 24): ``text`` is its small
        "looked up …" line. A status frame, so a page that knows only the
        ``waiting`` state ignores it.
    {"type": "error", "code", "message", "reply_to"?, "client_id"?, "retry_of"?,
     "partial_text"?}
        ``partial_text``: a reply that broke off (or ran out of time) after it
        had begun; the text it had streamed is kept with the failed turn (and
        in ``history`` entries as ``partial_text``) and shown as a partial
        reply; ``retry`` runs the turn again and replaces it. A model that
        answers nothing at all ends the turn with code ``empty_reply``.
    {"type": "pong"}
    {"type": "link_code", "code", "expires_at"}

An ``error`` names what it concerns: ``reply_to`` a failed turn, ``client_id``
a message that was not stored (rate limit, bad text), ``retry_of`` a refused
retry; none of them for a frame that could not be read at all.

The page is identified by ``?session=<id>`` (a random id the page keeps in
localStorage); on reconnect it passes ``&after=<message id>`` and gets only
the messages after it. ``&tz=<IANA zone>`` is the browser's time zone, kept as
the person's (gateway/zones.py); a name that is not a zone is ignored.
``history.in_flight`` is the reply being streamed right now: deltas that reach
the page before ``history`` are already part of its text.

Bad frames — not JSON, nested deeper than ``untrusted.MAX_JSON_DEPTH``, the
wrong shape, an id past the store's range, binary, or larger than
``webchat.max_frame_bytes`` — get an ``error`` frame (``malformed_frame``,
``frame_too_large``) and the socket stays open. Two exceptions close it: a
frame of more than ``TRANSPORT_FACTOR`` times the limit is not read at all
(close code 1009, message too big), and more than
``webchat.max_bad_frames_per_minute`` bad frames on one socket close it with
1008 (policy violation): a page never sends either.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from channels.new_people import NewPeopleLimit, is_loopback_peer
from gateway.errors import AgentGWError, FrameTooLarge, InputError, MalformedFrame, RateLimited
from gateway.hub import ConversationHub, InFlight
from gateway.linking import LinkCodes
from gateway.messages import Inbound, TurnEvent, TurnEventKind
from gateway.router import Router
from gateway.store.repo import Address, HistoryEntry, StoredInbound, conversation_history
from gateway.untrusted import MAX_ID, loads, store_id
from gateway.zones import PersonZones

log = logging.getLogger(__name__)

CHANNEL = "webchat"
_SESSION = re.compile(r"^[A-Za-z0-9_-]{8,100}$")
_CLIENT_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
# aiohttp's own cap is this many times ours: a frame between the two gets our
# error frame; past it aiohttp stops reading and closes with 1009. One limit to
# configure, and the memory a socket can make us hold stays bounded.
TRANSPORT_FACTOR = 16

Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class WebchatLimits:
    max_frame_bytes: int
    max_message_chars: int
    rate_per_minute: int
    history_on_connect: int
    max_bad_frames_per_minute: int


@dataclass(frozen=True)
class MessageFrame:
    text: str
    client_id: str


@dataclass(frozen=True)
class RetryFrame:
    message_id: int


@dataclass(frozen=True)
class PingFrame:
    pass


@dataclass(frozen=True)
class LinkCodeFrame:
    pass


ClientFrame = MessageFrame | RetryFrame | PingFrame | LinkCodeFrame


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


def decode_frame(data: str, limits: WebchatLimits) -> dict[str, Any]:
    """Size check and JSON decoding (depth-bounded) of one client frame."""
    if len(data.encode("utf-8")) > limits.max_frame_bytes:
        raise FrameTooLarge(f"frame is larger than {limits.max_frame_bytes} bytes")
    try:
        raw = loads(data)
    except MalformedFrame as exc:
        raise MalformedFrame(f"frame is {exc}") from exc
    if not isinstance(raw, dict):
        raise MalformedFrame("frame must be a JSON object")
    return raw


def read_frame(raw: dict[str, Any], limits: WebchatLimits) -> ClientFrame:
    """The typed frame; raises an ``InputError`` saying what is wrong."""
    kind = raw.get("type")
    if kind == "ping":
        return PingFrame()
    if kind == "link_code":
        return LinkCodeFrame()
    if kind == "retry":
        message_id = store_id(raw.get("message_id"))
        if message_id is None:
            raise MalformedFrame(f"retry.message_id must be an integer from 1 to {MAX_ID}")
        return RetryFrame(message_id)
    if kind != "message":
        raise MalformedFrame(f"unknown frame type {kind!r}")
    client_id = raw.get("client_id")
    if not isinstance(client_id, str) or not _CLIENT_ID.match(client_id):
        raise MalformedFrame("message.client_id must be a string of 1-100 letters, digits or -_.:")
    text = raw.get("text")
    if not isinstance(text, str) or not text.strip():
        raise MalformedFrame("message.text must be a non-empty string")
    if len(text) > limits.max_message_chars:
        raise FrameTooLarge(f"message is longer than {limits.max_message_chars} characters")
    return MessageFrame(text, client_id)


def _concerns(raw: dict[str, Any]) -> dict[str, Any]:
    """What an error about this frame should name, so the page can show it in place."""
    client_id = raw.get("client_id")
    if raw.get("type") == "message" and isinstance(client_id, str) and _CLIENT_ID.match(client_id):
        return {"client_id": client_id}
    message_id = store_id(raw.get("message_id"))
    if raw.get("type") == "retry" and message_id is not None:
        return {"retry_of": message_id}
    return {}


BAD_FRAMES_CLOSE = b"too many malformed frames"


class BadFrames:
    """Answers a socket's bad frames, and counts them: past ``limit`` a minute
    the socket is to be closed. Logs the first and the closing one only, so a
    hostile client cannot flood the log."""

    def __init__(self, limit: int, conversation_id: int) -> None:
        self._window = RateWindow(limit)
        self._conversation_id = conversation_id
        self._seen = 0
        self.exceeded = False

    async def answer(self, error: InputError, concerns: dict[str, Any], send: Send) -> None:
        self._seen += 1
        if self._seen == 1:
            log.info(
                "webchat: conversation %d sent a bad frame: %s (%.200s)",
                self._conversation_id,
                error.code,
                error,
            )
        if self._window.allow():
            await send(error_frame(error, **concerns))
            return
        self.exceeded = True
        log.warning(
            "webchat: conversation %d: closing a socket after %d malformed frames in a minute",
            self._conversation_id,
            self._window.limit,
        )


def history_frame(entry: HistoryEntry) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "message_id": entry.message_id,
        "role": entry.role.value,
        "text": entry.text,
        "channel": entry.channel,
        "created_at": entry.created_at.isoformat(),
        "client_id": entry.client_id,
        "status": entry.status.value if entry.status else None,
        "error_code": entry.error_code,
        "reply_to": entry.reply_to,
        "partial_text": entry.partial_text,
    }
    if entry.tool_lines:
        frame["tool_lines"] = tool_line_frames(entry.tool_lines)
    return frame


def tool_line_frames(lines: Sequence[tuple[str, bool]]) -> list[dict[str, Any]]:
    return [{"text": text, "error": failed} for text, failed in lines]


def in_flight_frame(flight: InFlight) -> dict[str, Any]:
    frame: dict[str, Any] = {"reply_to": flight.message_id, "text": flight.text}
    if flight.tools:
        frame["tool_lines"] = tool_line_frames(flight.tools)
    return frame


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
        frame: dict[str, Any] = {
            "type": "error",
            "code": event.code,
            "message": event.text,
            "reply_to": event.message_id,
        }
        if event.partial:
            frame["partial_text"] = event.partial
        return frame
    if event.kind is TurnEventKind.TOOL:
        return {
            "type": "status",
            "state": "tool",
            "reply_to": event.message_id,
            "text": event.text,
            "error": event.code == "error",
        }
    if event.kind is TurnEventKind.WAITING:
        return {
            "type": "status",
            "state": "waiting",
            "reply_to": event.message_id,
            "waited_s": event.waited_s,
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
        link_codes: LinkCodes | None = None,
        zones: PersonZones | None = None,
        new_people: NewPeopleLimit | None = None,
    ) -> None:
        self.router = router
        # New sessions per client address (channels/new_people.py); None: no limit.
        self.new_people = new_people
        # Where a page's reported zone (``?tz=``) is kept for its person.
        self.zones = zones
        self.hub = hub
        self.limits = limits
        self.agent_name = agent_name
        self.brain_name = brain_name
        self.link_codes = link_codes
        self._sockets: set[web.WebSocketResponse] = set()
        # Told the conversation when one of its pages closes (the session flush).
        self.on_page_closed: Callable[[int], None] | None = None

    @property
    def open_sockets(self) -> int:
        return len(self._sockets)

    async def close_all(self) -> None:
        for ws in list(self._sockets):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        session = request.query.get("session", "")
        if not _SESSION.match(session):
            raise web.HTTPBadRequest(text="?session= must be 8-100 letters, digits, - or _")
        try:
            after = int(request.query.get("after", "0"))
        except ValueError:
            after = -1
        if not 0 <= after <= MAX_ID:
            raise web.HTTPBadRequest(text=f"?after= must be a message id from 0 to {MAX_ID}")
        # aiohttp refuses a frame of max_msg_size bytes or more: + 1 makes
        # "more than TRANSPORT_FACTOR times the limit" exact.
        ws = web.WebSocketResponse(
            heartbeat=30.0, max_msg_size=TRANSPORT_FACTOR * self.limits.max_frame_bytes + 1
        )
        await ws.prepare(request)
        self._sockets.add(ws)
        try:
            await self._admit(request.remote, session)
            address = await self.router.address(CHANNEL, session)
            reported = request.query.get("tz", "")
            if reported and self.zones is not None:
                # The browser's own zone: "yesterday" is the person's yesterday even
                # when the gateway runs on a server in UTC. Not a zone: ignored.
                await self.zones.report(address.person_id, reported[:64])
            await self._serve(ws, address, after)
            if self.on_page_closed is not None:
                self.on_page_closed(address.conversation_id)
        except AgentGWError as exc:
            log.warning("webchat connection ended: %s", exc)
            if not ws.closed:
                await ws.send_json(error_frame(exc))
        finally:
            self._sockets.discard(ws)
            if not ws.closed:
                await ws.close()
        return ws

    async def _admit(self, remote: str | None, session: str) -> None:
        """``RateLimited`` when the session would be a new person past the address's limit."""
        limit = self.new_people
        if limit is None or is_loopback_peer(remote):
            return
        if await self.router.known(CHANNEL, session) is None and not limit.allow(remote):
            raise RateLimited(
                f"too many new conversations from {remote}: at most "
                f"{limit.per_hour:g} an hour; come back with a session you already used"
            )

    async def _serve(self, ws: web.WebSocketResponse, address: Address, after: int) -> None:
        send_lock = asyncio.Lock()

        async def send(frame: dict[str, Any]) -> None:
            if ws.closed:
                return
            async with send_lock:
                await ws.send_json(frame)

        async def on_event(event: TurnEvent) -> None:
            await send(event_frame(event))

        # Subscribe before reading the history: an event published meanwhile
        # reaches the page (possibly ahead of ``history``) instead of being lost.
        unsubscribe = self.hub.subscribe(address.conversation_id, on_event)
        try:
            await send(
                {
                    "type": "hello",
                    "conversation_id": address.conversation_id,
                    "agent": self.agent_name,
                    "brain": self.brain_name,
                    # The models are still loading: messages are stored, answered after.
                    "starting": not self.router.ready,
                    "limits": {
                        "max_message_chars": self.limits.max_message_chars,
                        "max_frame_bytes": self.limits.max_frame_bytes,
                        "rate_per_minute": self.limits.rate_per_minute,
                        "history_on_connect": self.limits.history_on_connect,
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
                    "in_flight": in_flight_frame(flight) if flight else None,
                }
            )
            rate = RateWindow(self.limits.rate_per_minute)
            bad = BadFrames(self.limits.max_bad_frames_per_minute, address.conversation_id)
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    await self._on_text(msg.data, address, rate, bad, send)
                elif msg.type is WSMsgType.BINARY:
                    binary = MalformedFrame("binary frames are not accepted here")
                    await bad.answer(binary, {}, send)
                elif msg.type is WSMsgType.ERROR:
                    log.info("webchat socket error: %s", ws.exception())
                if bad.exceeded:
                    await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=BAD_FRAMES_CLOSE)
        finally:
            unsubscribe()

    async def _on_text(
        self, data: str, address: Address, rate: RateWindow, bad: BadFrames, send: Send
    ) -> None:
        try:
            raw = decode_frame(data, self.limits)
        except InputError as exc:
            await bad.answer(exc, {}, send)
            return
        try:
            frame = read_frame(raw, self.limits)
        except InputError as exc:
            await bad.answer(exc, _concerns(raw), send)
            return
        if isinstance(frame, PingFrame):
            await send({"type": "pong"})
            return
        if not rate.allow():
            limited = RateLimited(f"more than {self.limits.rate_per_minute} messages a minute")
            await send(error_frame(limited, **_concerns(raw)))
            return
        if isinstance(frame, LinkCodeFrame):
            await self._on_link_code(address, send)
        elif isinstance(frame, RetryFrame):
            await self._on_retry(frame, address, send)
        else:
            await self._on_message(frame, address, send)

    async def _on_link_code(self, address: Address, send: Send) -> None:
        if self.link_codes is None:
            unavailable = InputError("linking is not available here", code="link_unavailable")
            await send(error_frame(unavailable))
            return
        try:
            issued = await self.link_codes.issue(address.person_id)
        except AgentGWError as exc:
            await send(error_frame(exc))
            return
        await send(
            {"type": "link_code", "code": issued.code, "expires_at": issued.expires_at.isoformat()}
        )

    async def _on_message(self, frame: MessageFrame, address: Address, send: Send) -> None:
        inbound = Inbound(
            channel=CHANNEL,
            sender="",
            text=frame.text,
            received_at=datetime.now(UTC),
            client_id=frame.client_id,
        )
        try:
            stored = await self.router.accept(inbound, address)
        except AgentGWError as exc:
            await send(error_frame(exc, client_id=frame.client_id))
            return
        await send(
            {
                "type": "ack",
                "client_id": frame.client_id,
                "message_id": stored.message_id,
                "duplicate": stored.duplicate,
            }
        )
        if stored.duplicate:
            await self._replay(stored, send)
            return
        retry_after = self.router.backpressure()
        if retry_after is not None:
            await send(
                {
                    "type": "busy",
                    "retry_after_s": retry_after,
                    "client_id": frame.client_id,
                    "message_id": stored.message_id,
                }
            )

    async def _on_retry(self, frame: RetryFrame, address: Address, send: Send) -> None:
        try:
            stored = await self.router.retry(address, frame.message_id)
        except AgentGWError as exc:
            await send(error_frame(exc, retry_of=frame.message_id))
            return
        await send({"type": "retrying", "message_id": stored.message_id})

    async def _replay(self, stored: StoredInbound, send: Send) -> None:
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

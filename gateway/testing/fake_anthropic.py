"""A fake Anthropic Messages API on loopback that the real ``anthropic`` SDK talks to.

    async with FakeAnthropic(reply="Hello!") as fake:
        client = AsyncAnthropic(base_url=fake.base_url, api_key="test-key")
        fake.fail(429, retry_after_s=0.01)     # the next call is rate-limited
        ...
        fake.message_requests[-1].body["system"]

It serves ``POST /v1/messages`` as JSON, or with ``"stream": true`` as SSE in
the real API's order: ``message_start``, ``content_block_start``, ``ping``,
``content_block_delta`` (``text_delta``)…, ``content_block_stop``,
``message_delta`` (stop reason, output tokens), ``message_stop``; and
``GET /v1/models`` and ``/v1/models/{id}``. Every request is recorded with
its headers and body. Replies come from ``script`` (one text per call), then
from ``reply`` (a text, or a callable of the request body). Usage behaves
like the prompt cache: the prefix up to a ``cache_control`` block that was
seen before counts as ``cache_read_input_tokens``, a new one as
``cache_creation_input_tokens``.

Faults apply to the next model calls in the order they were queued:
``fail`` (an HTTP error status, 429 with ``retry-after-ms``, 529 overloaded),
``delay`` (before the answer or after some deltas, for timeouts),
``break_stream`` (the connection is cut after some deltas),
``truncate_stream`` (the stream ends cleanly but early), ``stream_error``
(an SSE ``error`` event) and ``malformed`` (a body that is not JSON).

``FakeModelServer`` is the part shared with the OpenAI-compatible fake.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import inspect
import itertools
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from gateway.tokens import estimate_tokens

ReplyFunction = Callable[[dict[str, Any]], str | Awaitable[str]]
Reply = str | ReplyFunction


class FaultKind(enum.StrEnum):
    STATUS = "status"
    DELAY = "delay"
    BREAK = "break"
    TRUNCATE = "truncate"
    STREAM_ERROR = "stream_error"
    MALFORMED = "malformed"


@dataclass(frozen=True)
class Fault:
    """One injected failure; it applies to exactly one model call."""

    kind: FaultKind
    status: int = 0
    retry_after_s: float | None = None
    seconds: float = 0.0
    # DELAY: None stalls before the answer starts, N after N text deltas.
    after_deltas: int | None = None
    error_type: str = ""


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received, and the fault it answered with (if any)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    fault: Fault | None
    at: float


class PrefixCache:
    """Which prompt prefixes were seen before, the way a provider's prompt cache keeps them."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    @staticmethod
    def _key(model: str, segments: Sequence[str]) -> str:
        digest = hashlib.sha256(model.encode())
        for segment in segments:
            digest.update(b"\x00" + segment.encode())
        return digest.hexdigest()

    def account(
        self, model: str, segments: Sequence[str], breakpoints: Sequence[int]
    ) -> tuple[int, int, int]:
        """(uncached input, cache read, cache write) tokens of a prompt.

        ``segments`` are the prompt's parts in order; ``breakpoints`` the
        indexes of the parts that end a cacheable prefix. The longest prefix
        seen before is read from the cache; the rest up to the last
        breakpoint is written to it.
        """
        tokens = [estimate_tokens(s) for s in segments]
        total = sum(tokens)
        read = 0
        for index in sorted(breakpoints, reverse=True):
            if self._key(model, segments[: index + 1]) in self._seen:
                read = sum(tokens[: index + 1])
                break
        written = 0
        if breakpoints:
            last = max(breakpoints)
            written = max(0, sum(tokens[: last + 1]) - read)
            for index in breakpoints:
                self._seen.add(self._key(model, segments[: index + 1]))
        return total - read - written, read, written


class FakeModelServer:
    """Lifecycle, recording, scripted replies and fault queue of a fake model API."""

    kind = "fake"

    def __init__(
        self,
        reply: Reply = "Hello from the fake model.",
        *,
        api_key: str | None = None,
        chunk_chars: int = 8,
        delta_delay_s: float = 0.0,
        models: Sequence[str] = (),
    ) -> None:
        self.reply = reply
        # Texts answered first, one per model call, before ``reply``.
        self.script: list[str] = []
        # When set, requests must carry this key.
        self.api_key = api_key
        self.chunk_chars = chunk_chars
        # Pause between text deltas, so a stream is visibly a stream.
        self.delta_delay_s = delta_delay_s
        self.models = tuple(models)
        self.requests: list[RecordedRequest] = []
        self.cache = PrefixCache()
        self._faults: list[Fault] = []
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle ---------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError(f"the {self.kind} server is already running")
        app = web.Application(client_max_size=16 << 20)
        self._add_routes(app)
        # Cancel handlers whose client left (a timed-out call), so a delayed
        # answer does not hold up close().
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", 0).start()
        except BaseException:
            await runner.cleanup()
            raise
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- faults ------------------------------------------------------------

    def fail(self, status: int, *, times: int = 1, retry_after_s: float | None = None) -> None:
        """Answer the next ``times`` model calls with HTTP ``status`` (529: overloaded)."""
        self._queue(times, Fault(FaultKind.STATUS, status=status, retry_after_s=retry_after_s))

    def delay(self, seconds: float, *, after_deltas: int | None = None, times: int = 1) -> None:
        """Stall ``seconds`` before answering, or after ``after_deltas`` deltas of a stream."""
        self._queue(times, Fault(FaultKind.DELAY, seconds=seconds, after_deltas=after_deltas))

    def break_stream(self, *, after_deltas: int = 2, times: int = 1) -> None:
        """Cut the connection after ``after_deltas`` text deltas (at once if not a stream)."""
        self._queue(times, Fault(FaultKind.BREAK, after_deltas=after_deltas))

    def truncate_stream(self, *, after_deltas: int = 2, times: int = 1) -> None:
        """End the stream cleanly after ``after_deltas`` deltas, without its closing events."""
        self._queue(times, Fault(FaultKind.TRUNCATE, after_deltas=after_deltas))

    def stream_error(
        self, error_type: str = "overloaded_error", *, after_deltas: int = 1, times: int = 1
    ) -> None:
        """An SSE ``error`` event after ``after_deltas`` deltas (an HTTP error if not a stream)."""
        self._queue(
            times, Fault(FaultKind.STREAM_ERROR, error_type=error_type, after_deltas=after_deltas)
        )

    def malformed(self, *, times: int = 1) -> None:
        """Answer with a body (or an SSE data line) that is not JSON."""
        self._queue(times, Fault(FaultKind.MALFORMED))

    def clear_faults(self) -> None:
        self._faults.clear()

    @property
    def pending_faults(self) -> int:
        return len(self._faults)

    def _queue(self, times: int, fault: Fault) -> None:
        if times < 1:
            raise ValueError("times must be 1 or more")
        self._faults.extend([fault] * times)

    def _next_fault(self) -> Fault | None:
        return self._faults.pop(0) if self._faults else None

    # -- helpers for the handlers -----------------------------------------

    def _record(self, request: web.Request, body: Any, fault: Fault | None) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(
            RecordedRequest(request.method, request.path, headers, body, fault, time.time())
        )

    def _key_given(self, request: web.Request) -> str:
        return request.headers.get("Authorization", "").removeprefix("Bearer ").strip()

    async def _reply_text(self, body: dict[str, Any]) -> str:
        if self.script:
            return self.script.pop(0)
        if isinstance(self.reply, str):
            return self.reply
        answer = self.reply(body)
        if inspect.isawaitable(answer):
            return await answer
        return answer

    def _chunks(self, text: str) -> list[str]:
        size = max(1, self.chunk_chars)
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]

    async def _pause_between_deltas(self, fault: Fault | None, sent: int) -> None:
        if (
            fault is not None
            and fault.kind is FaultKind.DELAY
            and fault.after_deltas is not None
            and fault.after_deltas == sent
        ):
            await asyncio.sleep(fault.seconds)
        elif self.delta_delay_s:
            await asyncio.sleep(self.delta_delay_s)

    @staticmethod
    async def _cut(request: web.Request) -> None:
        """Drop the connection mid-response, as a crashed proxy or server would."""
        transport = request.transport
        if transport is not None:
            # What was written reaches the client first; then the connection is gone.
            for _ in range(100):
                if not transport.get_write_buffer_size():
                    break
                await asyncio.sleep(0.001)
            transport.abort()
        # Let the abort reach the client before aiohttp finishes the handler.
        await asyncio.sleep(0)

    @staticmethod
    def _retry_headers(fault: Fault) -> dict[str, str]:
        if fault.retry_after_s is None:
            return {}
        return {
            "retry-after-ms": str(round(fault.retry_after_s * 1000)),
            "retry-after": str(math.ceil(fault.retry_after_s)),
        }

    @staticmethod
    async def _json_body(request: web.Request) -> tuple[dict[str, Any] | None, str]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None, "the body is not JSON"
        if not isinstance(body, dict):
            return None, "the body must be a JSON object"
        return body, ""


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_ERROR_MESSAGES = {
    "authentication_error": "invalid x-api-key",
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
    "overloaded_error": "Overloaded",
    "api_error": "Internal server error",
}
_STATUS_OF_TYPE = {error_type: status for status, error_type in _ERROR_TYPES.items()}
_MAX_CACHE_BREAKPOINTS = 4
DEFAULT_MODELS = ("claude-sonnet-5-5", "claude-haiku-5-5", "claude-sonnet-4-6", "claude-haiku-4-5")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _blocks(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if isinstance(value, list):
        return [part for part in value if isinstance(part, dict)]
    return []


class FakeAnthropic(FakeModelServer):
    """The Messages API, as far as the gateway uses it."""

    kind = "fake Anthropic"

    def __init__(
        self,
        reply: Reply = "Hello from the fake model.",
        *,
        api_key: str | None = None,
        chunk_chars: int = 8,
        delta_delay_s: float = 0.0,
        models: Sequence[str] = DEFAULT_MODELS,
    ) -> None:
        super().__init__(
            reply,
            api_key=api_key,
            chunk_chars=chunk_chars,
            delta_delay_s=delta_delay_s,
            models=models,
        )

    @property
    def base_url(self) -> str:
        """What ``AsyncAnthropic(base_url=...)`` (or ``ANTHROPIC_BASE_URL``) takes."""
        return self.origin

    @property
    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == "/v1/messages"]

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/v1/models/{model_id}", self._get_model)

    # -- responses ---------------------------------------------------------

    def _error(
        self,
        status: int,
        error_type: str = "",
        message: str = "",
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        error_type = error_type or _ERROR_TYPES.get(status, "api_error")
        body = {
            "type": "error",
            "error": {
                "type": error_type,
                "message": message or _ERROR_MESSAGES.get(error_type, ""),
            },
            "request_id": f"req_fake_{next(self._ids)}",
        }
        return web.json_response(body, status=status, headers=headers)

    def _refuse_key(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        given = request.headers.get("x-api-key") or self._key_given(request)
        if given != self.api_key:
            return self._error(401)
        return None

    def _model_info(self, model_id: str) -> dict[str, Any]:
        return {
            "type": "model",
            "id": model_id,
            "display_name": model_id.replace("-", " ").title(),
            "created_at": "2025-01-01T00:00:00Z",
            "lifecycle": "active",
        }

    async def _list_models(self, request: web.Request) -> web.StreamResponse:
        self._record(request, None, None)
        refused = self._refuse_key(request)
        if refused is not None:
            return refused
        data = [self._model_info(m) for m in self.models]
        return web.json_response(
            {
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )

    async def _get_model(self, request: web.Request) -> web.StreamResponse:
        self._record(request, None, None)
        refused = self._refuse_key(request)
        if refused is not None:
            return refused
        model_id = request.match_info["model_id"]
        if model_id not in self.models:
            return self._error(404, message=f"model: {model_id}")
        return web.json_response(self._model_info(model_id))

    def _usage(self, body: dict[str, Any], reply: str) -> dict[str, int]:
        """Input tokens split as the prompt cache would split them."""
        segments: list[str] = []
        breakpoints: list[int] = []
        for block in _blocks(body.get("system")):
            segments.append(str(block.get("text", "")))
            if block.get("cache_control"):
                breakpoints.append(len(segments) - 1)
        for message in body.get("messages", []):
            for block in _blocks(message.get("content")):
                segments.append(f"{message.get('role')}:{block.get('text', '')}")
                if block.get("cache_control"):
                    breakpoints.append(len(segments) - 1)
        uncached, read, written = self.cache.account(str(body["model"]), segments, breakpoints)
        return {
            "input_tokens": uncached,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": estimate_tokens(reply) if reply else 0,
        }

    @staticmethod
    def _invalid(body: dict[str, Any]) -> str:
        for key in ("model", "max_tokens", "messages"):
            if key not in body:
                return f"{key}: Field required"
        if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 0:
            return "max_tokens: Input should be a valid non-negative integer"
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        if not all(
            isinstance(m, dict) and m.get("role") in ("user", "assistant") for m in messages
        ):
            return "messages: each message needs a role of user or assistant"
        marks = sum(
            1
            for part in [
                *_blocks(body.get("system")),
                *(b for m in body["messages"] for b in _blocks(m.get("content"))),
            ]
            if part.get("cache_control")
        )
        if marks > _MAX_CACHE_BREAKPOINTS:
            return (
                f"A maximum of {_MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided"
            )
        return ""

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body, problem = await self._json_body(request)
        refused = self._refuse_key(request)
        if body is not None and refused is None:
            problem = self._invalid(body)
        # A refused or invalid request is answered before any fault: faults are for calls
        # the real API would have tried to answer.
        fault = self._next_fault() if body is not None and refused is None and not problem else None
        self._record(request, body, fault)
        if refused is not None:
            return refused
        if body is None or problem:
            return self._error(400, message=problem)
        streaming = bool(body.get("stream"))
        if fault is not None:
            if fault.kind is FaultKind.STATUS:
                return self._error(fault.status, headers=self._retry_headers(fault))
            if fault.kind is FaultKind.DELAY and (fault.after_deltas is None or not streaming):
                await asyncio.sleep(fault.seconds)
            elif not streaming and fault.kind in (FaultKind.BREAK, FaultKind.TRUNCATE):
                await self._cut(request)
                return web.Response()
            elif not streaming and fault.kind is FaultKind.STREAM_ERROR:
                status = _STATUS_OF_TYPE.get(fault.error_type, 500)
                return self._error(status, fault.error_type)
            elif not streaming and fault.kind is FaultKind.MALFORMED:
                return web.Response(text='{"id": "msg_', content_type="application/json")
        text = await self._reply_text(body)
        max_tokens = int(body["max_tokens"])
        stop_reason = "end_turn"
        if estimate_tokens(text) > max_tokens:
            text, stop_reason = text[: max_tokens * 4], "max_tokens"
        usage = self._usage(body, text)
        message_id = f"msg_fake_{next(self._ids)}"
        if not streaming:
            return web.json_response(
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": usage,
                },
                headers={"request-id": f"req_fake_{next(self._ids)}"},
            )
        return await self._stream(request, body, text, stop_reason, usage, message_id, fault)

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        text: str,
        stop_reason: str,
        usage: dict[str, int],
        message_id: str,
        fault: Fault | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "request-id": f"req_fake_{next(self._ids)}",
            }
        )
        await response.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())

        await send(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            },
        )
        await send(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
        await send("ping", {"type": "ping"})
        if fault is not None and fault.kind is FaultKind.MALFORMED:
            await response.write(b'event: content_block_delta\ndata: {"type": "content_bl\n\n')
            await response.write_eof()
            return response
        chunks = self._chunks(text)
        # One step past the last chunk, so a fault placed after all deltas still happens.
        for sent in range(len(chunks) + 1):
            if fault is not None and fault.after_deltas == sent:
                if fault.kind is FaultKind.BREAK:
                    await self._cut(request)
                    return response
                if fault.kind is FaultKind.TRUNCATE:
                    await response.write_eof()
                    return response
                if fault.kind is FaultKind.STREAM_ERROR:
                    message = _ERROR_MESSAGES.get(fault.error_type, "error")
                    await send(
                        "error",
                        {"type": "error", "error": {"type": fault.error_type, "message": message}},
                    )
                    await response.write_eof()
                    return response
            if sent == len(chunks):
                break
            await self._pause_between_deltas(fault, sent)
            await send(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": chunks[sent]},
                },
            )
        await send("content_block_stop", {"type": "content_block_stop", "index": 0})
        await send(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
        await send("message_stop", {"type": "message_stop"})
        await response.write_eof()
        return response

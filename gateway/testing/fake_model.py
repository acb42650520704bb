"""What the fake model APIs share: the fault queue, request recording, scripted
replies, and a prompt-prefix cache that accounts tokens like a provider's.

Faults apply to the next model calls in the order they were queued:
``fail`` (an HTTP error status, 429 with retry-after, 529 overloaded),
``delay`` (before the answer or after some deltas, for timeouts),
``break_stream`` (the connection is cut after some deltas),
``truncate_stream`` (the stream ends cleanly but early), ``stream_error``
(an error event in the stream) and ``malformed`` (a body that is not JSON).
"""

from __future__ import annotations

import abc
import asyncio
import enum
import hashlib
import inspect
import itertools
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, final

from aiohttp import web

from gateway.testing.loopback import LoopbackServer
from gateway.tokens import estimate_tokens


@dataclass(frozen=True)
class ToolUse:
    """A tool call a fake model makes: its input as an object, or as raw text (which may
    be malformed JSON, to test how the gateway copes)."""

    name: str
    input: dict[str, Any] | str = field(default_factory=dict)

    def arguments(self) -> str:
        return self.input if isinstance(self.input, str) else json.dumps(self.input)


@dataclass(frozen=True)
class ToolTurn:
    """A reply that calls tools: optional text first, then the calls. A request whose
    tool_choice is "none" gets only the text, as from the real APIs."""

    text: str = ""
    calls: tuple[ToolUse, ...] = ()


ReplyFunction = Callable[[dict[str, Any]], str | ToolTurn | Awaitable[str | ToolTurn]]
Reply = str | ReplyFunction


class FaultKind(enum.StrEnum):
    STATUS = "status"
    DELAY = "delay"
    BREAK = "break"
    TRUNCATE = "truncate"
    STREAM_ERROR = "stream_error"
    MALFORMED = "malformed"
    # [DONE] after some deltas, with no finish_reason (FakeOpenAI only): how
    # llama-cpp-python's server ends a stream it interrupts for another request.
    CUT_SHORT = "cut_short"


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


# How far back from a breakpoint Anthropic's cache checks earlier block boundaries for a
# hit ("up to about 20 blocks"): a prefix written at turn N's mark is found from turn N+1's.
LOOKBACK_BLOCKS = 20


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
        indexes of the parts that end a cacheable prefix. Only prefixes that
        ended at a breakpoint are ever written; the longest of them found at a
        breakpoint or up to ``LOOKBACK_BLOCKS`` parts before one is read from
        the cache; the rest up to the last breakpoint is written to it.
        """
        tokens = [estimate_tokens(s) for s in segments]
        total = sum(tokens)
        read_end = 0
        # As Anthropic's cache looks up: at each breakpoint, then at the block boundaries
        # before it (at most LOOKBACK_BLOCKS back), for a prefix an earlier request wrote
        # at one of its own breakpoints; the longest found is read.
        for index in sorted(breakpoints, reverse=True):
            for at in range(index, max(-1, index - LOOKBACK_BLOCKS), -1):
                if at + 1 > read_end and self._key(model, segments[: at + 1]) in self._seen:
                    read_end = at + 1
                    break
        read = sum(tokens[:read_end])
        written = 0
        if breakpoints:
            last = max(breakpoints)
            written = max(0, sum(tokens[: last + 1]) - read)
            for index in breakpoints:
                self._seen.add(self._key(model, segments[: index + 1]))
        return total - read - written, read, written


class FakeModelServer(LoopbackServer):
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
        super().__init__()
        self.reply = reply
        # Texts answered first, one per model call, before ``reply``.
        self.script: list[str | ToolTurn] = []
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

    # -- one model call ----------------------------------------------------

    @final
    async def _model_call(self, request: web.Request) -> web.StreamResponse:
        """The path every model call takes: parse, refuse, validate, take the next
        fault and record; then the API's own answer from ``_complete``."""
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
            return self._bad_request(problem)
        streaming = bool(body.get("stream"))
        if fault is not None:
            if fault.kind is FaultKind.STATUS:
                return self._status_fault(fault)
            if fault.kind is FaultKind.DELAY and (fault.after_deltas is None or not streaming):
                await asyncio.sleep(fault.seconds)
            elif not streaming and fault.kind in (FaultKind.BREAK, FaultKind.TRUNCATE):
                await self._cut(request)
                return web.Response()
            elif not streaming and fault.kind is FaultKind.STREAM_ERROR:
                return self._stream_error_fault(fault)
            elif not streaming and fault.kind is FaultKind.MALFORMED:
                return web.Response(text=self.malformed_body, content_type="application/json")
        return await self._complete(request, body, fault, streaming=streaming)

    # The API's half-written JSON answer for a MALFORMED fault.
    malformed_body = "{"

    @abc.abstractmethod
    def _refuse_key(self, request: web.Request) -> web.Response | None:
        """The API's answer to a missing or wrong key; None when the key passes."""

    @abc.abstractmethod
    def _invalid(self, body: dict[str, Any]) -> str:
        """Why the API would refuse this body; empty when it is valid."""

    @abc.abstractmethod
    def _bad_request(self, problem: str) -> web.Response:
        """The API's 400 answer."""

    @abc.abstractmethod
    def _status_fault(self, fault: Fault) -> web.Response:
        """The API's error answer for an injected HTTP status."""

    @abc.abstractmethod
    def _stream_error_fault(self, fault: Fault) -> web.Response:
        """What a STREAM_ERROR fault becomes when the call is not a stream."""

    @abc.abstractmethod
    async def _complete(
        self, request: web.Request, body: dict[str, Any], fault: Fault | None, *, streaming: bool
    ) -> web.StreamResponse:
        """The answer of a call that passed: JSON, or a stream honouring ``fault``."""

    # -- helpers for the handlers -----------------------------------------

    def _record(self, request: web.Request, body: Any, fault: Fault | None) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(
            RecordedRequest(request.method, request.path, headers, body, fault, time.time())
        )

    def _key_given(self, request: web.Request) -> str:
        return request.headers.get("Authorization", "").removeprefix("Bearer ").strip()

    async def _reply_turn(self, body: dict[str, Any], *, tools_off: bool) -> ToolTurn:
        """The next reply as text and tool calls (none when the request forbids tools)."""
        answer: str | ToolTurn | Awaitable[str | ToolTurn]
        if self.script:
            answer = self.script.pop(0)
        elif isinstance(self.reply, str):
            answer = self.reply
        else:
            answer = self.reply(body)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, str):
            return ToolTurn(answer)
        if tools_off or not body.get("tools"):
            return ToolTurn(answer.text)
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

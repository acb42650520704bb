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

Faults (``fail``, ``delay``, ``break_stream``, ``truncate_stream``,
``stream_error``, ``malformed``) come from ``FakeModelServer`` in
``gateway.testing.fake_model``, shared with the OpenAI-compatible fake.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from gateway.testing.fake_model import (
    FakeModelServer,
    Fault,
    FaultKind,
    RecordedRequest,
    Reply,
    ToolTurn,
)
from gateway.tokens import estimate_tokens

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
        # (model, usage) of every answered Messages call, in order.
        self.usages: list[tuple[str, dict[str, int]]] = []

    @property
    def base_url(self) -> str:
        """What ``AsyncAnthropic(base_url=...)`` (or ``ANTHROPIC_BASE_URL``) takes."""
        return self.origin

    @property
    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == "/v1/messages"]

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._model_call)
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
        # The API's cache order: tools, then system, then messages; a mark on a system
        # block caches the tool definitions with it.
        if body.get("tools"):
            segments.append(json.dumps(body["tools"], sort_keys=True))
        for block in _blocks(body.get("system")):
            segments.append(str(block.get("text", "")))
            if block.get("cache_control"):
                breakpoints.append(len(segments) - 1)
        for message in body.get("messages", []):
            for block in _blocks(message.get("content")):
                said = block["text"] if "text" in block else json.dumps(block, sort_keys=True)
                segments.append(f"{message.get('role')}:{said}")
                if block.get("cache_control"):
                    breakpoints.append(len(segments) - 1)
        uncached, read, written = self.cache.account(str(body["model"]), segments, breakpoints)
        usage = {
            "input_tokens": uncached,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": estimate_tokens(reply) if reply else 0,
        }
        # What each answered call cost, with its model, for benches that sum the cache.
        self.usages.append((str(body["model"]), dict(usage)))
        return usage

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

    malformed_body = '{"id": "msg_'

    def _bad_request(self, problem: str) -> web.Response:
        return self._error(400, message=problem)

    def _status_fault(self, fault: Fault) -> web.Response:
        return self._error(fault.status, headers=self._retry_headers(fault))

    def _stream_error_fault(self, fault: Fault) -> web.Response:
        return self._error(_STATUS_OF_TYPE.get(fault.error_type, 500), fault.error_type)

    async def _complete(
        self, request: web.Request, body: dict[str, Any], fault: Fault | None, *, streaming: bool
    ) -> web.StreamResponse:
        choice = body.get("tool_choice")
        turn = await self._reply_turn(
            body, tools_off=isinstance(choice, dict) and choice.get("type") == "none"
        )
        text = turn.text
        max_tokens = int(body["max_tokens"])
        stop_reason = "tool_use" if turn.calls else "end_turn"
        if estimate_tokens(text) > max_tokens:
            text, stop_reason = text[: max_tokens * 4], "max_tokens"
            turn = ToolTurn(text)
        usage = self._usage(body, text)
        message_id = f"msg_fake_{next(self._ids)}"
        if not streaming:
            return web.json_response(
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [
                        {"type": "text", "text": text},
                        *(
                            {
                                "type": "tool_use",
                                "id": f"toolu_fake_{next(self._ids)}",
                                "name": call.name,
                                "input": call.input if isinstance(call.input, dict) else {},
                            }
                            for call in turn.calls
                        ),
                    ],
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": usage,
                },
                headers={"request-id": f"req_fake_{next(self._ids)}"},
            )
        return await self._stream(request, body, turn, stop_reason, usage, message_id, fault)

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        turn: ToolTurn,
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
        chunks = self._chunks(turn.text)
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
        # Each call as the real API streams it: the block with an empty input, then the
        # input's JSON text in pieces, then the block's stop.
        for index, call in enumerate(turn.calls, start=1):
            await send(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": f"toolu_fake_{next(self._ids)}",
                        "name": call.name,
                        "input": {},
                    },
                },
            )
            for piece in self._chunks(call.arguments()):
                await send(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
            await send("content_block_stop", {"type": "content_block_stop", "index": index})
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

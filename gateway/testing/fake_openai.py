"""A fake OpenAI-compatible chat server on loopback (what Ollama, llama.cpp server and vLLM serve).

    async with FakeOpenAI(reply="Hello!") as fake:
        # [openai] base_url = fake.base_url  (ends in /v1)
        fake.fail(503, times=2)
        ...
        fake.chat_requests[-1].body["messages"]

It serves ``POST /v1/chat/completions`` as JSON, or with ``"stream": true``
as SSE ``data:`` chunks (a role chunk, content chunks, a chunk with the
``finish_reason``, a usage chunk when ``stream_options.include_usage`` is
set, then ``data: [DONE]``), and ``GET /v1/models``. Replies, recording and
faults work as in ``FakeAnthropic``; 429s carry ``Retry-After`` in seconds
(fractions allowed, as the adapter accepts them), an SSE error is a
``data: {"error": ...}`` chunk, and usage reports a prefix seen before as
``prompt_tokens_details.cached_tokens``, as vLLM's prefix cache does.
"""

from __future__ import annotations

import json
import time
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
    404: "not_found_error",
    429: "rate_limit_exceeded",
    503: "service_unavailable",
}

# The status a server puts in an error chunk it sends inside a 200 stream (vLLM style).
_STREAM_ERROR_CODES = {
    "overloaded_error": 529,
    "rate_limit_error": 429,
    "invalid_request_error": 400,
}


class FakeOpenAI(FakeModelServer):
    kind = "fake OpenAI-compatible"

    def __init__(
        self,
        reply: Reply = "Hello from the fake local model.",
        *,
        api_key: str | None = None,
        chunk_chars: int = 8,
        delta_delay_s: float = 0.0,
        models: Sequence[str] = ("llama3.2:3b", "qwen2.5:0.5b"),
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
        """What ``[openai] base_url`` takes."""
        return f"{self.origin}/v1"

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == "/v1/chat/completions"]

    def cut_short(self, *, after_deltas: int = 2, times: int = 1) -> None:
        """End the stream with ``data: [DONE]`` after ``after_deltas`` deltas, no
        ``finish_reason`` sent: llama-cpp-python's server does this to a stream when
        another request arrives."""
        self._queue(times, Fault(FaultKind.CUT_SHORT, after_deltas=after_deltas))

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._model_call)
        app.router.add_get("/v1/models", self._list_models)

    def _error(
        self, status: int, message: str = "", headers: dict[str, str] | None = None
    ) -> web.Response:
        error_type = _ERROR_TYPES.get(status, "server_error")
        body = {"error": {"message": message or error_type, "type": error_type, "code": status}}
        return web.json_response(body, status=status, headers=headers)

    def _refuse_key(self, request: web.Request) -> web.Response | None:
        if self.api_key is not None and self._key_given(request) != self.api_key:
            return self._error(401, "Incorrect API key provided")
        return None

    @staticmethod
    def _retry_after(fault: Fault) -> dict[str, str]:
        if fault.retry_after_s is None:
            return {}
        return {"Retry-After": f"{fault.retry_after_s:g}"}

    async def _list_models(self, request: web.Request) -> web.StreamResponse:
        self._record(request, None, None)
        refused = self._refuse_key(request)
        if refused is not None:
            return refused
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                    for m in self.models
                ],
            }
        )

    def _usage(self, body: dict[str, Any], reply: str) -> dict[str, Any]:
        segments = [f"{m.get('role')}:{m.get('content')}" for m in body["messages"]]
        # Every message boundary is a prefix the server may reuse; nothing counts as a write.
        uncached, read, written = self.cache.account(
            str(body["model"]), segments, range(len(segments))
        )
        prompt = uncached + read + written
        completion = estimate_tokens(reply) if reply else 0
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": read},
        }

    @staticmethod
    def _invalid(body: dict[str, Any]) -> str:
        for key in ("model", "messages"):
            if key not in body:
                return f"'{key}' is a required property"
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            return "messages must be a non-empty list"
        if not all(isinstance(m, dict) and "role" in m for m in messages):
            return "each message needs a role"
        return ""

    malformed_body = '{"choices": ['

    def _bad_request(self, problem: str) -> web.Response:
        return self._error(400, problem)

    def _status_fault(self, fault: Fault) -> web.Response:
        return self._error(fault.status, headers=self._retry_after(fault))

    def _stream_error_fault(self, fault: Fault) -> web.Response:
        return self._error(503, fault.error_type)

    async def _complete(
        self, request: web.Request, body: dict[str, Any], fault: Fault | None, *, streaming: bool
    ) -> web.StreamResponse:
        turn = await self._reply_turn(body, tools_off=body.get("tool_choice") == "none")
        text = turn.text
        finish_reason = "tool_calls" if turn.calls else "stop"
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, int) and estimate_tokens(text) > max_tokens:
            text, finish_reason = text[: max_tokens * 4], "length"
        usage = self._usage(body, text)
        completion_id = f"chatcmpl-fake-{next(self._ids)}"
        created = int(time.time())
        if not streaming:
            return web.json_response(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": text,
                                **self._tool_calls(turn),
                            },
                            "finish_reason": finish_reason,
                        }
                    ],
                    "usage": usage,
                }
            )
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        return await self._stream(
            request,
            fault,
            text,
            turn,
            finish_reason,
            usage if include_usage else None,
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": body["model"],
            },
        )

    def _tool_calls(self, turn: ToolTurn) -> dict[str, Any]:
        if not turn.calls:
            return {}
        return {
            "tool_calls": [
                {
                    "id": f"call_fake_{next(self._ids)}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments()},
                }
                for call in turn.calls
            ]
        }

    async def _stream(
        self,
        request: web.Request,
        fault: Fault | None,
        text: str,
        turn: ToolTurn,
        finish_reason: str,
        usage: dict[str, Any] | None,
        head: dict[str, Any],
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)

        async def send(data: dict[str, Any]) -> None:
            await response.write(f"data: {json.dumps(data)}\n\n".encode())

        def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
            return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}

        await send(chunk({"role": "assistant", "content": ""}))
        if fault is not None and fault.kind is FaultKind.MALFORMED:
            await response.write(b'data: {"choices": [{"delta": {"cont\n\n')
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
                if fault.kind is FaultKind.CUT_SHORT:
                    await response.write(b"data: [DONE]\n\n")
                    await response.write_eof()
                    return response
                if fault.kind is FaultKind.STREAM_ERROR:
                    code = _STREAM_ERROR_CODES.get(fault.error_type, 500)
                    await send(
                        {
                            "error": {
                                "message": fault.error_type,
                                "type": fault.error_type,
                                "code": code,
                            }
                        }
                    )
                    await response.write_eof()
                    return response
            if sent == len(chunks):
                break
            await self._pause_between_deltas(fault, sent)
            await send(chunk({"content": chunks[sent]}))
        # Each call as OpenAI streams it: id and name first, then the arguments in pieces.
        for index, call in enumerate(turn.calls):
            first = {
                "index": index,
                "id": f"call_fake_{next(self._ids)}",
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            await send(chunk({"tool_calls": [first]}))
            for piece in self._chunks(call.arguments()):
                await send(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        await send(chunk({}, finish_reason))
        if usage is not None:
            await send({**head, "choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

"""Claude through the ``anthropic`` SDK: streaming, prompt caching, one retry layer.

The SDK is the only retry layer on this path: ``max_retries`` makes it retry
408/409/429/5xx and 529 overloaded with capped backoff that honours
``retry-after`` / ``retry-after-ms``. Nothing here retries again. Errors that
survive the retries are mapped to ours at this edge (``map_error``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import anthropic
import httpx2
from anthropic.types import (
    AssistantMessageParam,
    MessageParam,
    TextBlockParam,
    UserMessageParam,
)

from gateway.brains.base import (
    BaseBrain,
    BrainRequest,
    ChatMessage,
    Completion,
    Purpose,
    RawEvent,
    StreamEnd,
    SystemBlock,
    TextDelta,
    ToolCall,
    ToolRound,
    ToolSpec,
    Usage,
    defuse_turn_tags,
    turn_frame,
)
from gateway.config import Config
from gateway.errors import (
    BrainError,
    BrainInterrupted,
    BrainNotConfigured,
    BrainOverloaded,
    BrainRateLimited,
    BrainRejected,
    BrainTimeout,
    BrainUnavailable,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
# Connecting should never take long; the read timeout is the configured one.
_CONNECT_TIMEOUT_S = 10.0


def system_blocks(blocks: tuple[SystemBlock, ...]) -> list[TextBlockParam]:
    """The system prompt as text blocks, with the cache mark where a block asks for it."""
    out: list[TextBlockParam] = []
    for block in blocks:
        param: TextBlockParam = {"type": "text", "text": block.text}
        if block.cache:
            param["cache_control"] = {"type": "ephemeral"}
        out.append(param)
    return out


def message_param(message: ChatMessage) -> MessageParam:
    if message.cache:
        # As a block: only a content block can carry the cache mark.
        marked: list[TextBlockParam] = [
            {"type": "text", "text": message.text, "cache_control": {"type": "ephemeral"}}
        ]
        if message.role == "user":
            return {"role": "user", "content": marked}
        return {"role": "assistant", "content": marked}
    if message.role == "user":
        user: UserMessageParam = {"role": "user", "content": message.text}
        return user
    assistant: AssistantMessageParam = {"role": "assistant", "content": message.text}
    return assistant


def message_params(request: BrainRequest) -> list[MessageParam]:
    """The messages in the cache's order: the history (its last message cache-marked by
    the composer), then the final user message with the per-turn blocks framed ahead of
    the person's words, so everything before that message is the same next turn."""
    out = [message_param(m) for m in request.messages]
    frame = turn_frame(request.turn_blocks())
    if frame and request.messages and request.messages[-1].role == "user":
        said = defuse_turn_tags(request.messages[-1].text)
        out[-1] = {
            "role": "user",
            "content": [{"type": "text", "text": frame}, {"type": "text", "text": said}],
        }
    elif frame:
        out.append({"role": "user", "content": frame})
    return out


def tool_params(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]


def arguments_object(arguments: str) -> dict[str, Any]:
    """The call's input as the API wants it back: an object (a malformed one as {}: the
    tool loop already told the model its arguments were not valid JSON)."""
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def round_messages(rounds: tuple[ToolRound, ...]) -> list[dict[str, Any]]:
    """Each tool round as the API's pair: the assistant's text and tool_use blocks, then a
    user message with one tool_result per call."""
    out: list[dict[str, Any]] = []
    for step in rounds:
        content: list[dict[str, Any]] = []
        if step.text:
            content.append({"type": "text", "text": step.text})
        content.extend(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": arguments_object(call.arguments),
            }
            for call in step.calls
        )
        out.append({"role": "assistant", "content": content})
        out.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": result.call_id,
                        "content": result.text,
                        "is_error": result.is_error,
                    }
                    for result in step.results
                ],
            }
        )
    return out


def map_error(exc: Exception, *, key_env: str = "") -> BrainError:
    """Our error for what the SDK (or its transport) raised.

    Once text has streamed, ``BaseBrain.stream`` turns a ``BrainUnavailable`` from here
    into ``BrainInterrupted``.
    """
    where = "Claude"
    if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
        return BrainTimeout(f"{where}: no answer in time")
    if isinstance(exc, anthropic.APIStatusError):
        error_type = exc.type or ""
        detail = exc.api_message or exc.message
        if exc.status_code == 529 or error_type == "overloaded_error":
            return BrainOverloaded(f"{where} is overloaded: {detail}")
        if exc.status_code == 429 or error_type == "rate_limit_error":
            return BrainRateLimited(f"{where} rate limit: {detail}")
        if exc.status_code in (401, 403) or error_type in (
            "authentication_error",
            "permission_error",
        ):
            variable = f"${key_env}" if key_env else "the API key"
            return BrainRejected(
                f"{where} refused the API key (HTTP {exc.status_code}): check {variable}: {detail}"
            )
        if exc.status_code >= 500 or error_type == "api_error":
            return BrainUnavailable(f"{where} failed (HTTP {exc.status_code}): {detail}")
        if 400 <= exc.status_code < 500:
            return BrainRejected(f"{where} refused the request (HTTP {exc.status_code}): {detail}")
        # An SSE error event of a kind we do not know, inside a 200 stream.
        return BrainInterrupted(f"{where}'s answer stopped with an error: {detail}")
    if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
        return BrainUnavailable(f"{where} could not be reached: {exc}")
    if isinstance(exc, json.JSONDecodeError):
        return BrainUnavailable(f"{where} answered with data that is not JSON")
    return BrainUnavailable(f"{where}: {exc.__class__.__name__}: {exc}")


# What the SDK and its transport raise during a call; everything else is a bug of ours.
_FOREIGN_ERRORS = (anthropic.AnthropicError, httpx2.HTTPError, json.JSONDecodeError)


class ClaudeBrain(BaseBrain):
    """A ``Brain`` backed by the Messages API; ``BaseBrain`` owns the streaming contract."""

    foreign_errors = _FOREIGN_ERRORS

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        reply_model: str,
        utility_model: str,
        key_env: str = "ANTHROPIC_API_KEY",
    ) -> None:
        self._client = client
        self.reply_model = reply_model
        self.utility_model = utility_model
        self._key_env = key_env

    @classmethod
    def from_config(cls, config: Config) -> ClaudeBrain:
        if not config.anthropic_api_key:
            raise BrainNotConfigured(f"Claude needs an API key in ${config.claude.api_key_env}")
        client = anthropic.AsyncAnthropic(
            api_key=config.anthropic_api_key,
            # Explicit, so the SDK does not look at the environment behind the config's back.
            base_url=config.anthropic_base_url or DEFAULT_BASE_URL,
            timeout=anthropic.Timeout(
                config.brain.timeout_s, connect=min(_CONNECT_TIMEOUT_S, config.brain.timeout_s)
            ),
            max_retries=config.brain.max_retries,
        )
        return cls(
            client,
            reply_model=config.claude.reply_model,
            utility_model=config.claude.utility_model,
            key_env=config.claude.api_key_env,
        )

    @property
    def name(self) -> str:
        return "claude"

    def model_for(self, purpose: Purpose) -> str:
        return self.utility_model if purpose is Purpose.UTILITY else self.reply_model

    def _params(self, request: BrainRequest) -> dict[str, Any]:
        # This SDK's Messages API takes no temperature, so request.temperature is not sent.
        params: dict[str, Any] = {
            "model": self.model_for(request.purpose),
            "max_tokens": request.max_tokens,
            "messages": message_params(request),
        }
        if request.prefix_blocks():
            params["system"] = system_blocks(request.prefix_blocks())
        if request.tools:
            # The API puts tools before the system prompt in its cache order: the system
            # block's cache mark covers their definitions too.
            params["tools"] = tool_params(request.tools)
            params["tool_choice"] = {"type": "auto" if request.tools_allowed else "none"}
            params["messages"].extend(round_messages(request.tool_rounds))
        return params

    def map_error(self, exc: Exception, *, started: bool = False) -> BrainError:
        # ``started`` changes nothing here: the base owns what streamed text changes.
        return map_error(exc, key_env=self._key_env)

    def ended_early(self) -> str:
        return "Claude's answer ended before message_stop"

    async def raw_stream(self, request: BrainRequest) -> AsyncGenerator[RawEvent, None]:
        params = self._params(request)
        events = await self._client.messages.create(**params, stream=True)
        model = str(params["model"])
        usage: dict[str, int] = {}
        stop_reason = "end_turn"
        stopped = False
        # Tool-use blocks by index: (id, name, the input's JSON text as it streams).
        tools: dict[int, tuple[str, str, list[str]]] = {}
        async with events:
            async for event in events:
                if event.type == "message_start":
                    model = event.message.model or model
                    start = event.message.usage
                    usage = {
                        "input": start.input_tokens,
                        "output": start.output_tokens,
                        "cache_read": start.cache_read_input_tokens or 0,
                        "cache_write": start.cache_creation_input_tokens or 0,
                    }
                elif event.type == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        tools[event.index] = (block.id, block.name, [])
                elif event.type == "content_block_delta":
                    if event.delta.type == "text_delta" and event.delta.text:
                        yield TextDelta(event.delta.text)
                    elif event.delta.type == "input_json_delta" and event.index in tools:
                        tools[event.index][2].append(event.delta.partial_json)
                elif event.type == "content_block_stop":
                    if event.index in tools:
                        call_id, name, parts = tools.pop(event.index)
                        yield ToolCall(call_id, name, "".join(parts) or "{}")
                elif event.type == "message_delta":
                    stop_reason = event.delta.stop_reason or stop_reason
                    # Counts here are cumulative; the input ones only in newer API versions.
                    final = event.usage
                    usage["output"] = final.output_tokens
                    if final.input_tokens is not None:
                        usage["input"] = final.input_tokens
                    if final.cache_read_input_tokens is not None:
                        usage["cache_read"] = final.cache_read_input_tokens
                    if final.cache_creation_input_tokens is not None:
                        usage["cache_write"] = final.cache_creation_input_tokens
                elif event.type == "message_stop":
                    stopped = True
        if not stopped:
            return  # the base: an answer without its end is interrupted
        yield StreamEnd(
            model=model,
            usage=Usage(
                input_tokens=usage.get("input", 0),
                output_tokens=usage.get("output", 0),
                cache_read_tokens=usage.get("cache_read", 0),
                cache_write_tokens=usage.get("cache_write", 0),
            ),
            stop_reason=stop_reason,
        )

    async def complete(self, request: BrainRequest) -> Completion:
        params = self._params(request)
        try:
            message = await self._client.messages.create(**params)
        except _FOREIGN_ERRORS as exc:
            raise self.map_error(exc) from exc
        text = "".join(block.text for block in message.content if block.type == "text")
        usage = message.usage
        return Completion(
            text=text,
            model=message.model or str(params["model"]),
            usage=Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
            ),
            stop_reason=message.stop_reason or "end_turn",
        )

    async def list_models(self) -> list[str]:
        """The model ids the API offers this key (``agentgw doctor``'s reachability check)."""
        try:
            page = await self._client.models.list(limit=100)
        except _FOREIGN_ERRORS as exc:
            raise self.map_error(exc) from exc
        return [model.id for model in page.data]

    async def aclose(self) -> None:
        await self._client.close()

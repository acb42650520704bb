"""A local model behind an OpenAI-compatible endpoint: Ollama, llama.cpp server, vLLM.

Through the official ``openai`` SDK: it sends ``POST {base_url}/chat/completions``,
parses the SSE stream (``data:`` lines up to ``data: [DONE]``, ``error`` chunks
raised as ``APIError``) and is the single retry layer of this path: 408, 409,
429, 5xx and connection failures are retried before the first byte of an
answer, up to ``brain.max_retries``, with capped exponential backoff that
honours ``Retry-After`` (and ``retry-after-ms``); once an answer streams a
failure is final, so a person never sees text twice. The backoff follows our
``RetryPolicy`` (``PolicyClient``). ``BaseBrain`` owns the streaming contract;
this module yields the raw stream and maps the SDK's errors.

The SDK runs on httpx2, as the anthropic SDK does: both model paths share one
HTTP stack.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx2
import openai
from openai._models import FinalRequestOptions
from openai._types import Headers

from gateway.brains.base import (
    BaseBrain,
    BrainRequest,
    Completion,
    Purpose,
    RawEvent,
    StreamEnd,
    TextDelta,
    ToolCall,
    ToolRound,
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

_CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait between attempts that failed before any answer."""

    max_retries: int = 2
    initial_delay_s: float = 0.5
    max_delay_s: float = 8.0
    # A server asking for a longer wait than this is not waited for.
    max_retry_after_s: float = 60.0

    def delay(self, attempt: int, retry_after_s: float | None) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``; None: do not retry."""
        if attempt >= self.max_retries:
            return None
        if retry_after_s is not None:
            return retry_after_s if retry_after_s <= self.max_retry_after_s else None
        backoff = min(self.initial_delay_s * 2.0**attempt, self.max_delay_s)
        # Jitter keeps many clients from retrying in step.
        return backoff * (1 - 0.25 * random.random())


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms``, else ``Retry-After`` as seconds or an HTTP date."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / scale)
        except ValueError:
            pass
        if name == "retry-after":
            parsed = email.utils.parsedate_tz(value)
            if parsed is not None:
                return max(0.0, email.utils.mktime_tz(parsed) - time.time())
    return None


class PolicyClient(openai.AsyncOpenAI):
    """The SDK's client with its waits taken from a ``RetryPolicy``.

    The SDK's own constants (0.5 s initial, 8 s cap, Retry-After up to 120 s) are not
    configurable; two hooks of its base client take ours instead. Which statuses are
    retried, and how often (``max_retries``), stay the SDK's. These are private
    methods of the SDK (pinned by ``openai>=3.57,<4`` in pyproject);
    tests/test_brain_openai.py exercises each.
    """

    def __init__(self, *, policy: RetryPolicy, **kwargs: Any) -> None:
        super().__init__(max_retries=policy.max_retries, **kwargs)
        self.policy = policy

    def _calculate_retry_timeout(
        self,
        remaining_retries: int,
        options: FinalRequestOptions,
        response_headers: httpx2.Headers | None = None,
    ) -> float:
        attempt = options.get_max_retries(self.max_retries) - remaining_retries
        after = retry_after_seconds(response_headers) if response_headers is not None else None
        wait = self.policy.delay(attempt, after)
        # None here only for a Retry-After past the cap, which _should_retry refused.
        return 0.0 if wait is None else wait

    def _validate_headers(self, headers: Headers, custom_headers: Headers) -> None:
        # The SDK refuses a request with no key; a local server without one is normal,
        # and the key (or its absence) comes from our config.
        return

    def _should_retry(self, response: httpx2.Response) -> bool:
        after = retry_after_seconds(response.headers)
        if after is not None and after > self.policy.max_retry_after_s:
            return False
        return super()._should_retry(response)


def error_detail(body: bytes) -> str:
    """The server's own words from an error body (OpenAI, vLLM and Ollama shapes)."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)[:300]
    if error is not None:
        return str(error)[:300]
    return text[:300]


def status_error(status: int, detail: str, *, where: str, key_env: str) -> BrainError:
    if status == 429:
        return BrainRateLimited(f"{where} rate limit (HTTP 429): {detail}")
    if status == 529:
        return BrainOverloaded(f"{where} is overloaded (HTTP 529): {detail}")
    if status in (401, 403):
        return BrainRejected(
            f"{where} refused the API key (HTTP {status}): check ${key_env}: {detail}"
        )
    if status >= 500:
        return BrainUnavailable(f"{where} failed (HTTP {status}): {detail}")
    return BrainRejected(f"{where} refused the request (HTTP {status}): {detail}")


def _status_detail(exc: openai.APIStatusError) -> str:
    try:
        return error_detail(exc.response.content)
    except httpx2.ResponseNotRead:
        return exc.message


# What the SDK and its transport raise during a call; everything else is a bug of ours.
_FOREIGN_ERRORS = (openai.OpenAIError, httpx2.HTTPError, json.JSONDecodeError)


class OpenAICompatBrain(BaseBrain):
    """A ``Brain`` for any server speaking the OpenAI chat completions API."""

    foreign_errors = _FOREIGN_ERRORS

    def __init__(
        self,
        client: httpx2.AsyncClient,
        *,
        base_url: str,
        model: str,
        utility_model: str = "",
        retry: RetryPolicy | None = None,
        key_env: str = "OPENAI_API_KEY",
        api_key: str = "",
        stop: tuple[str, ...] = (),
        system_role: Literal["system", "user"] = "system",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        # Key and URL explicit, so the SDK does not read OPENAI_API_KEY / OPENAI_BASE_URL
        # behind the config's back. A local server usually needs no key: an empty one
        # sends no Authorization header, and the SDK's own check for one is turned off.
        self._client = PolicyClient(
            policy=self.retry,
            api_key=api_key,
            base_url=self.base_url,
            http_client=client,
            _enforce_credentials=False,
        )
        self.model = model
        self.utility_model = utility_model or model
        self._key_env = key_env
        self.stop = stop
        self.system_role = system_role
        self._where = f"the model server at {self.base_url}"

    @classmethod
    def from_config(cls, config: Config) -> OpenAICompatBrain:
        if not (config.openai.base_url and config.openai.model):
            raise BrainNotConfigured("the OpenAI-compatible brain needs openai.base_url and model")
        timeout = config.brain.timeout_s
        client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(timeout, connect=min(_CONNECT_TIMEOUT_S, timeout)),
        )
        return cls(
            client,
            base_url=config.openai.base_url,
            model=config.openai.model,
            utility_model=config.openai.utility_model,
            retry=RetryPolicy(max_retries=config.brain.max_retries),
            key_env=config.openai.api_key_env,
            api_key=config.openai_api_key,
            stop=config.openai.stop,
            system_role=config.openai.system_role,
        )

    @property
    def name(self) -> str:
        return "openai"

    def model_for(self, purpose: Purpose) -> str:
        return self.utility_model if purpose is Purpose.UTILITY else self.model

    def _body(self, request: BrainRequest, *, stream: bool) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [
            {"role": m.role, "content": m.text} for m in request.messages
        ]
        # The same order as Claude's (no cache marks here: servers that cache prefixes do
        # it by themselves): stable system text, the history, then the per-turn blocks
        # framed ahead of the person's words in the final user message.
        frame = turn_frame(request.turn_blocks())
        if frame and messages and messages[-1]["role"] == "user":
            said = defuse_turn_tags(str(messages[-1]["content"]))
            messages[-1] = {"role": "user", "content": f"{frame}\n\n{said}"}
        elif frame:
            messages.append({"role": "user", "content": frame})
        system = "\n\n".join(b.text for b in request.prefix_blocks())
        if system and self.system_role == "user":
            if messages and messages[0]["role"] == "user":
                messages[0] = {"role": "user", "content": f"{system}\n\n{messages[0]['content']}"}
            else:
                messages.insert(0, {"role": "user", "content": system})
        elif system:
            messages.insert(0, {"role": "system", "content": system})
        body: dict[str, Any] = {
            "model": self.model_for(request.purpose),
            "messages": messages,
            "max_tokens": request.max_tokens,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
            body["tool_choice"] = "auto" if request.tools_allowed else "none"
            messages.extend(round_messages(request.tool_rounds))
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if self.stop:
            # The server cuts the answer before the first of these and leaves it out.
            body["stop"] = list(self.stop)
        return body

    def map_error(self, exc: Exception, *, started: bool = False) -> BrainError:
        where = self._where
        if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
            return BrainTimeout(f"{where}: no answer in time")
        if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
            # Once text streamed, the base makes this BrainInterrupted.
            return BrainUnavailable(f"{where} could not be reached: {exc.__cause__ or exc!r}")
        if isinstance(exc, openai.APIStatusError):
            return status_error(
                exc.status_code, _status_detail(exc), where=where, key_env=self._key_env
            )
        if isinstance(exc, json.JSONDecodeError):
            return BrainInterrupted(f"{where} sent a chunk that is not JSON")
        if isinstance(exc, openai.APIError) and isinstance(exc.body, dict):
            # An ``error`` chunk inside a 200 stream (vLLM, llama.cpp). Before any text its
            # code decides, as an HTTP status would; after, the answer stopped.
            detail = error_detail(json.dumps({"error": exc.body}).encode())
            code = exc.body.get("code")
            if isinstance(code, int) and not started:
                return status_error(code, detail, where=where, key_env=self._key_env)
            return BrainInterrupted(f"{where}'s answer stopped with an error: {detail}")
        return BrainUnavailable(f"{where}: {exc.__class__.__name__}: {exc}")

    def ended_early(self) -> str:
        # Every choice ends with a finish_reason. A stream without one is an answer cut
        # short: llama-cpp-python's server ends a stream with [DONE] alone when another
        # request arrives (interrupt_requests, on by default). Stored, it would look like
        # a whole reply. (The SDK stops at [DONE] or at the stream's end alike.)
        return f"{self._where}: the answer was cut short (no finish_reason before [DONE])"

    async def raw_stream(self, request: BrainRequest) -> AsyncGenerator[RawEvent, None]:
        body = self._body(request, stream=True)
        model = str(body["model"])
        usage = Usage()
        finish_reason = ""
        # Tool calls by index: [id, name, the arguments' JSON text as it streams].
        calls: dict[int, list[str]] = {}
        chunks = await self._client.chat.completions.create(**body)
        async with chunks:
            async for chunk in chunks:
                model = chunk.model or model
                if chunk.usage is not None:
                    usage = usage_of(chunk.usage.model_dump())
                for choice in chunk.choices or ():
                    text = choice.delta.content if choice.delta is not None else None
                    if text:
                        yield TextDelta(text)
                    for piece in (
                        choice.delta.tool_calls if choice.delta is not None else None
                    ) or ():
                        call = calls.setdefault(piece.index, ["", "", ""])
                        call[0] = piece.id or call[0]
                        if piece.function is not None:
                            call[1] = piece.function.name or call[1]
                            call[2] += piece.function.arguments or ""
                    finish_reason = choice.finish_reason or finish_reason
        for index in sorted(calls):
            call_id, name, arguments = calls[index]
            yield ToolCall(call_id or f"call_{index}", name, arguments or "{}")
        if finish_reason:
            yield StreamEnd(model=model, usage=usage, stop_reason=finish_reason)

    async def complete(self, request: BrainRequest) -> Completion:
        body = self._body(request, stream=False)
        try:
            answer = await self._client.chat.completions.create(**body)
        except (openai.APIResponseValidationError, json.JSONDecodeError) as exc:
            raise BrainUnavailable(f"{self._where} answered with an unexpected body") from exc
        except _FOREIGN_ERRORS as exc:
            raise self.map_error(exc) from exc
        try:
            choice = answer.choices[0]
            text = choice.message.content or ""
            usage = usage_of(answer.usage.model_dump() if answer.usage is not None else {})
        except (IndexError, AttributeError, TypeError) as exc:
            raise BrainUnavailable(f"{self._where} answered with an unexpected body") from exc
        return Completion(
            text=str(text),
            model=str(answer.model or body["model"]),
            usage=usage,
            stop_reason=str(choice.finish_reason or "stop"),
        )

    async def list_models(self) -> list[str]:
        """GET {base_url}/models: the model ids the server offers (``agentgw doctor``)."""
        try:
            page = await self._client.models.list()
            return [str(item.id) for item in page.data]
        except (openai.APIResponseValidationError, json.JSONDecodeError) as exc:
            raise BrainUnavailable(f"{self._where}: /models answered an unexpected body") from exc
        except _FOREIGN_ERRORS as exc:
            raise self.map_error(exc) from exc

    async def aclose(self) -> None:
        await self._client.close()


def round_messages(rounds: tuple[ToolRound, ...]) -> list[dict[str, Any]]:
    """Each tool round as Chat Completions has it: the assistant message with its
    ``tool_calls``, then one ``tool`` message per result."""
    out: list[dict[str, Any]] = []
    for step in rounds:
        out.append(
            {
                "role": "assistant",
                "content": step.text or None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in step.calls
                ],
            }
        )
        out.extend(
            {"role": "tool", "tool_call_id": result.call_id, "content": result.text}
            for result in step.results
        )
    return out


def usage_of(raw: dict[str, Any]) -> Usage:
    details = raw.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt = int(raw.get("prompt_tokens") or 0)
    cache_read = int(cached or 0)
    # OpenAI counts cached tokens inside prompt_tokens; ours keeps them apart, as Claude does.
    return Usage(
        input_tokens=max(0, prompt - cache_read),
        output_tokens=int(raw.get("completion_tokens") or 0),
        cache_read_tokens=cache_read,
    )

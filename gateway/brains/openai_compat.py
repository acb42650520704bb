"""A local model behind an OpenAI-compatible endpoint: Ollama, llama.cpp server, vLLM.

``POST {base_url}/chat/completions`` with ``stream: true`` answers in SSE
``data:`` lines ending with ``data: [DONE]``; ``stream_options.include_usage``
asks for a last chunk with the token counts. This adapter owns the single
retry layer of its path: 429, 5xx and connection failures are retried before
the first byte of an answer, with capped exponential backoff that honours
``Retry-After`` (and ``retry-after-ms``); once an answer streams, a failure
is final, so a person never sees text twice.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from gateway.brains.base import (
    BrainEvent,
    BrainRequest,
    Completion,
    Purpose,
    TextDelta,
    Usage,
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

_RETRY_STATUSES = frozenset({408, 409, 429})
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


def retry_after_seconds(headers: httpx.Headers) -> float | None:
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


def transport_error(exc: httpx.HTTPError, *, where: str, started: bool) -> BrainError:
    if isinstance(exc, httpx.TimeoutException):
        return BrainTimeout(f"{where}: no answer in time")
    if started:
        return BrainInterrupted(f"{where}'s answer broke off: {exc!r}")
    return BrainUnavailable(f"{where} could not be reached: {exc!r}")


class OpenAICompatBrain:
    """A ``Brain`` for any server speaking the OpenAI chat completions API."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        base_url: str,
        model: str,
        utility_model: str = "",
        retry: RetryPolicy | None = None,
        key_env: str = "OPENAI_API_KEY",
        stop: tuple[str, ...] = (),
        system_role: Literal["system", "user"] = "system",
    ) -> None:
        self._client = client
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.utility_model = utility_model or model
        self.retry = retry or RetryPolicy()
        self._key_env = key_env
        self.stop = stop
        self.system_role = system_role
        self._where = f"the model server at {self.base_url}"

    @classmethod
    def from_config(cls, config: Config) -> OpenAICompatBrain:
        if not (config.openai.base_url and config.openai.model):
            raise BrainNotConfigured("the OpenAI-compatible brain needs openai.base_url and model")
        headers: dict[str, str] = {}
        if config.openai_api_key:
            headers["Authorization"] = f"Bearer {config.openai_api_key}"
        timeout = config.brain.timeout_s
        client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(_CONNECT_TIMEOUT_S, timeout)),
        )
        return cls(
            client,
            base_url=config.openai.base_url,
            model=config.openai.model,
            utility_model=config.openai.utility_model,
            retry=RetryPolicy(max_retries=config.brain.max_retries),
            key_env=config.openai.api_key_env,
            stop=config.openai.stop,
            system_role=config.openai.system_role,
        )

    @property
    def name(self) -> str:
        return "openai"

    def model_for(self, purpose: Purpose) -> str:
        return self.utility_model if purpose is Purpose.UTILITY else self.model

    def _body(self, request: BrainRequest, *, stream: bool) -> dict[str, Any]:
        messages: list[dict[str, str]] = [
            {"role": m.role, "content": m.text} for m in request.messages
        ]
        system = request.system_text() if request.system else ""
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
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if self.stop:
            # The server cuts the answer before the first of these and leaves it out.
            body["stop"] = list(self.stop)
        return body

    async def _open(self, body: dict[str, Any]) -> httpx.Response:
        """A 200 response whose body is not read yet, after the retries it took to get one.

        The caller closes it.
        """
        url = f"{self.base_url}/chat/completions"
        attempt = 0
        while True:
            try:
                response = await self._client.send(
                    self._client.build_request("POST", url, json=body), stream=True
                )
            except httpx.HTTPError as exc:
                wait = self.retry.delay(attempt, None)
                if wait is None:
                    raise transport_error(exc, where=self._where, started=False) from exc
            else:
                if response.status_code == 200:
                    return response
                try:
                    raw = await response.aread()
                except httpx.HTTPError:
                    raw = b""  # the status alone says enough
                finally:
                    await response.aclose()
                status = response.status_code
                retryable = status in _RETRY_STATUSES or status >= 500
                wait = self.retry.delay(attempt, retry_after_seconds(response.headers))
                if wait is None or not retryable:
                    raise status_error(
                        status, error_detail(raw), where=self._where, key_env=self._key_env
                    )
            attempt += 1
            await asyncio.sleep(wait)

    async def stream(self, request: BrainRequest) -> AsyncIterator[BrainEvent]:
        body = self._body(request, stream=True)
        model = str(body["model"])
        parts: list[str] = []
        usage = Usage()
        finish_reason = ""
        done = False
        response = await self._open(body)
        try:
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, ": keep-alive" comments, event names
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = self._parse_chunk(data, started=bool(parts))
                model = str(chunk.get("model") or model)
                if isinstance(chunk.get("usage"), dict):
                    usage = usage_of(chunk["usage"])
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    text = delta.get("content")
                    if isinstance(text, str) and text:
                        parts.append(text)
                        yield TextDelta(text)
                    finish_reason = choice.get("finish_reason") or finish_reason
        except httpx.HTTPError as exc:
            raise transport_error(exc, where=self._where, started=bool(parts)) from exc
        finally:
            await response.aclose()
        if not done:
            raise BrainInterrupted(f"{self._where}: the answer ended before [DONE]")
        if not finish_reason:
            # Every choice ends with a finish_reason. A [DONE] without one is an answer
            # cut short: llama-cpp-python's server ends a stream that way when another
            # request arrives (interrupt_requests, on by default). Stored, it would
            # look like a whole reply.
            raise BrainInterrupted(f"{self._where}: the answer was cut short (no finish_reason)")
        yield Completion(text="".join(parts), model=model, usage=usage, stop_reason=finish_reason)

    def _parse_chunk(self, data: str, *, started: bool) -> dict[str, Any]:
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise BrainInterrupted(f"{self._where} sent a chunk that is not JSON") from exc
        if not isinstance(chunk, dict):
            raise BrainInterrupted(f"{self._where} sent a chunk that is not a JSON object")
        error = chunk.get("error")
        if error is not None:
            # Servers report failures inside a 200 stream this way (vLLM, llama.cpp).
            detail = error_detail(json.dumps(chunk).encode())
            status = error.get("code") if isinstance(error, dict) else None
            if isinstance(status, int) and not started:
                raise status_error(status, detail, where=self._where, key_env=self._key_env)
            raise BrainInterrupted(f"{self._where}'s answer stopped with an error: {detail}")
        return chunk

    async def complete(self, request: BrainRequest) -> Completion:
        body = self._body(request, stream=False)
        response = await self._open(body)
        try:
            raw = await response.aread()
        except httpx.HTTPError as exc:
            raise transport_error(exc, where=self._where, started=True) from exc
        finally:
            await response.aclose()
        try:
            data = json.loads(raw)
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BrainUnavailable(f"{self._where} answered with an unexpected body") from exc
        return Completion(
            text=str(text),
            model=str(data.get("model") or body["model"]),
            usage=usage_of(data.get("usage") or {}),
            stop_reason=str(choice.get("finish_reason") or "stop"),
        )

    async def list_models(self) -> list[str]:
        """GET {base_url}/models: the model ids the server offers (``agentgw doctor``)."""
        try:
            response = await self._client.get(f"{self.base_url}/models")
        except httpx.HTTPError as exc:
            raise transport_error(exc, where=self._where, started=False) from exc
        if response.status_code != 200:
            raise status_error(
                response.status_code,
                error_detail(response.content),
                where=self._where,
                key_env=self._key_env,
            )
        try:
            data = response.json()["data"]
            return [str(item["id"]) for item in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise BrainUnavailable(f"{self._where}: /models answered an unexpected body") from exc

    async def aclose(self) -> None:
        await self._client.aclose()


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

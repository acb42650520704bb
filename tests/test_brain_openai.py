"""OpenAICompatBrain over real HTTP against the fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import dataclasses
import email.utils
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from gateway.brains.base import (
    BrainRequest,
    Purpose,
)
from gateway.brains.openai_compat import OpenAICompatBrain, RetryPolicy, retry_after_seconds
from gateway.config import Config, OpenAIConfig, load_config
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
from gateway.testing.fake_openai import FakeOpenAI
from tests.brain_support import collect, sample_request

KEY = "local-secret"
REPLY = "A local model answers, a few characters at a time."
PERSONA = "You are Ada, a calm and precise assistant. " * 10


def openai_config(tmp_path: Path, base_url: str, key: str = KEY, **brain: Any) -> Config:
    toml = tmp_path / "agentgw.toml"
    toml.touch()
    return load_config(
        toml,
        env={"OPENAI_API_KEY": key} if key else {},
        overrides={
            "store": {"data_dir": str(tmp_path / "data")},
            "brain": {"timeout_s": 5.0, "max_retries": 2, **brain},
            "openai": {
                "base_url": base_url,
                "model": "llama3.2:3b",
                "utility_model": "qwen2.5:0.5b",
            },
        },
    )


def request(purpose: Purpose = Purpose.REPLY, text: str = "How are you?") -> BrainRequest:
    return sample_request(PERSONA, purpose, text, temperature=0.5)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(reply=REPLY, api_key=KEY) as server:
        yield server


@pytest.fixture
async def brain(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[OpenAICompatBrain]:
    local = OpenAICompatBrain.from_config(openai_config(tmp_path, fake.base_url))
    yield local
    await local.aclose()


async def test_streams_text_and_usage_with_cached_prefix(
    brain: OpenAICompatBrain, fake: FakeOpenAI
) -> None:
    deltas, first = await collect(brain, request())
    assert len(deltas) > 1
    assert "".join(deltas) == first.text == REPLY
    assert first.model == "llama3.2:3b"
    assert first.stop_reason == "stop"
    assert first.usage.input_tokens > 0
    assert first.usage.output_tokens > 0
    assert first.usage.cache_read_tokens == 0

    _, second = await collect(brain, request(text="And now?"))
    # The system message and the first two messages are a prefix the server saw.
    assert second.usage.cache_read_tokens > 0
    assert second.usage.input_tokens < first.usage.input_tokens


async def test_request_shape_system_joined_usage_asked_bearer_key(
    brain: OpenAICompatBrain, fake: FakeOpenAI
) -> None:
    await collect(brain, request())
    sent = fake.chat_requests[-1]
    assert sent.body["messages"] == [
        {"role": "system", "content": PERSONA + "\n\nThe message arrived via webchat."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "How are you?"},
    ]
    assert sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["max_tokens"] == 200
    assert sent.body["temperature"] == 0.5
    assert sent.headers["authorization"] == f"Bearer {KEY}"


async def test_stop_sequences_are_sent_only_when_configured(
    tmp_path: Path, brain: OpenAICompatBrain, fake: FakeOpenAI
) -> None:
    await collect(brain, request())
    assert "stop" not in fake.chat_requests[-1].body
    config = openai_config(tmp_path, fake.base_url)
    config = config.replace(openai=dataclasses.replace(config.openai, stop=("\nUser:", "###")))
    stopping = OpenAICompatBrain.from_config(config)
    try:
        await collect(stopping, request())
        await stopping.complete(request(Purpose.UTILITY))
    finally:
        await stopping.aclose()
    streamed, whole = fake.chat_requests[-2:]
    assert streamed.body["stop"] == whole.body["stop"] == ["\nUser:", "###"]


async def test_system_role_user_puts_the_system_text_in_the_first_user_message(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    config = openai_config(tmp_path, fake.base_url)
    config = config.replace(openai=dataclasses.replace(config.openai, system_role="user"))
    folded = OpenAICompatBrain.from_config(config)
    try:
        await collect(folded, request())
        await folded.complete(dataclasses.replace(request(), messages=()))
    finally:
        await folded.aclose()
    system = PERSONA + "\n\nThe message arrived via webchat."
    assert fake.chat_requests[-2].body["messages"] == [
        {"role": "user", "content": system + "\n\nHi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "How are you?"},
    ]
    # With no user message to open, the system text is one.
    assert fake.chat_requests[-1].body["messages"] == [{"role": "user", "content": system}]


async def test_utility_purpose_uses_the_utility_model(
    brain: OpenAICompatBrain, fake: FakeOpenAI
) -> None:
    fake.script = ['{"score": 0.9}']
    completion = await brain.complete(request(Purpose.UTILITY))
    assert completion.text == '{"score": 0.9}'
    assert completion.model == "qwen2.5:0.5b"
    assert fake.chat_requests[-1].body["model"] == "qwen2.5:0.5b"
    assert fake.chat_requests[-1].body["stream"] is False
    assert completion.usage.output_tokens > 0


async def test_utility_model_falls_back_to_the_model(tmp_path: Path, fake: FakeOpenAI) -> None:
    config = openai_config(tmp_path, fake.base_url)
    config = config.replace(openai=OpenAIConfig(base_url=fake.base_url, model="llama3.2:3b"))
    brain = OpenAICompatBrain.from_config(config)
    try:
        await brain.complete(request(Purpose.UTILITY))
    finally:
        await brain.aclose()
    assert fake.chat_requests[-1].body["model"] == "llama3.2:3b"


async def test_a_429_then_success_is_retried_once_honouring_retry_after(
    brain: OpenAICompatBrain, fake: FakeOpenAI
) -> None:
    fake.fail(429, retry_after_s=0.01)
    _, completion = await collect(brain, request())
    assert completion.text == REPLY
    assert len(fake.chat_requests) == 2
    assert fake.chat_requests[0].fault is not None
    assert fake.chat_requests[1].fault is None


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (500, BrainUnavailable),
        (503, BrainUnavailable),
        (529, BrainOverloaded),
        (429, BrainRateLimited),
    ],
)
async def test_persistent_errors_map_after_max_retries_plus_one_attempts(
    brain: OpenAICompatBrain, fake: FakeOpenAI, status: int, expected: type[BrainError]
) -> None:
    fake.fail(status, times=3, retry_after_s=0.01)
    with pytest.raises(expected, match=f"HTTP {status}"):
        await collect(brain, request())
    assert len(fake.chat_requests) == 3
    assert fake.pending_faults == 0


async def test_a_request_error_is_not_retried(brain: OpenAICompatBrain, fake: FakeOpenAI) -> None:
    fake.fail(400, times=3)
    with pytest.raises(BrainRejected, match="HTTP 400"):
        await collect(brain, request())
    assert len(fake.chat_requests) == 1


async def test_connection_failures_are_retried_then_unavailable(tmp_path: Path) -> None:
    async with FakeOpenAI() as gone:
        url = gone.base_url
    attempts: list[httpx2.Request] = []

    async def count(sent: httpx2.Request) -> None:
        attempts.append(sent)

    brain = OpenAICompatBrain(
        httpx2.AsyncClient(event_hooks={"request": [count]}),
        base_url=url,
        model="m",
        retry=RetryPolicy(max_retries=2, initial_delay_s=0.01),
    )
    try:
        with pytest.raises(BrainUnavailable, match="could not be reached") as raised:
            await collect(brain, request())
    finally:
        await brain.aclose()
    # The SDK's error, with the transport's own as its cause.
    assert isinstance(raised.value.__cause__, openai.APIConnectionError)
    assert isinstance(raised.value.__cause__.__cause__, httpx2.ConnectError)
    assert len(attempts) == 3


async def test_no_answer_within_the_timeout_is_brain_timeout(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    brain = OpenAICompatBrain.from_config(
        openai_config(tmp_path, fake.base_url, timeout_s=0.3, max_retries=0)
    )
    fake.delay(3.0)
    try:
        with pytest.raises(BrainTimeout) as raised:
            await collect(brain, request())
    finally:
        await brain.aclose()
    assert isinstance(raised.value.__cause__, openai.APITimeoutError)
    assert isinstance(raised.value.__cause__.__cause__, httpx2.ReadTimeout)
    assert len(fake.chat_requests) == 1


async def test_a_stream_cut_mid_answer_is_interrupted_and_never_retried(
    brain: OpenAICompatBrain, fake: FakeOpenAI
) -> None:
    fake.break_stream(after_deltas=2)
    deltas: list[str] = []
    with pytest.raises(BrainInterrupted) as raised:
        await collect(brain, request(), deltas)
    assert len(deltas) == 2
    assert isinstance(raised.value.__cause__, openai.APIConnectionError)
    assert isinstance(raised.value.__cause__.__cause__, httpx2.HTTPError)
    assert len(fake.chat_requests) == 1


async def test_a_stream_without_done_is_interrupted(
    brain: OpenAICompatBrain, fake: FakeOpenAI
) -> None:
    fake.truncate_stream(after_deltas=3)
    with pytest.raises(BrainInterrupted, match=r"\[DONE\]"):
        await collect(brain, request())


async def test_done_without_a_finish_reason_is_an_answer_cut_short(
    brain: OpenAICompatBrain, fake: FakeOpenAI
) -> None:
    """llama-cpp-python's server ends a stream it interrupts with [DONE] alone."""
    fake.cut_short(after_deltas=3)
    deltas: list[str] = []
    with pytest.raises(BrainInterrupted, match="cut short"):
        await collect(brain, request(), deltas)
    assert len(deltas) == 3


async def test_an_error_chunk_in_the_stream_is_interrupted(
    brain: OpenAICompatBrain, fake: FakeOpenAI
) -> None:
    fake.stream_error("overloaded_error", after_deltas=2)
    with pytest.raises(BrainInterrupted, match="overloaded_error"):
        await collect(brain, request())
    # Before any text, the chunk's status decides, as an HTTP status would.
    fake.stream_error("overloaded_error", after_deltas=0)
    with pytest.raises(BrainOverloaded):
        await collect(brain, request())
    assert len(fake.chat_requests) == 2


async def test_malformed_answers_are_brain_errors(
    brain: OpenAICompatBrain, fake: FakeOpenAI
) -> None:
    fake.malformed()
    with pytest.raises(BrainInterrupted, match="not JSON"):
        await collect(brain, request())
    fake.malformed()
    with pytest.raises(BrainUnavailable, match="unexpected body"):
        await brain.complete(request(Purpose.UTILITY))
    _, completion = await collect(brain, request())
    assert completion.text == REPLY


async def test_a_wrong_key_is_rejected_with_a_message_about_the_key(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    brain = OpenAICompatBrain.from_config(openai_config(tmp_path, fake.base_url, key="wrong"))
    try:
        with pytest.raises(BrainRejected, match=r"API key.*OPENAI_API_KEY"):
            await collect(brain, request())
    finally:
        await brain.aclose()
    assert len(fake.chat_requests) == 1


async def test_not_configured_without_base_url(tmp_path: Path) -> None:
    config = openai_config(tmp_path, "http://127.0.0.1:9")
    config = config.replace(openai=OpenAIConfig())
    with pytest.raises(BrainNotConfigured):
        OpenAICompatBrain.from_config(config)


async def test_list_models(brain: OpenAICompatBrain, fake: FakeOpenAI) -> None:
    assert await brain.list_models() == ["llama3.2:3b", "qwen2.5:0.5b"]
    assert fake.requests[-1].path == "/v1/models"


def test_retry_policy_caps_backoff_and_refuses_long_waits() -> None:
    policy = RetryPolicy(max_retries=10, initial_delay_s=0.5, max_delay_s=8.0, max_retry_after_s=60)
    waits = [policy.delay(attempt, None) for attempt in range(10)]
    assert all(w is not None and 0 < w <= 8.0 for w in waits)
    assert waits[9] is not None
    assert waits[9] >= 8.0 * 0.75
    assert policy.delay(0, 2.5) == 2.5
    assert policy.delay(0, 120.0) is None
    assert policy.delay(10, None) is None


def test_retry_after_header_forms() -> None:
    assert retry_after_seconds(httpx2.Headers({"retry-after-ms": "250"})) == 0.25
    assert retry_after_seconds(httpx2.Headers({"Retry-After": "3"})) == 3.0
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    parsed = retry_after_seconds(httpx2.Headers({"Retry-After": later}))
    assert parsed is not None
    assert 25 < parsed <= 30
    assert retry_after_seconds(httpx2.Headers({})) is None


@dataclasses.dataclass(frozen=True)
class RecordingPolicy(RetryPolicy):
    """A policy that notes each wait the SDK asks it for."""

    asked: list[tuple[int, float | None]] = dataclasses.field(default_factory=list)

    def delay(self, attempt: int, retry_after_s: float | None) -> float | None:
        self.asked.append((attempt, retry_after_s))
        return super().delay(attempt, retry_after_s)


async def test_the_sdk_waits_as_our_retry_policy_says(fake: FakeOpenAI) -> None:
    policy = RecordingPolicy(max_retries=2, initial_delay_s=0.01)
    brain = OpenAICompatBrain(
        httpx2.AsyncClient(), base_url=fake.base_url, model="m", api_key=KEY, retry=policy
    )
    fake.fail(503, times=2, retry_after_s=0.02)
    try:
        _, completion = await collect(brain, request())
    finally:
        await brain.aclose()
    assert completion.text == REPLY
    assert policy.asked == [(0, 0.02), (1, 0.02)]


async def test_a_retry_after_past_our_cap_is_not_waited_for(fake: FakeOpenAI) -> None:
    """The SDK alone would wait up to 120 s; our policy's cap is what counts."""
    policy = RetryPolicy(max_retries=2, max_retry_after_s=0.05)
    brain = OpenAICompatBrain(
        httpx2.AsyncClient(), base_url=fake.base_url, model="m", api_key=KEY, retry=policy
    )
    fake.fail(429, times=3, retry_after_s=0.5)
    try:
        with pytest.raises(BrainRateLimited):
            await collect(brain, request())
    finally:
        await brain.aclose()
    assert len(fake.chat_requests) == 1


async def test_without_a_key_no_authorization_header_is_sent() -> None:
    async with FakeOpenAI(reply=REPLY) as keyless:
        brain = OpenAICompatBrain(httpx2.AsyncClient(), base_url=keyless.base_url, model="m")
        try:
            _, completion = await collect(brain, request())
        finally:
            await brain.aclose()
        assert completion.text == REPLY
        assert "authorization" not in keyless.chat_requests[-1].headers

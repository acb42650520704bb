"""ClaudeBrain through the real anthropic SDK against the fake Messages API on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from gateway.brains.base import (
    BrainRequest,
    Purpose,
)
from gateway.brains.claude import ClaudeBrain
from gateway.config import Config, load_config
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
from gateway.testing.fake_anthropic import DEFAULT_MODELS, FakeAnthropic
from tests.brain_support import collect, sample_request

KEY = "sk-ant-test-key"
REPLY = "Hello there, this reply streams in several small pieces."
PERSONA = "You are Ada, a calm and precise assistant. " * 20
# The SDK warns (an error under pytest) on models it lists as deprecated; these
# are current ones and the config's defaults.
REPLY_MODEL = "claude-sonnet-5-5"
UTILITY_MODEL = "claude-haiku-5-5"


def claude_config(tmp_path: Path, base_url: str, key: str = KEY, **brain: Any) -> Config:
    """A config as ``agentgw`` would load it with the standard Anthropic variables set."""
    toml = tmp_path / "agentgw.toml"
    toml.touch()
    return load_config(
        toml,
        env={"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": base_url},
        overrides={
            "store": {"data_dir": str(tmp_path / "data")},
            "brain": {"timeout_s": 5.0, "max_retries": 2, **brain},
            "claude": {"reply_model": REPLY_MODEL, "utility_model": UTILITY_MODEL},
        },
    )


def request(purpose: Purpose = Purpose.REPLY, text: str = "How are you?") -> BrainRequest:
    return sample_request(PERSONA, purpose, text)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(reply=REPLY, api_key=KEY) as server:
        yield server


@pytest.fixture
async def brain(tmp_path: Path, fake: FakeAnthropic) -> AsyncIterator[ClaudeBrain]:
    claude = ClaudeBrain.from_config(claude_config(tmp_path, fake.base_url))
    yield claude
    await claude.aclose()


async def brain_with(tmp_path: Path, fake: FakeAnthropic, **brain: Any) -> ClaudeBrain:
    return ClaudeBrain.from_config(claude_config(tmp_path, fake.base_url, **brain))


async def test_streams_text_and_usage_with_cache_tokens(
    brain: ClaudeBrain, fake: FakeAnthropic
) -> None:
    deltas, first = await collect(brain, request())
    assert len(deltas) > 1
    assert "".join(deltas) == first.text == REPLY
    assert first.model == REPLY_MODEL
    assert first.stop_reason == "end_turn"
    assert first.usage.output_tokens > 0
    # First sight of the persona prefix: written to the cache, nothing read.
    assert first.usage.cache_write_tokens > 0
    assert first.usage.cache_read_tokens == 0
    assert first.usage.input_tokens > 0

    _, second = await collect(brain, request(text="And now?"))
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    assert second.usage.cache_write_tokens == 0
    assert len(fake.message_requests) == 2


async def test_system_blocks_carry_cache_control_only_where_asked(
    brain: ClaudeBrain, fake: FakeAnthropic
) -> None:
    await collect(brain, request())
    sent = fake.message_requests[-1]
    assert sent.body["system"] == [
        {"type": "text", "text": PERSONA, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "The message arrived via webchat."},
    ]
    assert sent.body["messages"] == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "How are you?"},
    ]
    assert sent.body["stream"] is True
    assert sent.body["max_tokens"] == 200
    assert KEY in (sent.headers.get("x-api-key", "") + sent.headers.get("authorization", ""))


async def test_utility_purpose_uses_the_utility_model(
    brain: ClaudeBrain, fake: FakeAnthropic
) -> None:
    fake.script = ['{"score": 0.9}']
    completion = await brain.complete(request(Purpose.UTILITY))
    assert completion.text == '{"score": 0.9}'
    assert completion.model == UTILITY_MODEL
    sent = fake.message_requests[-1].body
    assert sent["model"] == UTILITY_MODEL
    assert "stream" not in sent
    _, reply = await collect(brain, request(Purpose.REPLY))
    assert fake.message_requests[-1].body["model"] == reply.model == REPLY_MODEL


async def test_a_429_then_success_is_retried_once_by_the_sdk(
    brain: ClaudeBrain, fake: FakeAnthropic
) -> None:
    fake.fail(429, retry_after_s=0.01)
    _, completion = await collect(brain, request())
    assert completion.text == REPLY
    attempts = fake.message_requests
    assert len(attempts) == 2
    assert attempts[0].fault is not None
    assert attempts[0].fault.status == 429
    assert attempts[1].fault is None
    assert attempts[1].headers.get("x-stainless-retry-count") == "1"


@pytest.mark.parametrize(
    ("status", "expected"),
    [(500, BrainUnavailable), (529, BrainOverloaded), (429, BrainRateLimited)],
)
async def test_persistent_errors_map_after_max_retries_plus_one_attempts(
    tmp_path: Path, fake: FakeAnthropic, status: int, expected: type[BrainError]
) -> None:
    brain = await brain_with(tmp_path, fake, max_retries=2)
    fake.fail(status, times=3, retry_after_s=0.01)
    try:
        with pytest.raises(expected) as raised:
            await collect(brain, request())
    finally:
        await brain.aclose()
    assert len(fake.message_requests) == 3
    assert fake.pending_faults == 0
    assert isinstance(raised.value.__cause__, anthropic.APIStatusError)
    assert raised.value.__cause__.status_code == status


async def test_no_answer_within_the_timeout_is_brain_timeout(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    brain = await brain_with(tmp_path, fake, timeout_s=0.3, max_retries=0)
    fake.delay(3.0)
    try:
        with pytest.raises(BrainTimeout) as raised:
            await collect(brain, request())
    finally:
        await brain.aclose()
    assert isinstance(raised.value.__cause__, anthropic.APITimeoutError)
    assert len(fake.message_requests) == 1


async def test_a_stream_that_stalls_mid_answer_is_brain_timeout(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    brain = await brain_with(tmp_path, fake, timeout_s=0.3, max_retries=2)
    fake.delay(3.0, after_deltas=2)
    deltas: list[str] = []
    try:
        with pytest.raises(BrainTimeout):
            await collect(brain, request(), deltas)
    finally:
        await brain.aclose()
    assert len(deltas) == 2
    # Once text has streamed, nothing is retried.
    assert len(fake.message_requests) == 1


async def test_a_stream_cut_mid_answer_is_interrupted_and_not_retried(
    brain: ClaudeBrain, fake: FakeAnthropic
) -> None:
    fake.break_stream(after_deltas=2)
    deltas: list[str] = []
    with pytest.raises(BrainInterrupted) as raised:
        await collect(brain, request(), deltas)
    assert len(deltas) == 2
    assert raised.value.__cause__ is not None
    assert len(fake.message_requests) == 1


async def test_a_connection_cut_before_any_answer_is_retried_by_the_sdk(
    brain: ClaudeBrain, fake: FakeAnthropic
) -> None:
    fake.break_stream()
    completion = await brain.complete(request(Purpose.UTILITY))
    assert completion.text == REPLY
    assert len(fake.message_requests) == 2
    assert fake.message_requests[0].fault is not None


async def test_a_stream_ending_without_message_stop_is_interrupted(
    brain: ClaudeBrain, fake: FakeAnthropic
) -> None:
    fake.truncate_stream(after_deltas=3)
    with pytest.raises(BrainInterrupted, match="message_stop"):
        await collect(brain, request())


async def test_an_overloaded_error_event_in_the_stream_is_brain_overloaded(
    brain: ClaudeBrain, fake: FakeAnthropic
) -> None:
    fake.stream_error("overloaded_error", after_deltas=1)
    with pytest.raises(BrainOverloaded) as raised:
        await collect(brain, request())
    assert isinstance(raised.value.__cause__, anthropic.APIStatusError)
    assert len(fake.message_requests) == 1


async def test_a_malformed_answer_is_a_brain_error_not_a_crash(
    brain: ClaudeBrain, fake: FakeAnthropic
) -> None:
    fake.malformed()
    with pytest.raises(BrainUnavailable, match="not JSON"):
        await collect(brain, request())
    fake.malformed()
    with pytest.raises(BrainUnavailable, match="not JSON"):
        await brain.complete(request(Purpose.UTILITY))
    # The same brain answers the next call normally.
    _, completion = await collect(brain, request())
    assert completion.text == REPLY


async def test_a_wrong_key_is_rejected_with_a_message_about_the_key(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    brain = ClaudeBrain.from_config(claude_config(tmp_path, fake.base_url, key="sk-wrong"))
    try:
        with pytest.raises(BrainRejected, match=r"API key.*ANTHROPIC_API_KEY") as raised:
            await collect(brain, request())
    finally:
        await brain.aclose()
    assert isinstance(raised.value.__cause__, anthropic.AuthenticationError)
    assert len(fake.message_requests) == 1  # a 401 is not retried


async def test_an_unreachable_api_is_brain_unavailable(tmp_path: Path) -> None:
    async with FakeAnthropic() as gone:
        url = gone.base_url
    brain = ClaudeBrain.from_config(claude_config(tmp_path, url, max_retries=0))
    try:
        with pytest.raises(BrainUnavailable) as raised:
            await collect(brain, request())
    finally:
        await brain.aclose()
    assert isinstance(raised.value.__cause__, anthropic.APIConnectionError)


async def test_no_key_means_not_configured(tmp_path: Path) -> None:
    with pytest.raises(BrainNotConfigured, match="ANTHROPIC_API_KEY"):
        ClaudeBrain.from_config(claude_config(tmp_path, "http://127.0.0.1:9", key=""))


async def test_list_models_goes_through_the_sdk(brain: ClaudeBrain, fake: FakeAnthropic) -> None:
    assert await brain.list_models() == list(DEFAULT_MODELS)
    assert fake.requests[-1].path == "/v1/models"

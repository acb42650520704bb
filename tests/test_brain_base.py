"""BaseBrain's streaming contract against a toy adapter whose raw stream a test scripts."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

import pytest

from gateway.brains.base import (
    BaseBrain,
    BlockKind,
    Brain,
    BrainRequest,
    ChatMessage,
    Completion,
    RawEvent,
    StreamEnd,
    SystemBlock,
    TextDelta,
    Usage,
)
from gateway.errors import BrainError, BrainInterrupted, BrainTimeout, BrainUnavailable
from tests.brain_support import collect


class SdkError(Exception):
    """What a toy SDK raises."""


@dataclass
class Step:
    """One scripted raw event, or an exception the raw stream raises at that point."""

    event: RawEvent | None = None
    error: Exception | None = None


class ToyBrain(BaseBrain):
    foreign_errors = (SdkError,)

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.mapped: list[tuple[SdkError, bool]] = []
        self.closed = False

    @property
    def name(self) -> str:
        return "toy"

    async def raw_stream(self, request: BrainRequest) -> AsyncGenerator[RawEvent, None]:
        try:
            for step in self.steps:
                if step.error is not None:
                    raise step.error
                assert step.event is not None
                yield step.event
        finally:
            self.closed = True  # where an adapter closes its HTTP response

    def map_error(self, exc: Exception, *, started: bool) -> BrainError:
        assert isinstance(exc, SdkError)
        self.mapped.append((exc, started))
        if "slow" in str(exc):
            return BrainTimeout("toy: no answer in time")
        return BrainUnavailable(f"toy could not be reached: {exc}")

    async def complete(self, request: BrainRequest) -> Completion:
        raise NotImplementedError

    async def aclose(self) -> None:
        pass


REQUEST = BrainRequest(
    system=(SystemBlock(BlockKind.PERSONA, "You are Ada."),),
    messages=(ChatMessage("user", "Hi"),),
)
END = StreamEnd(model="toy-1", usage=Usage(input_tokens=7, output_tokens=3), stop_reason="stop")


def text(*parts: str) -> list[Step]:
    return [Step(TextDelta(p)) for p in parts]


async def events(brain: Brain) -> list[object]:
    return [event async for event in brain.stream(REQUEST)]


async def test_a_whole_stream_ends_with_one_completion_of_the_streamed_text() -> None:
    brain = ToyBrain([*text("Hel", "", "lo"), Step(END)])
    seen = await events(brain)
    # Empty deltas are not passed on; the completion closes the stream, once.
    assert seen[:-1] == [TextDelta("Hel"), TextDelta("lo")]
    assert seen[-1] == Completion(
        text="Hello", model="toy-1", usage=END.usage, stop_reason="stop", written_by_model=True
    )
    assert isinstance(brain, Brain)


async def test_a_raw_stream_without_its_end_is_interrupted() -> None:
    deltas: list[str] = []
    with pytest.raises(BrainInterrupted, match="toy: the answer ended early"):
        await collect(ToyBrain(text("Hel", "lo")), REQUEST, deltas)
    assert deltas == ["Hel", "lo"]


async def test_text_after_the_end_is_interrupted() -> None:
    with pytest.raises(BrainInterrupted, match="after the answer ended"):
        await collect(ToyBrain([*text("Hi"), Step(END), *text("more")]), REQUEST)


async def test_a_foreign_error_before_text_is_mapped_with_the_original_as_cause() -> None:
    cause = SdkError("refused")
    brain = ToyBrain([Step(error=cause)])
    with pytest.raises(BrainUnavailable, match="could not be reached") as raised:
        await collect(brain, REQUEST)
    assert type(raised.value) is BrainUnavailable
    assert raised.value.__cause__ is cause
    assert brain.mapped == [(cause, False)]


@pytest.mark.parametrize(
    "error", [SdkError("connection reset"), BrainUnavailable("toy failed (HTTP 500)")]
)
async def test_unavailable_after_text_is_interrupted(error: Exception) -> None:
    """Foreign, or raised by the adapter itself: once text streamed, the answer broke off."""
    brain = ToyBrain([*text("Hel"), Step(error=error)])
    deltas: list[str] = []
    with pytest.raises(BrainInterrupted, match="toy's answer broke off") as raised:
        await collect(brain, REQUEST, deltas)
    assert deltas == ["Hel"]
    assert raised.value.__cause__ is error
    if isinstance(error, SdkError):
        assert brain.mapped == [(error, True)]


@pytest.mark.parametrize(
    "error", [SdkError("slow"), BrainTimeout("toy: stalled")], ids=["foreign", "ours"]
)
async def test_a_failure_that_names_its_cause_keeps_it_after_text(error: Exception) -> None:
    with pytest.raises(BrainTimeout):
        await collect(ToyBrain([*text("Hel"), Step(error=error)]), REQUEST)


async def test_a_bug_in_the_adapter_is_not_disguised_as_a_brain_error() -> None:
    with pytest.raises(ZeroDivisionError):
        await collect(ToyBrain([*text("Hel"), Step(error=ZeroDivisionError())]), REQUEST)


async def test_a_consumer_that_stops_early_closes_the_raw_stream_at_once() -> None:
    brain = ToyBrain([*text("Hel", "lo"), Step(END)])
    stream = brain.stream(REQUEST)
    assert isinstance(stream, AsyncGenerator)
    assert await anext(stream) == TextDelta("Hel")
    await stream.aclose()
    assert brain.closed

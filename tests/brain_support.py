"""What the brain adapter tests share: a typical reply request and a stream collector."""

from __future__ import annotations

from gateway.brains.base import (
    BlockKind,
    Brain,
    BrainRequest,
    ChatMessage,
    Completion,
    Purpose,
    SystemBlock,
    TextDelta,
)


def sample_request(
    persona: str,
    purpose: Purpose = Purpose.REPLY,
    text: str = "How are you?",
    temperature: float | None = None,
) -> BrainRequest:
    """A cached persona block, a guidance block and a short exchange ending in ``text``."""
    return BrainRequest(
        system=(
            SystemBlock(BlockKind.PERSONA, persona, cache=True),
            SystemBlock(BlockKind.GUIDANCE, "The message arrived via webchat."),
        ),
        messages=(
            ChatMessage("user", "Hi"),
            ChatMessage("assistant", "Hello!"),
            ChatMessage("user", text),
        ),
        purpose=purpose,
        max_tokens=200,
        temperature=temperature,
    )


async def collect(
    brain: Brain, req: BrainRequest, deltas: list[str] | None = None
) -> tuple[list[str], Completion]:
    """The deltas and the completion; ``deltas`` keeps what came before an error."""
    deltas = [] if deltas is None else deltas
    async for event in brain.stream(req):
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        else:
            return deltas, event
    raise AssertionError("the stream ended without a Completion")

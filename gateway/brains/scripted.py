"""A brain that follows a script: for tests and the gateway benchmark.

It records every request it gets, so tests can assert on the prompt, and can
be told to fail or stall on chosen calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from gateway.brains.base import (
    BrainEvent,
    BrainRequest,
    Completion,
    TextDelta,
    Usage,
    complete_from_stream,
)
from gateway.errors import BrainError

Reply = str | BrainError | Callable[[BrainRequest], str]


@dataclass
class ScriptedBrain:
    """Replies from ``script`` in order, then ``prefix`` + the last user message.

    A ``BrainError`` in the script is raised instead of answering; a callable
    is called with the request. ``chunk_chars`` splits the reply into deltas.
    """

    script: list[Reply] = field(default_factory=list)
    prefix: str = "You said: "
    delay_s: float = 0.0
    chunk_chars: int = 8
    model: str = "scripted-1"
    requests: list[BrainRequest] = field(default_factory=list)
    # Set to make every call wait until it is set (tests of ordering, shutdown).
    gate: asyncio.Event | None = None

    @property
    def name(self) -> str:
        return "scripted"

    def _next_reply(self, request: BrainRequest) -> str:
        if self.script:
            reply = self.script.pop(0)
            if isinstance(reply, BrainError):
                raise reply
            if callable(reply):
                return reply(request)
            return reply
        last = request.messages[-1].text if request.messages else ""
        return f"{self.prefix}{last}"

    async def stream(self, request: BrainRequest) -> AsyncIterator[BrainEvent]:
        self.requests.append(request)
        if self.gate is not None:
            await self.gate.wait()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        text = self._next_reply(request)
        for start in range(0, len(text), self.chunk_chars):
            yield TextDelta(text[start : start + self.chunk_chars])
        prompt_chars = len(request.system_text()) + sum(len(m.text) for m in request.messages)
        yield Completion(
            text=text,
            model=self.model,
            usage=Usage(input_tokens=prompt_chars // 4, output_tokens=len(text) // 4),
        )

    async def complete(self, request: BrainRequest) -> Completion:
        return await complete_from_stream(self, request)

    async def aclose(self) -> None:
        return None

"""The brain used when no model is configured.

It never pretends to be a model: it says plainly that none is configured,
how to configure one, and shows what the gateway remembers that bears on the
message (the memory block when the memory layer supplied one, otherwise the
earlier messages that share words with this one).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gateway.brains.base import (
    BlockKind,
    BrainEvent,
    BrainRequest,
    ChatMessage,
    Completion,
    TextDelta,
    Usage,
    complete_from_stream,
)

HOW_TO = (
    "No language model is configured, so I can't write a real reply yet.\n"
    "To give me one, either set ANTHROPIC_API_KEY (Claude) or point "
    "[openai] base_url and model in agentgw.toml at a local OpenAI-compatible "
    "server (Ollama, llama.cpp server, vLLM), then restart. "
    "`agentgw doctor` shows what is found."
)

_WORD = re.compile(r"[A-Za-z0-9']{3,}")
# Words too common to say that two messages are about the same thing.
_STOPWORD_TEXT = """the and for are but not you your with that this have has had was were what
when where who how why can could would should will just about from they them then than there
their our out all any been into its it's i'm i've don't did does do"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _words(text: str) -> set[str]:
    return {w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOPWORDS}


def related_messages(
    message: str, history: tuple[ChatMessage, ...], limit: int = 5
) -> list[ChatMessage]:
    """Earlier messages sharing the most content words with ``message``; never this
    brain's own earlier notices (each quoted the one before: they would nest)."""
    wanted = _words(message)
    if not wanted:
        return []
    scored = [
        (len(wanted & _words(m.text)), index, m)
        for index, m in enumerate(history)
        if not (m.role == "assistant" and m.text.startswith(HOW_TO))
    ]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], -s[1]))[:limit]
    return [m for _, _, m in sorted(best, key=lambda s: s[1])]


@dataclass
class OfflineBrain:
    @property
    def name(self) -> str:
        return "offline"

    def answer(self, request: BrainRequest) -> str:
        memory = [b.text for b in request.system if b.kind is BlockKind.MEMORY]
        parts = [HOW_TO]
        if memory:
            parts.append("What I remember that bears on your message:\n" + "\n".join(memory))
        elif request.messages:
            *history, last = request.messages
            related = related_messages(last.text, tuple(history))
            if related:
                lines = "\n".join(f"- {m.role}: {m.text}" for m in related)
                parts.append(f"Earlier in this conversation, related to your message:\n{lines}")
            else:
                parts.append("Nothing said earlier bears on this message.")
        return "\n\n".join(parts)

    async def stream(self, request: BrainRequest) -> AsyncIterator[BrainEvent]:
        text = self.answer(request)
        yield TextDelta(text)
        yield Completion(
            text=text, model="none", usage=Usage(), stop_reason="offline", written_by_model=False
        )

    async def complete(self, request: BrainRequest) -> Completion:
        return await complete_from_stream(self, request)

    async def aclose(self) -> None:
        return None

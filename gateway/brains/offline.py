"""The brain used when no model is configured.

It never pretends to be a model. The first time in a conversation it says
plainly that none is configured and how to configure one (the turns stored
for the conversation say whether it did: a restart does not make it repeat);
after that a short line says it. Each reply shows, for the person, what the
gateway remembers that bears on the message: the Memory Pack's kept items as
data (``BrainRequest.recall``), a dated list, never the prompt text the model
would read; "what do you remember about me?" lists what memory holds for
them, this conversation included. Without a memory layer, the earlier
messages that share words with this one.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date

from gateway.brains.base import (
    BrainEvent,
    BrainRequest,
    ChatMessage,
    Completion,
    Recall,
    Recollection,
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
# Ends every later reply: still honest that no model wrote it, in one line.
SHORT_NOTE = "(No language model is configured: this is what I remember, not a written reply.)"

_WORD = re.compile(r"[A-Za-z0-9']{3,}")
# Words too common to say that two messages are about the same thing.
_STOPWORD_TEXT = """the and for are but not you your with that this have has had was were what
when where who how why can could would should will just about from they them then than there
their our out all any been into its it's i'm i've don't did does do"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _words(text: str) -> set[str]:
    return {w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOPWORDS}


def is_notice(text: str) -> bool:
    """Whether an assistant message is one of this brain's replies."""
    return text.startswith(HOW_TO) or text.rstrip().endswith(SHORT_NOTE)


def _day(day: date) -> str:
    return f"{day.day} {day:%b %Y}"


def render_recollection(item: Recollection) -> str:
    """One memory for the person: its day, whose words or what kind, the text."""
    if item.kind == "episode":
        who = "you said" if item.role == "user" else "I said"
        return f"- {_day(item.day)}, {who}: {item.text}"
    return f"- {_day(item.day)} ({item.kind}): {item.text}"


def remembered(recall: Recall) -> str | None:
    """The memory part of the reply, or None when memory has nothing to show."""
    parts: list[str] = list(recall.notes)
    if recall.about_person is not None:
        if recall.about_person:
            lines = "\n".join(render_recollection(r) for r in recall.about_person)
            parts.append(f"What I remember about you, newest first:\n{lines}")
        else:
            parts.append("I don't remember anything about you yet.")
    elif recall.items:
        lines = "\n".join(render_recollection(r) for r in recall.items)
        parts.append(f"What I remember that bears on your message:\n{lines}")
    return "\n\n".join(parts) if parts else None


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
        if not (m.role == "assistant" and is_notice(m.text))
    ]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], -s[1]))[:limit]
    return [m for _, _, m in sorted(best, key=lambda s: s[1])]


@dataclass
class OfflineBrain:
    @property
    def name(self) -> str:
        return "offline"

    def answer(self, request: BrainRequest) -> str:
        recall = request.recall
        body = remembered(recall)
        if body is None and request.messages:
            *history, last = request.messages
            related = related_messages(last.text, tuple(history))
            if related:
                lines = "\n".join(
                    f"- {'you' if m.role == 'user' else 'I'}: {m.text}" for m in related
                )
                body = f"Earlier in this conversation, related to your message:\n{lines}"
        if body is None:
            body = "Nothing I remember bears on this message."
        # The long paragraph once per conversation; later replies lead with the memories.
        if recall.offline_notice_given:
            return f"{body}\n\n{SHORT_NOTE}"
        return f"{HOW_TO}\n\n{body}"

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

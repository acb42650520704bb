"""Long messages kept as passages: each a memory of its own, small enough to pack.

A pack holds ~4,000 characters (1,000 tokens). A 4,000-character answer from
the agent, or a pasted text, stored whole could never be packed again, and
MiniLM reads only its first ~1,000 characters (256 word pieces). Stored as
passages of at most ``memory.passage_chars`` (cut at paragraphs, then lines,
then sentences, then words), the one that answers a later question is found
by its own words and vector and packed alone. Every passage keeps its
message's time, speaker and source (``#m12``), and the passages of one
message are adjacent in the conversation, so the pack's neighbour share
brings a passage's neighbours when they matter too.
"""

from __future__ import annotations

import math
import re

# Coarsest first: paragraphs, lines, sentences, words; each joined back with its own.
_LEVELS = (
    (re.compile(r"\n\s*\n"), "\n\n"),
    (re.compile(r"\n"), "\n"),
    (re.compile(r"(?<=[.!?…])\s+"), " "),
    (re.compile(r"\s+"), " "),
)


def passages(text: str, max_chars: int) -> list[str]:
    """``text`` whole when it fits in ``max_chars``; else its passages, in order.

    Passages are about even in length (no 20-character tail after a full one)
    and never longer than ``max_chars``.
    """
    if len(text) <= max_chars:
        return [text]
    stripped = text.strip()
    count = math.ceil(len(stripped) / max_chars)
    # An even share of the message; a paragraph or line up to ``max_chars`` stays whole.
    limit = math.ceil(len(stripped) / count)
    return [p for p in _split(stripped, limit, max_chars, 0) if p]


def _split(text: str, limit: int, max_chars: int, level: int) -> list[str]:
    if len(text) <= limit:
        return [text]
    if level == len(_LEVELS):
        # One "word" longer than a passage (a URL, a base64 blob): cut it.
        return [text[i : i + max_chars] for i in range(0, len(text), max_chars)]
    pattern, joiner = _LEVELS[level]
    parts = [p.strip() for p in pattern.split(text) if p.strip()]
    if len(parts) == 1:
        return _split(text, limit, max_chars, level + 1)
    found: list[str] = []
    current = ""
    for part in parts:
        pieces = [part] if len(part) <= max_chars else _split(part, limit, max_chars, level + 1)
        for piece in pieces:
            joined = f"{current}{joiner}{piece}" if current else piece
            if current and len(joined) > limit:
                found.append(current)
                current = piece
            else:
                current = joined
    if current:
        found.append(current)
    return found

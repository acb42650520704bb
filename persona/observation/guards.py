"""Guards against the failures users report of observational memory.

- The system's own words are never observed as the person's: gateway notes
  (anchors) are stripped, lines repeating the persona contract or other
  instructions are dropped before observing, and observations that echo
  those instructions are discarded after.
- One huge message is split into parts that each fit an observer call, so
  it is observed rather than skipped.
- (In ``persona.stages``) messages not yet observed are never dropped from
  the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from gateway.tokens import estimate_tokens
from memory.passages import passages
from persona.anchor import strip_notes
from persona.observation.types import SourceMessage

_WORDS = re.compile(r"[a-z0-9']+")


def _content(text: str) -> set[str]:
    return {w for w in _WORDS.findall(text.lower()) if len(w) > 3}


def instruction_lines(*texts: str) -> frozenset[str]:
    """Normalised lines of the system's own texts (persona, anchors) worth recognising."""
    lines: set[str] = set()
    for text in texts:
        for raw in text.splitlines():
            line = _normalise(raw)
            if len(line.split()) >= 4:
                lines.add(line)
    return frozenset(lines)


def _normalise(line: str) -> str:
    return " ".join(_WORDS.findall(line.lower()))


def clean_for_observer(text: str, instructions: frozenset[str]) -> str:
    """The message without gateway notes and without lines copying the system's instructions."""
    kept = [
        line
        for line in strip_notes(text).splitlines()
        if not line.strip() or _normalise(line) not in instructions
    ]
    return "\n".join(kept).strip()


def echoes_instructions(text: str, instructions: frozenset[str]) -> bool:
    """True when an observation mostly repeats one of the system's own lines."""
    words = _content(text)
    if not words:
        return False
    lowered = text.lower()
    if "gateway note" in lowered or "persona anchor" in lowered or "persona reminder" in lowered:
        return True
    for line in instructions:
        theirs = _content(line)
        if theirs and len(words & theirs) / len(words | theirs) >= 0.6:
            return True
    return False


def split_huge(message: SourceMessage, max_tokens: int) -> list[SourceMessage]:
    """One message cut into parts of at most ``max_tokens`` (as memory's passages are:
    by paragraph, then line, sentence and word)."""
    if estimate_tokens(message.text) <= max_tokens:
        return [message]
    parts = passages(message.text, max_tokens * 4)  # estimate_tokens: 4 characters a token
    total = len(parts)
    return [
        replace(message, text=f"(part {i} of {total}) {part}") for i, part in enumerate(parts, 1)
    ]


def batches(messages: Sequence[SourceMessage], max_tokens: int) -> list[list[SourceMessage]]:
    """Consecutive messages grouped to fit one observer call; huge ones split first."""
    out: list[list[SourceMessage]] = []
    current: list[SourceMessage] = []
    used = 0
    for message in messages:
        for part in split_huge(message, max_tokens):
            size = estimate_tokens(part.text)
            if current and used + size > max_tokens:
                out.append(current)
                current, used = [], 0
            current.append(part)
            used += size
    if current:
        out.append(current)
    return out

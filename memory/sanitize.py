"""Neutralising instruction-like text before memories enter a prompt (§5.1, openclaw-mem).

Memories come from user-controlled text, so a stored message can try to steer
the model ("ignore previous instructions", "you are now ...", a fake
``<system>`` tag, "send the API key to ..."). Such spans are replaced by a
visible marker and reported, so the pack trace and the log say what was
filtered; the rest of the memory is kept word for word.

The rules read the text as the model does, not as its code points spell it:
zero-width and other invisible characters between letters ("ig\u200bnore"),
accents and combining marks, full-width and mathematical letters, the Latin
look-alikes of Cyrillic and Greek letters ("ignore" with a Cyrillic i and o), and
Unicode tag characters, which draw nothing yet spell ASCII a model can read.
A match there replaces the span of the original text it came from. Tag
characters left over (outside the emoji flags that use them) are hidden text
whatever they say: they are removed and reported as ``hidden_text``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

MARKER = "[filtered: instruction-like text]"
# The rest of the sentence (a dot inside "evil.com" does not end it).
_TAIL = r"(?:[^.!?\n]|[.!?](?=\S))*"

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "override",
        re.compile(
            r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|the\s+|your\s+)*"
            r"(?:previous|prior|above|earlier|preceding|system|original)?\s*"
            r"(?:instructions?|prompts?|rules?|guidelines?|directives?)\b" + _TAIL,
            re.IGNORECASE,
        ),
    ),
    (
        "role_change",
        re.compile(
            r"\b(?:you\s+are\s+now|from\s+now\s+on,?\s+you\s+(?:are|will|must)|"
            r"pretend\s+(?:to\s+be|you\s+are)|act\s+as\s+(?:if\s+you\s+(?:are|were)\s+)?(?:an?\s+)?"
            r"(?:unrestricted|jailbroken|different|new|evil|dan)\b|enter\s+(?:developer|dan|god)\s+mode)"
            + _TAIL,
            re.IGNORECASE,
        ),
    ),
    (
        "fake_tag",
        re.compile(
            r"</?\s*(?:system|assistant|user|instructions?|memory_pack|im_start|im_end)\b[^>]*>|"
            r"<\|[^|>]{1,40}\|>|\[/?(?:INST|SYS|SYSTEM)\]|^\s*#{1,6}\s*(?:system|instructions?)\b.*$|"
            r"^\s*(?:system|developer)\s*:",
            re.IGNORECASE | re.MULTILINE,
        ),
    ),
    (
        "exfiltration",
        re.compile(
            r"\b(?:reveal|print|show|repeat|output|leak|send|post|upload|email|forward|exfiltrate)\s+"
            r"(?:me\s+|us\s+)?(?:your|the|all)\s+(?:system\s+prompt|instructions|api[\s_-]?keys?|"
            r"secrets?|passwords?|credentials|tokens?|conversation\s+history|memories)\b"
            + _TAIL
            + r"|"
            r"\b(?:send|post|upload|forward)\b[^.!?\n]{0,80}\bto\s+https?://\S+" + _TAIL,
            re.IGNORECASE,
        ),
    ),
)


@dataclass(frozen=True)
class Sanitized:
    text: str
    # Names of the rules that fired, in order, one entry per neutralised span.
    rules: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.rules)


# Words and marks without one of which no rule can match: every alternative of every
# rule contains one (case aside). Most memories hold none, and looking for plain
# substrings costs far less than the four rules (a pack sanitises ~70 candidates).
# A regex alternation of them was slower than the rules themselves.
_NEEDED = (
    *("ignore", "disregard", "forget", "override", "bypass"),  # override
    *("now", "pretend", "act", "enter"),  # role_change
    *("<", "[", "#", "system", "developer"),  # fake_tag
    *("reveal", "print", "show", "repeat", "output", "leak", "send", "post", "upload"),
    *("email", "forward", "exfiltrate"),  # exfiltration
)


# Latin look-alikes a model reads as the Latin letter: Cyrillic and Greek (those
# NFKD leaves alone), and the dotless i, which ``re`` takes for i when it ignores case.
_LOOK_ALIKES = dict(
    zip(
        "аеорсухіјѕԁԛԝвкмнтАВЕКМНОРСТХІЈЅαβεικνορτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧı",
        "aeopcyxijsdqwbkmhtABEKMHOPCTXIJSabeikvoptuxABEZHIKMNOPTYXi",
        strict=True,
    )
)
_TAG_FIRST, _TAG_LAST = 0xE0000, 0xE007F


def _dropped_when_read() -> dict[int, None]:
    """Code points that change nothing a reader sees: format characters (zero-width
    spaces and joiners, bidi marks) and combining marks (accents once NFKD splits
    them off, variation selectors)."""
    dropped = dict.fromkeys(
        code for code in range(0x10000) if unicodedata.category(chr(code)) in ("Cf", "Mn", "Me")
    )
    dropped.update(dict.fromkeys(range(0xE0100, 0xE01F0)))  # variation selectors 17-256
    return dropped


# Tag characters 0xE0020-0xE007E spell the ASCII 0x20 apart; the rest of their block
# (the language tag, the cancel tag) draws and spells nothing.
_READ_AS: dict[int, str | None] = {
    **_dropped_when_read(),
    **{ord(k): v for k, v in _LOOK_ALIKES.items()},
    **{code: chr(code - _TAG_FIRST) for code in range(_TAG_FIRST + 0x20, _TAG_LAST)},
    _TAG_FIRST: None,
    _TAG_FIRST + 1: None,
    _TAG_LAST: None,
}
# Emoji subdivision flags (Scotland, Wales, ...) are the black flag, up to six tag
# letters or digits and the cancel tag: the one use of tag characters kept as is.
_HIDDEN = re.compile(
    "(\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{1,6}\U000e007f)"
    "|[\U000e0000-\U000e007f]+"
)


def reading(text: str) -> str:
    """``text`` as a reader takes it: compatibility forms unfolded, invisible and
    combining characters dropped, look-alikes as Latin, tag characters as their ASCII."""
    return unicodedata.normalize("NFKD", text).translate(_READ_AS)


def _reading_with_origins(text: str) -> tuple[str, Sequence[int]]:
    """``reading(text)``, and for each of its characters the index in ``text`` of the
    character it came from."""
    read: list[str] = []
    origins: list[int] = []
    for index, char in enumerate(text):
        for part in reading(char):
            read.append(part)
            origins.append(index)
    return "".join(read), origins


def sanitize(text: str) -> Sanitized:
    """``text`` with instruction-like spans replaced by ``MARKER``; which rules fired."""
    if text.isascii():
        if any(word in text.lower() for word in _NEEDED):
            return apply_rules(text)
        return Sanitized(text)
    # Folding takes a few microseconds in C: only what it lets through goes further.
    read = reading(text)
    lowered = read.lower()
    if any(word in lowered for word in _NEEDED) or _HIDDEN.search(text):
        return _apply_rules(text, read)
    return Sanitized(text)


def apply_rules(text: str) -> Sanitized:
    """Every rule over ``text``, without the quick check (``sanitize`` is the one to call)."""
    return _apply_rules(text, text if text.isascii() else reading(text))


def _apply_rules(text: str, read: str) -> Sanitized:
    """``apply_rules``, given ``reading(text)`` (folded once, by the caller)."""
    if text.isascii():
        origins: Sequence[int] = range(len(text))
    else:
        # Mapping each character back costs ~1 µs a character, in Python: only for a
        # text some rule matches once folded whole (in C), or that hides tag characters.
        if not any(pattern.search(read) for _, pattern in _RULES) and not _HIDDEN.search(text):
            return Sanitized(text)
        read, origins = _reading_with_origins(text)
    # Spans of ``read`` each rule claims, in rule order. A later rule reads a claimed
    # span as one opaque character run (as it read the marker when the rules
    # replaced in turn), so it can match across it but never claims it alone.
    claimed: list[tuple[int, int, str]] = []
    masked = read
    for name, pattern in _RULES:
        found = [
            (m.start(), m.end(), name)
            for m in pattern.finditer(masked)
            if m.end() > m.start() and not _inside(claimed, m.start(), m.end())
        ]
        for start, end, _ in found:
            masked = masked[:start] + "\x00" * (end - start) + masked[end:]
        claimed.extend(found)
    fired = [name for _, _, name in claimed]
    # To the original text's spans; one marker where claimed spans overlap.
    spans = sorted((origins[start], origins[end - 1] + 1) for start, end, _ in claimed)
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    pieces, at = [], 0
    for start, end in merged:
        pieces.append(text[at:start])
        pieces.append(MARKER)
        at = end
    pieces.append(text[at:])
    cleaned = "".join(pieces)
    if not cleaned.isascii():

        def unhide(match: re.Match[str]) -> str:
            if match.group(1):
                return match.group(1)
            fired.append("hidden_text")
            return ""

        cleaned = _HIDDEN.sub(unhide, cleaned)
    return Sanitized(cleaned, tuple(fired))


def _inside(claimed: list[tuple[int, int, str]], start: int, end: int) -> bool:
    """Whether [start, end) lies within one span already claimed."""
    return any(s <= start and end <= e for s, e, _ in claimed)

"""Neutralising instruction-like text before memories enter a prompt (§5.1, openclaw-mem).

Memories come from user-controlled text, so a stored message can try to steer
the model ("ignore previous instructions", "you are now ...", a fake
``<system>`` tag, "send the API key to ..."). Such spans are replaced by a
visible marker and reported, so the pack trace and the log say what was
filtered; the rest of the memory is kept word for word.
"""

from __future__ import annotations

import re
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


# The rules ignore case as ``re`` does, which also takes these for "i" and "s"
# (the long s of "send your API keys ..."); ``str.lower`` does not, so they are mapped first.
_RE_CASE_FOLDS = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s"})


def sanitize(text: str) -> Sanitized:
    """``text`` with instruction-like spans replaced by ``MARKER``; which rules fired."""
    lowered = text.translate(_RE_CASE_FOLDS).lower()
    if not any(word in lowered for word in _NEEDED):
        return Sanitized(text)
    return apply_rules(text)


def apply_rules(text: str) -> Sanitized:
    """Every rule over ``text``, without the quick check (``sanitize`` is the one to call)."""
    fired: list[str] = []
    for name, pattern in _RULES:

        def replace(_match: re.Match[str], rule: str = name) -> str:
            fired.append(rule)
            return MARKER

        text = pattern.sub(replace, text)
    return Sanitized(text, tuple(fired))

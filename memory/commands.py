"""Explicit memory requests: "remember …" and "forget …" from the person.

Questions are not requests: "do you remember …?", "remember when we …?"
ask for recall and are left to the pack.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from memory.types import ItemType


class CommandKind(enum.StrEnum):
    REMEMBER = "remember"
    FORGET = "forget"


@dataclass(frozen=True)
class MemoryCommand:
    kind: CommandKind
    # What to remember or forget, as the person put it.
    text: str


_LEAD = (
    r"^\s*(?:(?:hey|ok|okay|so|and|also|oh)[,!]?\s+)*(?:[A-Z][a-z]+,\s+)?"
    r"(?:please\s+|pls\s+|can you\s+|could you\s+|would you\s+|i want you to\s+|"
    r"i'd like you to\s+)?"
)
_REMEMBER = re.compile(
    _LEAD + r"(?:remember|don't forget|dont forget|do not forget|note|keep in mind|make a note)"
    r"\b\s*(?:that|this|:|,)?\s*(?P<what>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_FORGET = re.compile(
    _LEAD + r"(?:forget|stop remembering|delete (?:the )?memory of|erase)\b\s*"
    r"(?:(?:all |everything )?(?:about|that|what i (?:said|told you) about|the fact that)\s+)?"
    r"(?P<what>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_QUESTION = re.compile(
    r"^\s*(?:do|did|can|could|would|will)\s+you\s+(?:still\s+)?(?:remember|forget)|"
    r"^\s*remember\s+(?:when|how|what|who|where|the time|that time)\b",
    re.IGNORECASE,
)


# "forget it" is "never mind", not a request to forget something.
_NEVER_MIND = frozenset(["it", "that", "this", "about it", "about that", "it all"])


def parse_command(message: str) -> MemoryCommand | None:
    """The explicit memory request in ``message``, or None."""
    if _QUESTION.search(message) or message.rstrip().endswith("?"):
        return None
    for kind, pattern in ((CommandKind.FORGET, _FORGET), (CommandKind.REMEMBER, _REMEMBER)):
        match = pattern.match(message)
        if match:
            what = match["what"].strip().rstrip(".!").strip()
            vague = kind is CommandKind.FORGET and what.lower() in _NEVER_MIND
            if len(what) >= 2 and not vague:
                return MemoryCommand(kind, what)
    return None


# "What do you remember about me?", "what do you know about me", "what have I told you?"
_ABOUT_PERSON = re.compile(
    r"\b(?:what|anything|everything)\b[^.?!]{0,30}\b(?:remember|know|recall|stored?|kept)\b"
    r"[^.?!]{0,20}\b(?:about|of|on)\s+me\b|"
    r"\bwhat\s+(?:have|did)\s+i\s+(?:told|tell|said|say|shared|share)\b",
    re.IGNORECASE,
)


def asks_about_person(message: str) -> bool:
    """Whether ``message`` asks what is remembered about the person."""
    return _ABOUT_PERSON.search(message) is not None


_PERSONA = re.compile(
    r"\b(?:my name is|call me|i am an?|i'm an?|i work as|i work at|i live in|i'm from|"
    r"i am from|my pronouns|my birthday|i was born)\b",
    re.I,
)
_RELATIONAL = re.compile(
    r"\b(?:you and i|you and me|between us|our (?:chats?|talks?|friendship|relationship)|"
    r"we (?:agreed|always|usually))\b",
    re.I,
)
_PREFERENCE = re.compile(
    r"\b(?:i (?:really )?(?:like|love|prefer|enjoy|hate|dislike|can't stand)|my fav(?:ou?rite)?|"
    r"i'm (?:into|allergic|vegan|vegetarian)|i am (?:allergic|vegan|vegetarian))\b",
    re.I,
)
_PROCEDURAL = re.compile(
    r"\b(?:always|never|whenever|every time|when i ask|please (?:use|answer|reply|write)|"
    r"(?:reply|answer|write) (?:in|with))\b",
    re.I,
)
_EVENT = re.compile(
    r"\b(?:on|next|this|last)\s+(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"week|month)\b|\b(?:tomorrow|tonight|appointment|meeting|deadline|flight|birthday party|"
    r"\d{1,2}(?:st|nd|rd|th)?\s+of)\b",
    re.I,
)


def classify(text: str) -> ItemType:
    """The item type of a remembered statement, by its wording."""
    for item_type, pattern in (
        (ItemType.PERSONA, _PERSONA),
        (ItemType.RELATIONAL, _RELATIONAL),
        (ItemType.PREFERENCE, _PREFERENCE),
        (ItemType.PROCEDURAL, _PROCEDURAL),
        (ItemType.EVENT, _EVENT),
    ):
        if pattern.search(text):
            return item_type
    return ItemType.FACT

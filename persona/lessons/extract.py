"""Lessons from corrections, without a model: the shapes people correct an agent in.

A correction is a message that tells the agent how to behave from now on
("don't call me Bob", "stop adding emojis", "I prefer tea over coffee") or
that it got something wrong ("no, I meant Porto", "that's wrong, the
deadline is Friday"). Each shape below yields a ``Candidate``: a short
imperative for the prompt and a *slot*, the thing it is about ("name",
"style:emoji", "prefer:coffee|tea"). A newer lesson on the same slot
replaces the older one instead of standing beside it.

The rules err on the side of silence: a message that only looks like a
correction ("no worries", "stop by later", "call me tomorrow", "I don't
know") yields nothing. Precision and recall on a labelled set and a
held-out one are measured by ``tests/test_lessons_extract.py`` (see
docs/DESIGN.md, "Lessons from corrections").
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """A lesson a message teaches: its imperative text and the slot it is about."""

    text: str
    slot: str


# Verbs of what the agent does in a reply, with their -ing forms (no stemming guesswork).
_VERBS = {
    "add": "adding",
    "use": "using",
    "put": "putting",
    "say": "saying",
    "write": "writing",
    "send": "sending",
    "include": "including",
    "start": "starting",
    "end": "ending",
    "give": "giving",
    "make": "making",
    "be": "being",
    "apologise": "apologising",
    "apologize": "apologizing",
    "mention": "mentioning",
    "recommend": "recommending",
    "suggest": "suggesting",
    "ask": "asking",
    "repeat": "repeating",
    "explain": "explaining",
    "reply": "replying",
    "respond": "responding",
    "answer": "answering",
    "talk": "talking",
    "sign": "signing",
    "thank": "thanking",
    "bring": "bringing",
    "remind": "reminding",
    "shout": "shouting",
    "summarise": "summarising",
    "summarize": "summarizing",
    "correct": "correcting",
    "lecture": "lecturing",
    "sugarcoat": "sugarcoating",
    "swear": "swearing",
    "call": "calling",
    "pad": "padding",
    "bold": "bolding",
    "quote": "quoting",
}
_ING = {ing: verb for verb, ing in _VERBS.items()}
_VERB_RE = "|".join(sorted(_VERBS, key=len, reverse=True))
_ING_RE = "|".join(sorted(_ING, key=len, reverse=True))

# Style nouns: what "no more …", "drop the …", "cut out the …" is about, and the slot key.
_STYLE = {
    "emoji": "emoji",
    "emojis": "emoji",
    "emoticons": "emoji",
    "smileys": "emoji",
    "bullet points": "bullet",
    "bullets": "bullet",
    "bullet lists": "bullet",
    "lists": "bullet",
    "exclamation marks": "exclamation",
    "exclamation points": "exclamation",
    "headers": "header",
    "headings": "header",
    "markdown": "markdown",
    "jokes": "joke",
    "puns": "joke",
    "small talk": "small talk",
    "apologies": "apologi",
    "disclaimers": "disclaimer",
    "caps": "caps",
    "hashtags": "hashtag",
    "questions": "question",
    "follow-up questions": "question",
    "pleasantries": "pleasantries",
    "flattery": "flattery",
}
_STYLE_RE = "|".join(sorted((re.escape(k) for k in _STYLE), key=len, reverse=True))

# Words after "call me" that are not a name ("call me later", "call me when …").
_NOT_NAMES = {
    "later",
    "tomorrow",
    "tonight",
    "back",
    "when",
    "if",
    "at",
    "on",
    "in",
    "after",
    "before",
    "soon",
    "now",
    "asap",
    "anytime",
    "sometime",
    "crazy",
    "old",
    "maybe",
    "please",
    "again",
    "today",
    "whenever",
    "once",
}
_NAME = r"[A-Za-z][\w'-]{0,39}"
# A request to the agent starts the message or a clause; "I/we/they …" does not.
_START = r"(?:^|[.!?;:,]\s*|\b(?:please|pls|and|but|so|also|just|now|ok|okay|seriously)\s+)"
_PLEASE = r"(?:please\s+|pls\s+|just\s+|kindly\s+)?"
_LANGUAGES = (
    "English|French|Spanish|German|Italian|Portuguese|Dutch|Polish|Russian|Japanese|Chinese|"
    "Korean|Arabic|Hindi|Turkish|Swedish|Danish|Norwegian|Finnish|Greek|Czech|Ukrainian|Catalan"
)


def _normalise(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    text = text.replace("\u201c", '"').replace("\u201d", '"')
    return re.sub(r"\s+", " ", text).strip()


def _clause(text: str) -> str:
    """The object phrase up to the end of its clause, without filler at its end."""
    text = re.split(r"[.!?;\n]|,\s*(?:it's|its|I'm|i am|this|that|we|please|thanks)\b", text)[0]
    text = re.sub(r"\s+(?:please|pls|thanks|thank you|again|anymore|any more|ever)\s*$", "", text)
    text = re.sub(r"\s+(?:all the time|every time|so much|so often)\s*$", "", text)
    return text.strip(" ,'\"-")


def _third_person(phrase: str) -> str:
    """The person's "me"/"my" as "the user"/"the user's": the lesson is read by the agent."""
    phrase = re.sub(r"(?i)\bmy\b", "the user's", phrase)
    return re.sub(r"(?i)\bme\b", "the user", phrase)


def _slot_of(phrase: str) -> str:
    low = phrase.lower()
    for noun, key in _STYLE.items():
        if re.search(rf"\b{re.escape(noun)}\b", low):
            return f"style:{key}"
    return "do:" + re.sub(r"[^a-z0-9 ]", "", low).strip()


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".!")
    return text[:1].upper() + text[1:] + "."


def _naming(text: str) -> Candidate | None:
    t = text
    m = re.search(
        rf"(?i:\b(?:my name is|my name's|i'm|i am|it's|its)\s+)({_NAME})"
        rf"(?i:,?\s+not\s+)({_NAME})\b",
        t,
    )
    if m and m.group(1)[0].isupper():
        return Candidate(f"Call the user {m.group(1)}, not {m.group(2)}.", "name")
    m = re.search(rf"(?i:\bcall me\s+)({_NAME})(?i:,?\s+not\s+)({_NAME})\b", t)
    if m:
        return Candidate(f"Call the user {m.group(1)}, not {m.group(2)}.", "name")
    m = re.search(
        rf"(?i:\b(?:don't|do not|dont|never|stop|quit|no more)\s+(?:call|calling)\s+me\s+)"
        rf"['\"]?({_NAME})\b",
        t,
    )
    if m and m.group(1).lower() not in _NOT_NAMES:
        name = m.group(1)
        better = re.search(
            r"(?i:\b(?:it's|its|i'm|my name is|call me)\s+)([A-Z][\w'-]{0,39})", t[m.end() :]
        )
        if better:
            return Candidate(f"Call the user {better.group(1)}, not {name}.", "name")
        return Candidate(f"Do not call the user {name}.", "name")
    m = re.search(rf"(?:^|[.!?,]\s*|(?i:please)\s+)(?i:call me\s+)({_NAME})\s*[.!]?\s*$", t)
    if m and m.group(1).lower() not in _NOT_NAMES and m.group(1)[0].isupper():
        return Candidate(f"Call the user {m.group(1)}.", "name")
    return None


def _avoid(text: str) -> Candidate | None:
    low = text.lower()
    m = re.search(
        rf"{_START}{_PLEASE}(?:(?:stop|quit)\s+(?P<ing>{_ING_RE})"
        rf"|(?:don't|do not|dont|never)\s+(?:ever\s+)?(?P<verb>{_VERB_RE}))\b(?P<rest>[^.!?;\n]*)",
        low,
    )
    if m is None:
        m = re.search(
            rf"\b(?:can|could|would|will)\s+you\s+{_PLEASE}(?:stop|quit)\s+(?P<ing>{_ING_RE})\b"
            rf"(?P<rest>[^.!?;\n]*)",
            low,
        )
        verb_group = None
    else:
        verb_group = m.group("verb")
    if m is not None:
        verb = verb_group or _ING[m.group("ing")]
        # Keep the person's own words (their case) for the object.
        rest = _clause(text[m.start("rest") : m.end("rest")])
        rest = re.sub(r"^(?i:so many|so much|all those|all these|those|these)\s+", "", rest)
        if verb == "call" and not rest:
            return None
        if verb == "be" and not rest:
            return None
        if verb == "be" and re.search(r"\b(?:formal|stiff)\b", rest.lower()):
            return Candidate("Be less formal with the user.", "formality")
        phrase = _third_person(f"{verb} {rest}".strip())
        return Candidate(_sentence(f"Do not {phrase}"), _slot_of(phrase))
    m = re.search(
        rf"(?:^|[.!?]\s*)(?:no more|drop the|cut out the|cut the|lose the|ditch the|enough with the"
        rf"|enough of the)\s+(?P<noun>{_STYLE_RE})\b",
        low,
    )
    if m is not None:
        noun = m.group("noun")
        return Candidate(f"Do not use {noun}.", f"style:{_STYLE[noun]}")
    m = re.search(
        rf"\byou keep (?P<ing>{_ING_RE})\b(?P<rest>[^.!?;\n,]*)[^.!?]*[.!?]?\s*(?:please\s+)?stop",
        low,
    )
    if m is not None:
        rest = _clause(text[m.start("rest") : m.end("rest")])
        rest = re.sub(r"^(?i:so many|so much)\s+", "", rest)
        phrase = _third_person(f"{_ING[m.group('ing')]} {rest}".strip())
        return Candidate(_sentence(f"Do not {phrase}"), _slot_of(phrase))
    return None


def _style(text: str) -> Candidate | None:
    low = text.lower()
    if re.search(
        r"\b(?:too long|too wordy|too verbose|way too long|shorter (?:answers|replies|please)"
        r"|keep it (?:short|brief)|be (?:more )?(?:concise|brief)|less verbose|tl;?dr)\b",
        low,
    ) and not low.rstrip().endswith("?"):
        return Candidate("Keep replies short.", "length")
    if re.search(
        r"\b(?:too short|more detail(?:ed)?(?: answers| replies| please)?"
        r"|longer (?:answers|replies))",
        low,
    ) and re.search(r"\b(?:please|give|want|need|too short)\b", low):
        return Candidate("Give more detailed replies.", "length")
    m = re.search(r"\b(less|more) (formal|casual)\b", low)
    if m and not low.rstrip().endswith("?"):
        want = "less" if (m.group(1) == "less") == (m.group(2) == "formal") else "more"
        return Candidate(f"Be {want} formal with the user.", "formality")
    m = re.search(
        rf"(?i:\b(?:answer|reply|respond|write|talk|speak)(?: to me)?\s+in\s+)({_LANGUAGES})\b",
        text,
    )
    if m and re.search(r"(?i)\b(?:please|from now on|always|only)\b|^\s*(?:answer|reply)", text):
        return Candidate(f"Reply in {m.group(1)}.", "language")
    return None


def _prefer(text: str) -> Candidate | None:
    m = (
        re.search(
            r"(?i:\b(?:i|we)\s+(?:really\s+|much\s+|actually\s+)?prefer\s+)(?!not\b)"
            r"(?P<a>[^,.!?;]+?)(?i:\s+(?:over|to|rather than|instead of)\s+)(?P<b>[^,.!?;]+)",
            text,
        )
        or re.search(
            r"(?i:\b(?:i'd|i would|we'd)\s+(?:much\s+)?rather\s+(?:have\s+)?)(?!not\b)"
            r"(?P<a>[^,.!?;]+?)(?i:\s+than\s+)(?P<b>[^,.!?;]+)",
            text,
        )
        or re.search(
            r"(?i:\b(?:i|we)\s+like\s+)(?P<a>[^,.!?;]+?)(?i:\s+better than\s+)(?P<b>[^,.!?;]+)",
            text,
        )
    )
    if m is None or text.rstrip().endswith("?"):
        return None
    a, b = _clause(m.group("a")), _clause(m.group("b"))
    if not a or not b:
        return None
    key = "|".join(sorted(re.sub(r"[^a-z0-9 ]", "", x.lower()).strip() for x in (a, b)))
    if "rather" in m.group(0).lower():
        # "I'd rather walk than drive": verbs, which "prefer walk over drive" mangles.
        return Candidate(f"Remember the user would rather {a} than {b}.", f"prefer:{key}")
    return Candidate(f"Prefer {a} over {b} for the user.", f"prefer:{key}")


def _meant(text: str) -> Candidate | None:
    m = re.search(
        r"(?i:^\s*(?:no|nope|nah)?[,.!]?\s*(?:i meant|i said|i was talking about|i mean)\s+)"
        r"(?P<a>[^,.!?;]+?)(?:(?i:,?\s+not\s+)(?P<b>[^,.!?;]+))?\s*[.!]?\s*$",
        text,
    )
    if m is None:
        return None
    a = _clause(m.group("a"))
    if a.lower() in {"it", "that", "this", "what i said", "well"}:
        return None
    if m.group("b"):
        b = _clause(m.group("b"))
        return Candidate(f"The user meant {a}, not {b}; do not mix them up.", f"meant:{b.lower()}")
    return Candidate(f"The user meant {a}; check what they mean before assuming.", "")


def _wrong(text: str) -> Candidate | None:
    m = re.search(
        r"(?i:^\s*(?:no[,.!]?\s*)?(?:that's|that is|thats|you're|you are|this is|it's)?\s*"
        r"(?:wrong|not right|not true|incorrect|not correct|mistaken)\s*[,.:;!-]+\s*)"
        r"(?P<fact>.+)$",
        text,
    )
    if m is None or text.rstrip().endswith("?"):
        return None
    fact = _clause(m.group("fact"))
    if len(fact.split()) < 2:
        return None
    return Candidate(f"Get this right: {fact}.", "")


SHAPES = (_naming, _avoid, _style, _prefer, _meant, _wrong)


def extract(message: str) -> list[Candidate]:
    """The lessons one message of the person teaches (usually none).

    Each sentence is read on its own ("Stop adding emojis. And don't call me Bob."
    teaches two lessons); in a sentence the first shape that fits is its point. One
    lesson a slot: a later sentence on the same slot says it again.
    """
    text = _normalise(message)
    found: list[Candidate] = []
    for sentence in re.split(r"(?<=[.!?])\s+(?=\S)", text):
        for shape in SHAPES:
            candidate = shape(sentence)
            if candidate is None:
                continue
            if all(
                (c.slot != candidate.slot if candidate.slot else c.text != candidate.text)
                for c in found
            ):
                found.append(candidate)
            break
    return found

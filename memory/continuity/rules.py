"""What a message says about the person's focus and decisions, found by rules (no model).

- ``focus_of``: "let's focus on the invoice export", "I'm working on …", "I'm
  preparing for …", "we're debugging …", "my focus is …" → the focus, as a short
  phrase; a question, a negation ("let's not focus on …") or an object that is no
  focus ("working on it", "working on Saturday") is none.
- ``focus_done``: "we're done with the invoice export", "I'm no longer working on
  …" → the phrase it ends (the caller clears the focus when it is that one).
- ``decisions_of``: "we decided …", "we've decided to …", "let's go with …",
  "decision: …", "we agreed on …", "we settled on …" → one decision per sentence;
  questions, negations ("we haven't decided"), plans to decide and conditionals
  are none.
- ``reverses``: a reversal cue ("actually", "instead", "changed our mind", "scrap
  that", "after all") — with the same subject it links a decision to an older one.

Precision and recall on a labelled set (tuned, and a held-out part not tuned on):
``python -m memory.continuity.evaluate``; the figures are in docs/DESIGN.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Sentences: split after . ! ? before a space (not in "Fly.io", "3.5") or at a line
# break; a "?" marks a question.
_SENTENCE = re.compile(r"(?:[^.!?\n]|[.!?](?=[^\s.!?]))+[.!?]*")
# Where a phrase taken after a cue ends: a clause that says something else.
_CLAUSE_END = re.compile(
    r"\s*(?:,\s*(?:so|and|but|because|which|since)\b"
    r"|\s(?:but|because|so that|which means)\b|;|:|\s[-\u2013\u2014]\s).*$",
    re.IGNORECASE,
)
_SUBJECT = r"(?:i\s*'?\s*m|i am|we\s*'?\s*re|we are|i've been|we've been|i have been|we have been)"
_NOW = r"(?:\s+(?:currently|now|still|mostly|really|busy))?"

# (pattern, how the focus reads): group "x" is the focus's object.
_FOCUS_CUES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), lead)
    for pattern, lead in (
        (r"\blet'?s\s+(?:now\s+)?(?:focus|concentrate)\s+on\s+(?P<x>.+)", ""),
        (r"\blet us\s+(?:focus|concentrate)\s+on\s+(?P<x>.+)", ""),
        (r"\bi\s+(?:want|need)\s+to\s+(?:focus|concentrate)\s+on\s+(?P<x>.+)", ""),
        (rf"\b{_SUBJECT}{_NOW}\s+(?:focus(?:s|ed|ing)?|concentrating)\s+on\s+(?P<x>.+)", ""),
        (
            r"\bmy\s+(?:current\s+|main\s+)?focus\s+"
            r"(?:right now\s+|now\s+|this week\s+)?is\s+(?P<x>.+)",
            "",
        ),
        (r"^\s*focus\s*:\s*(?P<x>.+)", ""),
        (rf"\b{_SUBJECT}{_NOW}\s+working\s+on\s+(?P<x>.+)", "Working on "),
        (rf"\b{_SUBJECT}{_NOW}\s+preparing\s+for\s+(?P<x>.+)", "Preparing for "),
        (rf"\b{_SUBJECT}{_NOW}\s+training\s+for\s+(?P<x>.+)", "Training for "),
        (rf"\b{_SUBJECT}{_NOW}\s+studying\s+for\s+(?P<x>.+)", "Studying for "),
        (rf"\b{_SUBJECT}{_NOW}\s+debugging\s+(?P<x>.+)", "Debugging "),
        (rf"\b{_SUBJECT}{_NOW}\s+(?:planning|organising|organizing)\s+(?P<x>.+)", "Planning "),
        (rf"\b{_SUBJECT}{_NOW}\s+writing\s+(?P<x>(?:my|our|a|an|the)\s.+)", "Writing "),
        (rf"\b{_SUBJECT}{_NOW}\s+building\s+(?P<x>(?:my|our|a|an|the)\s.+)", "Building "),
    )
)
_FOCUS_DONE = re.compile(
    r"\b(?:(?:i\s*'?\s*m|i am|we\s*'?\s*re|we are)\s+(?:done|finished)\s+with"
    r"|(?:i\s*'?\s*m|i am|we\s*'?\s*re|we are)\s+no longer\s+"
    r"(?:working on|focusing on|preparing for)"
    r"|(?:i|we)\s+(?:finished|completed|wrapped up|shipped"
    r"|ran(?!\s+(?:into|out|over|off|late|to)\b))"
    r"|stop\s+focusing\s+on)\s+(?P<x>.+)",
    re.IGNORECASE,
)
_NEGATED = re.compile(
    r"\b(?:not|n't|never|no longer|stop|stopped|quit|if|whether|should i|should we|"
    r"wish|would|could|might|maybe|used to|was|were)\b[^.!?]*$",
    re.IGNORECASE,
)
# Words that make "working on X" no focus: pronouns, days, times, trivia.
_NO_FOCUS = frozenset(
    [
        "it",
        "that",
        "this",
        "them",
        "something",
        "anything",
        "nothing",
        "stuff",
        "things",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "weekends",
        "weekend",
        "today",
        "tonight",
        "tomorrow",
        "bed",
        "dinner",
        "lunch",
        "breakfast",
        "now",
        "myself",
    ]
)
_LEADING_NOISE = re.compile(r"^(?:the\s+)?(?:moment|now|currently)\s*,?\s*", re.IGNORECASE)

# (pattern): group "x" is what was decided.
_DECISION_CUES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"^\s*(?:final\s+)?decision\s*:\s*(?P<x>.+)",
        r"\b(?:we|i)\s*(?:'ve|'d|\s+have|\s+had|\s+finally|\s+just|\s+now)?\s+decided\s+(?:to\s+|that\s+|on\s+|against\s+)?(?P<x>.+)",
        r"\b(?:it'?s|it is|that'?s|that is)\s+decided\s*[:,-]?\s*(?P<x>.+)",
        r"\bthe\s+decision\s+is\s+(?:to\s+|that\s+)?(?P<x>.+)",
        r"\blet'?s\s+go\s+with\s+(?P<x>.+)",
        r"\blet'?s\s+(?:stick|go)\s+with\s+(?P<x>.+)",
        r"\b(?:we|i)\s*(?:'ll|\s+will)\s+go\s+with\s+(?P<x>.+)",
        r"\b(?:we'?re|we are|i'?m|i am)\s+going\s+(?:with|for)\s+(?P<x>.+)",
        r"\b(?:we|i)\s*(?:'ve|\s+have)?\s+(?:settled|agreed)\s+(?:on|to|that)\s+(?P<x>.+)",
        r"\b(?:we|i)\s*(?:'ve|\s+have)?\s+(?:chosen|chose|picked|opted for)\s+(?P<x>.+)",
        r"\bwe'?re\s+switching\s+to\s+(?P<x>.+)",
        r"\bgoing forward,?\s+(?:we|i)\s*(?:'ll|\s+will)\s+(?P<x>.+)",
    )
)
_NOT_DECIDED = re.compile(
    r"\b(?:haven'?t|have not|hasn'?t|didn'?t|did not|not yet|not|never|can'?t|cannot|couldn'?t"
    r"|undecided|still need to|should|need to|have to|if|whether|unless|once|when|before|"
    r"would|could|might|maybe|probably|wish)\b",
    re.IGNORECASE,
)
_TAG = re.compile(r"(?<![\w#])#([A-Za-z][\w-]{0,39})")
_REVERSAL = re.compile(
    r"\b(?:actually|instead|changed? (?:our|my) minds?|change of plans?|scrap that|"
    r"on second thought|after all|rather than|reverse|reversing|no longer|not \w+ anymore|"
    r"switch(?:ing)? (?:to|back)|back to)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z0-9][a-z0-9+#.-]*")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "from",
        "by",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "we",
        "our",
        "us",
        "i",
        "me",
        "my",
        "you",
        "your",
        "they",
        "them",
        "their",
        "he",
        "she",
        "his",
        "her",
        "let",
        "lets",
        "let's",
        "go",
        "going",
        "went",
        "use",
        "using",
        "used",
        "will",
        "would",
        "shall",
        "should",
        "can",
        "could",
        "may",
        "might",
        "do",
        "does",
        "did",
        "done",
        "have",
        "has",
        "had",
        "just",
        "now",
        "then",
        "so",
        "very",
        "really",
        "actually",
        "instead",
        "rather",
        "than",
        "not",
        "no",
        "yes",
        "ok",
        "okay",
        "decided",
        "decide",
        "decision",
        "decisions",
        "agreed",
        "agree",
        "settled",
        "chose",
        "chosen",
        "picked",
        "opted",
        "switch",
        "switching",
        "back",
        "after",
        "all",
        "again",
        "also",
        "about",
        "into",
        "over",
        "up",
        "out",
        "new",
        "stick",
        "one",
        "thing",
        "things",
        "plan",
        "plans",
        "change",
        "changed",
        "mind",
        "minds",
        "second",
        "thought",
        "scrap",
    ]
)


@dataclass(frozen=True)
class Found:
    text: str
    sentence: str


# A sentence longer than this states no focus or decision the rules would read
# (and a 10 MB paste costs no more than a scan for sentence ends).
MAX_SENTENCE = 600


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip() and len(s) <= MAX_SENTENCE]


def _clip(phrase: str) -> str:
    phrase = _CLAUSE_END.sub("", phrase.strip())
    phrase = re.sub(r"\s*\(.*$", "", phrase)
    phrase = re.sub(r"(?:\s*#[\w-]+)+\s*$", "", phrase)
    return phrase.strip(" .!,;:\"'").strip()


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def content_words(text: str) -> set[str]:
    words = {w.strip(".-") for w in _WORD.findall(text.lower().replace("\u2019", "'"))}
    return {w for w in words if len(w) >= 3 and w not in STOPWORDS}


def focus_of(text: str) -> Found | None:
    """The focus a message sets, the last one when it names several."""
    found: Found | None = None
    for sentence in sentences(text.replace("\u2019", "'")):
        if sentence.rstrip().endswith("?"):
            continue
        for pattern, lead in _FOCUS_CUES:
            match = pattern.search(sentence)
            if match is None:
                continue
            before = sentence[: match.start()]
            if _NEGATED.search(before) or re.search(r"\bnot\b", match.group(0)[:40], re.I):
                break
            phrase = _LEADING_NOISE.sub("", _clip(match.group("x")))
            words = content_words(phrase)
            if not words or not words - _NO_FOCUS:
                break
            if phrase.lower().split()[0].strip(",;:") in _NO_FOCUS:
                break
            found = Found(_capital(lead + phrase if lead else phrase), sentence)
            break
    return found


def focus_done(text: str) -> Found | None:
    """What a message says is finished ("we're done with the invoice export")."""
    for sentence in sentences(text.replace("\u2019", "'")):
        if sentence.rstrip().endswith("?"):
            continue
        match = _FOCUS_DONE.search(sentence)
        if match is not None and not re.search(r"\b(?:not|n't|if)\b", sentence[: match.start()]):
            phrase = _clip(match.group("x"))
            if content_words(phrase):
                return Found(phrase, sentence)
    return None


def decisions_of(text: str) -> list[Found]:
    """Each decision a message states, at most one per sentence."""
    found: list[Found] = []
    for sentence in sentences(text.replace("\u2019", "'")):
        if sentence.rstrip().endswith("?"):
            continue
        for pattern in _DECISION_CUES:
            match = pattern.search(sentence)
            if match is None:
                continue
            if _NOT_DECIDED.search(sentence[: match.start()]):
                break
            # "we decided not to …" is a decision; "we haven't decided" is not (above).
            phrase = _clip(match.group("x"))
            if not content_words(phrase):
                break
            found.append(Found(_capital(phrase), sentence))
            break
    return found


def tags_of(text: str) -> list[str]:
    return list(dict.fromkeys(tag.lower() for tag in _TAG.findall(text)))


def reverses(text: str) -> bool:
    return _REVERSAL.search(text.replace("\u2019", "'")) is not None


def shared_words(a: str, b: str) -> set[str]:
    return content_words(a) & content_words(b)


# The verbs a focus phrase starts with: no part of its subject.
LEAD_VERBS = frozenset(
    ["working", "preparing", "training", "studying", "debugging", "planning", "writing", "building"]
)


def ends_focus(done: str, focus: str) -> bool:
    """ "done with X" ends the focus when X names at least half of the focus's subject
    ("I ran the Berlin marathon" ends "Preparing for the Berlin marathon"; "I ran
    into Bob at the marathon expo" is no "done", and "finished the expo" is not it)."""
    subject = content_words(focus) - LEAD_VERBS
    shared = content_words(done) & subject
    return bool(shared) and 2 * len(shared) >= len(subject)

"""Which days ahead a message names, and which triggers a message cancels.

Days come from the one date parser (``memory.timeparse.future_days``), read in
the person's zone. A day the words alone put ahead ("tomorrow", "next Friday",
"in six months", a date with its year) is taken unless its sentence is about the
past ("I was supposed to fly tomorrow" is not, "What did I do last Friday?" names
no day ahead at all). A day only read ahead ("Friday", "on the 12th", "14 June")
is taken when its sentence speaks of what is to come: a future word ("will",
"going to", "have to", "is on" ...) or no past-tense word. Days past the
horizon (``triggers.horizon_days``) are dropped and logged at DEBUG.

Cancelling: a message with a cancelling phrase ("never mind", "is off", "called
off", "cancelled", "not happening") cancels the person's open triggers whose
sentence shares the most content words with it (at least one); content words
are the words of three letters or more outside a stop list (function words,
the cancelling and time words), compared lower-cased with a plural "s" dropped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from memory.sanitize import sanitize
from memory.timeparse import MONTHS, WEEKDAYS
from memory.timeparse_ahead import future_days

log = logging.getLogger(__name__)

# Words that place a sentence in the past.
_PAST = re.compile(
    r"\b(?:was|were|wasn'?t|weren'?t|did|didn'?t|had|hadn'?t|went|came|saw|met|got|took|"
    r"made|said|told|gave|left|ago|yesterday|last|used\s+to|happened|finished|remember\s+when)\b",
    re.I,
)
# Words that place it ahead, whatever else it says ("I booked it for Friday").
_FUTURE = re.compile(
    r"\b(?:will|shall|won'?t|going\s+to|gonna|about\s+to|plan(?:s|ning)?\s+to|hope\s+to|"
    r"have\s+to|has\s+to|need\s+to|must|(?:is|are|am|'s|'re|'m)\s+(?:on|at|in|due|coming|"
    r"scheduled|booked|planned)|coming\s+up|looking\s+forward|can'?t\s+wait|scheduled|"
    r"booked\s+for|remind\s+me|due)\b|'ll\b",
    re.I,
)
# A regular past tense after its subject ("I visited Gran on Friday", "we painted
# the shed Sunday"). Verbs of arranging are left out: "I booked a table for Friday"
# says what is to come.
_PAST_ED = re.compile(
    r"\b(?:i|we|you|he|she|they)\s+(?:(?:just|already|finally|also|never|recently|then)\s+)?"
    r"(?!(?:booked|scheduled|planned|arranged|reserved|organi[sz]ed|registered|signed|invited|"
    r"promised|agreed|decided|confirmed|moved|rescheduled|postponed|changed|needed|wanted|"
    r"hoped|expected|asked|emailed|texted|called|ordered|paid)\b)[a-z]{2,}ed\b",
    re.I,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")

CANCEL = re.compile(
    r"\b(?:never\s*mind|nevermind|called\s+off|call(?:ing)?\s+(?:it\s+)?off|cancell?ed|"
    r"cancel(?:ling)?\s+(?:the|my|our|it)|(?:is|are|was|were|'s)\s+off\b|"
    r"(?:isn'?t|is\s+not|aren'?t|won'?t\s+be|not)\s+happening|won'?t\s+happen|scrap\s+that|"
    r"no\s+longer\s+(?:happening|on|going))",
    re.I,
)
_WORD = re.compile(r"[a-z][a-z']+")
_STOP = (
    frozenset(
        """
    the and but for with that this these those there their they them then than
    what when where which who whom why how you your yours our ours his her hers its
    are was were will would shall should can could may might must have has had not
    all any some just also very really too from into onto about after before over
    under again off out never mind nevermind cancel cancelled canceled called call
    happening happen won't isn't aren't anymore any more longer going gonna get got
    one day days week weeks weekend month months year years today tomorrow tonight
    next last coming time okay sorry well actually guess think know it's i'm that's
    don't doesn't didn't wasn't weren't scrap forget please thanks thank yeah yes
    """.split()  # noqa: SIM905 (a list literal of 130 words would be unreadable)
    )
    | frozenset(WEEKDAYS)
    | frozenset(MONTHS)
)


@dataclass(frozen=True)
class DetectedDay:
    day: date
    phrase: str
    # The sentence that named it, sanitised, on one line, at most ``context_chars``.
    sentence: str


def _straight(text: str) -> str:
    """Typographic apostrophes as typed ones: "won\u2019t" reads as "won't"."""
    return text.replace("\u2019", "'")


def _sentence_at(text: str, position: int) -> str:
    for match in _SENTENCE.finditer(text):
        if match.start() <= position < match.end():
            return match.group(0).strip()
    return text.strip()


# A plan that is not one any more: "I was supposed to fly tomorrow".
_CALLED_OFF = re.compile(r"\b(?:was|were)\s+(?:supposed|going|meant|planning)\s+to\b", re.I)


def _speaks_ahead(sentence: str, explicit: bool) -> bool:
    sentence = _straight(sentence)
    if explicit:
        # The words put the day ahead; only a question about the past or a plan
        # given up takes it back.
        asks_past = sentence.rstrip().endswith("?") and (
            _PAST.search(sentence) is not None or _PAST_ED.search(sentence) is not None
        )
        return not asks_past and _CALLED_OFF.search(sentence) is None
    # "I booked it last week for Friday": a future word wins over a past one; with
    # none, a past word ("What did I do on Friday?", "I had an exam Friday") loses.
    if _FUTURE.search(sentence) is not None:
        return True
    return _PAST.search(sentence) is None and _PAST_ED.search(sentence) is None


def days_ahead(
    text: str,
    today: date,
    *,
    horizon_days: int,
    max_days: int,
    context_chars: int = 300,
) -> list[DetectedDay]:
    """The days after ``today`` (the person's, in their zone) that ``text`` names.

    One per day (its first mention), at most ``max_days``; each with its sentence.
    """
    found: list[DetectedDay] = []
    seen: set[date] = set()
    for ahead in future_days(text, today):
        sentence = _sentence_at(text, ahead.start)
        if not _speaks_ahead(sentence, ahead.explicit):
            continue
        if ahead.day > today + timedelta(days=horizon_days):
            # "on 3000-01-01": no one is reminded of that; not the person's error either.
            log.debug("a day past the horizon of %d days: %s", horizon_days, ahead.phrase)
            continue
        if ahead.day in seen:
            continue
        seen.add(ahead.day)
        clean = " ".join(sanitize(sentence).text.split())
        if len(clean) > context_chars:
            clean = clean[: context_chars - 1] + "…"
        found.append(DetectedDay(ahead.day, ahead.phrase[:100], clean))
        if len(found) == max_days:
            break
    return found


def content_words(text: str) -> frozenset[str]:
    """The words a cancelling message and a trigger's sentence are compared by."""
    words = set()
    for found in _WORD.findall(_straight(text).lower()):
        word = found.strip("'").removesuffix("'s")
        if len(word) < 3 or word in _STOP:
            continue
        if len(word) > 4 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        words.add(word)
    return frozenset(words)


def is_cancellation(text: str) -> bool:
    return CANCEL.search(_straight(text)) is not None


def cancelled_by(text: str, contexts: Sequence[tuple[int, str]]) -> list[int]:
    """Of ``(trigger id, sentence)`` pairs, the ids ``text`` cancels (see the module doc)."""
    if not is_cancellation(text):
        return []
    words = content_words(text)
    if not words:
        return []
    shared = [(len(words & content_words(context)), trigger_id) for trigger_id, context in contexts]
    best = max((count for count, _ in shared), default=0)
    if best == 0:
        return []
    return [trigger_id for count, trigger_id in shared if count == best]

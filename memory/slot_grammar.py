"""What a claim is, and the pieces of the rules that read claims (memory/slots.py,
memory/statuses.py): a value, a first-person subject, the words that may stand
between them. Shared by both rule modules, so neither imports the other."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True)
class Claim:
    attribute: str
    # Normalised ("porto", "acme corp"); "" for a claim that only ends the slot, or
    # that says the slot changed to a value it does not name ("I got promoted").
    value: str
    # The value it names as replaced ("from Lisbon"), normalised; "" when none.
    old: str = ""
    # "no longer ...", "we broke up": the slot ends without a new value.
    ends: bool = False
    # Said as a change ("I got promoted", "I'm the manager now", "I went vegan"): it
    # ends the slot's other values however soon after them it was said.
    renews: bool = False
    # A bare "I moved to X": where one lives only if X is a place, which the rules
    # cannot tell ("Porto", "Chrome"); memory/validity.py asks the embedder.
    needs_place: bool = False
    # "Miso passed away", "our dog died": ``old`` names who is gone; it ends the
    # statements of names and of what one has that hold it, whatever their slot.
    gone: bool = False
    # The last day the event may have happened, when the statement dates it ("I
    # graduated back in 2015"): what was said after that day is not ended by it.
    until: date | None = None


# A value: up to five words, ending at punctuation or at a word that starts a new clause.
STOP = (
    r"and|but|because|since|so|for|with|after|before|when|while|last|next|this|now|"
    r"today|yesterday|tomorrow|recently|anymore|any more|as|in|at|on|from|to|which|who|"
    r"where|until|though|although|if|a few|about|back|again|still|also|really|just|probably"
)
VALUE = rf"(?P<value>(?:(?!(?:{STOP})\b)[\w'&.-]+)(?:\s+(?!(?:{STOP})\b)[\w'&-]+){{0,4}})"
OLD = rf"(?P<old>(?:(?!(?:{STOP})\b)[\w'&.-]+)(?:\s+(?!(?:{STOP})\b)[\w'&-]+){{0,3}})"
SPEAKER = r"(?:i|we)"  # "I" or "we", the speaker
ADV = r"(?:(?:just|finally|recently|now|officially|actually|already|also|currently)\s+)?"
HAVE = r"(?:'ve|\s+have|'d)?\s+"
BE = r"(?:'m|\s+am|'re|\s+are)"
# Adverbs between "I'm" / "I've" and a status: "I'm now", "I've just", "I'm officially".
SOON = r"(?:(?:just|finally|recently|officially|actually|now|currently|still|newly)\s+)*"


def wordset(words: str) -> frozenset[str]:
    """A closed word list, written as one string."""
    return frozenset(words.split())


# "Guess who's head chef now!", "look who got promoted": the speaker, told as a riddle.
# Said as a question ("guess who's getting married? My sister!") the clause is none.
_GUESS_WHO = re.compile(r"\b(?:guess|look)\s+who(?P<verb>'s\s+been|'s|\s+is|\s+has|\s+)", re.I)
_AS_SPEAKER = {"'s been": "I've been", "'s": "I'm", " is": "I am", " has": "I have", " ": "I "}


def speaker_guessed(clause: str) -> str:
    """A clause with "guess who ..." said of the speaker, as "I ..."."""
    guess = _GUESS_WHO.search(clause)
    if guess is None:
        return clause
    said = _AS_SPEAKER[re.sub(r"\s+", " ", guess["verb"].lower())]
    return clause[: guess.start()] + said + clause[guess.end() :]


_LEADING = re.compile(r"^(?:a|an|the|my|our|in|at)\s+", re.I)
# Words that are not a value on their own ("I live in a flat", "I joined them").
_NOT_VALUES = frozenset(
    {
        *["it", "that", "this", "there", "here", "them", "him", "her", "us", "you", "one"],
        *["home", "work", "place", "flat", "apartment", "house", "city", "town", "job"],
        *["company", "team", "things", "stuff"],
    }
)


def normal(value: str) -> str:
    """A value as compared: lower case, no leading article, no trailing punctuation."""
    value = value.strip().strip(".,;:!\"'()").lower()
    while True:
        stripped = _LEADING.sub("", value)
        if stripped == value:
            break
        value = stripped
    return " ".join(value.split())


def value_of(match: re.Match[str], group: str = "value") -> str:
    """A group's value, normalised; "" when it is missing or no value on its own."""
    found = match.groupdict().get(group) or ""
    value = normal(found)
    if not value or value in _NOT_VALUES:
        return ""
    return value

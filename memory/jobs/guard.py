"""The conflict guard of the nightly merge: what two close sentences must share to be one.

Two items can sit above the merge threshold and still say different things:
"Miso is 3" and "Miso is 4" are 0.9 apart in MiniLM's space, and merging them
would silently keep one and bury the other. Such a pair is a conflict (for the
trust pass to weigh), never a duplicate. A pair is a duplicate only when both
hold the same numbers (digits and number words alike: "3" is "three"), the
same dates (months, weekdays, relative days such as "yesterday", and the
dates the items refer to) and the same names (capitalised words that are not
ordinary sentence openers). Equality of sets makes "agrees with" transitive,
so a group merged around one survivor agrees pairwise too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

_NUMBER_WORDS: dict[str, float] = {
    word: n
    for n, word in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
}
_NUMBER_WORDS |= {
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "hundred": 100,
    "thousand": 1000,
    "once": 1,
    "twice": 2,
    "half": 0.5,
    "dozen": 12,
}
_ORDINALS = {
    word: n
    for n, word in enumerate(
        [
            "zeroth",
            "first",
            "second",
            "third",
            "fourth",
            "fifth",
            "sixth",
            "seventh",
            "eighth",
            "ninth",
            "tenth",
            "eleventh",
            "twelfth",
        ]
    )
}
_MONTHS = {
    name: n
    for n, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_WEEKDAYS = {
    name: n
    for n, names in enumerate(
        [
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        ]
    )
    for name in names
}
# Words that name a day or a time relative to when it was said: two items that
# differ in one ("yesterday" against "last week") speak of different times.
_RELATIVE = {
    "today",
    "tonight",
    "yesterday",
    "tomorrow",
    "weekend",
    "morning",
    "evening",
    "afternoon",
    "last",
    "next",
    "ago",
    "week",
    "month",
    "year",
    "spring",
    "summer",
    "autumn",
    "fall",
    "winter",
    "christmas",
    "easter",
}
# Capitalised words that open sentences or are the pronoun I: not names.
_NOT_NAMES = {
    w.lower()
    for w in [
        "I",
        "I'm",
        "I've",
        "I'd",
        "I'll",
        "A",
        "An",
        "The",
        "This",
        "That",
        "These",
        "Those",
        "My",
        "Your",
        "His",
        "Her",
        "Its",
        "Our",
        "Their",
        "He",
        "She",
        "It",
        "We",
        "You",
        "They",
        "Me",
        "Him",
        "Them",
        "Us",
        "There",
        "Here",
        "What",
        "When",
        "Where",
        "Why",
        "How",
        "Who",
        "Which",
        "And",
        "But",
        "Or",
        "So",
        "If",
        "Then",
        "Also",
        "Yes",
        "No",
        "Not",
        "Maybe",
        "Sure",
        "Ok",
        "Okay",
        "Oh",
        "Well",
        "Hi",
        "Hello",
        "Thanks",
        "Thank",
        "Please",
        "Just",
        "Still",
        "Now",
        "Today",
        "Yesterday",
        "Tomorrow",
        "Every",
        "Each",
        "Some",
        "Any",
        "All",
        "Both",
        "Most",
        "Many",
        "Much",
        "More",
        "Less",
        "User",
        "Person",
        "Agent",
        "Assistant",
        "Likes",
        "Loves",
        "Prefers",
        "Enjoys",
        "Has",
        "Have",
        "Had",
        "Is",
        "Was",
        "Are",
        "Were",
        "Be",
        "Been",
        "Does",
        "Did",
        "Do",
        "Can",
        "Could",
        "Will",
        "Would",
        "Should",
        "Often",
        "Usually",
        "Always",
        "Never",
        "Sometimes",
        "Recently",
        "Lately",
        "Currently",
        "After",
        "Before",
        "During",
        "Since",
        "Until",
        "While",
        "In",
        "On",
        "At",
        "For",
        "From",
        "To",
        "With",
        "Without",
        "About",
        "As",
        "By",
        "Of",
        "Mr",
        "Mrs",
        "Ms",
        "Dr",
    ]
}

_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


@dataclass(frozen=True)
class Specifics:
    """What a sentence pins down: its numbers, dates and names."""

    numbers: frozenset[str]
    dates: frozenset[str]
    names: frozenset[str]


def _number(value: float) -> str:
    return f"{value:g}"


def specifics(text: str, refers: tuple[date | None, date | None] = (None, None)) -> Specifics:
    """The numbers, dates and names ``text`` holds (and the dates an item refers to)."""
    numbers: set[str] = set()
    dates: set[str] = set()
    names: set[str] = set()
    for match in _NUMBER.finditer(text):
        numbers.add(_number(float(match.group().replace(",", "."))))
    for match in _WORD.finditer(text):
        word = match.group()
        lower = word.lower()
        if lower in _NUMBER_WORDS:
            numbers.add(_number(_NUMBER_WORDS[lower]))
        elif lower in _ORDINALS:
            numbers.add(_number(_ORDINALS[lower]))
        elif lower in _MONTHS and (lower != "may" or word == "May"):
            # "may" the verb is not the month; "May" mid-sentence is taken as the month.
            dates.add(f"month:{_MONTHS[lower]}")
        elif lower in _WEEKDAYS and (len(lower) > 3 or word[0].isupper()):
            dates.add(f"weekday:{_WEEKDAYS[lower]}")
        elif lower in _RELATIVE:
            dates.add(lower)
        elif word[0].isupper() and lower.split("'")[0] not in _NOT_NAMES:
            # "Miso's" names Miso.
            names.add(lower.split("'")[0])
    start, end = refers
    if start is not None:
        dates.add(f"refers:{start.isoformat()}:{(end or start).isoformat()}")
    return Specifics(frozenset(numbers), frozenset(dates), frozenset(names))


def conflict(a: Specifics, b: Specifics) -> str | None:
    """Why two close items are not the same (a number, a date or a name differs), or None."""
    if a.numbers != b.numbers:
        return "number"
    # An item that refers to a day and one that does not may still be the same
    # statement ("I moved to Porto" said twice, one read a date from its message):
    # only two different resolved days, or different date words, keep them apart.
    words_a = {d for d in a.dates if not d.startswith("refers:")}
    words_b = {d for d in b.dates if not d.startswith("refers:")}
    refers_a, refers_b = a.dates - words_a, b.dates - words_b
    if words_a != words_b or (refers_a and refers_b and refers_a != refers_b):
        return "date"
    if a.names != b.names:
        return "name"
    return None

"""Time expressions resolved against a message's own time (time-aware recall).

"last week" in a message sent on Wednesday 14 June 2023 means 5-11 June 2023,
whenever the question is asked. Both sides use it: a stored message gets the
dates it refers to ("yesterday" → the day before it was sent), and a question
gets the window its answer should fall in. "before/after the trip" names an
event instead of a date: it comes back as an ``EventAnchor`` that the pack
resolves against the memories themselves.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Literal

MONTHS = {name.lower(): index for index, name in enumerate(calendar.month_name) if name} | {
    name.lower(): index for index, name in enumerate(calendar.month_abbr) if name
}
MONTHS.pop("may", None)
MONTHS["may"] = 5
WEEKDAYS = {name.lower(): index for index, name in enumerate(calendar.day_name)}
NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "a couple of": 2, "a few": 3, "several": 3,
}  # fmt: skip
SEASONS = {
    "spring": (3, 5),
    "summer": (6, 8),
    "autumn": (9, 11),
    "fall": (9, 11),
    "winter": (12, 2),
}

_MONTH_RE = "|".join(sorted(MONTHS, key=len, reverse=True))
_NUM_RE = r"\d+|" + "|".join(sorted(NUMBERS, key=len, reverse=True))
_DAY_RE = r"(\d{1,2})(?:st|nd|rd|th)?"


@dataclass(frozen=True)
class TimeWindow:
    """Inclusive range of days and the words that named it."""

    start: date
    end: date
    phrase: str

    def contains(self, day: date) -> bool:
        return self.start <= day <= self.end

    def overlaps(self, start: date, end: date) -> bool:
        return start <= self.end and end >= self.start

    def as_dict(self) -> dict[str, str]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "phrase": self.phrase}


@dataclass(frozen=True)
class EventAnchor:
    """ "before the trip": the window is on one side of when the event was talked about."""

    relation: Literal["before", "after"]
    event: str
    phrase: str


def _month_end(year: int, month: int) -> date:
    return date(year, month, calendar.monthrange(year, month)[1])


def _recent_month(month: int, today: date) -> int:
    """The year of the latest such month not after ``today``."""
    return today.year if month <= today.month else today.year - 1


def _number(word: str) -> int:
    return int(word) if word.isdigit() else NUMBERS[word]


def _relative(match: re.Match[str], today: date) -> tuple[date, date] | None:
    amount, unit = _number(match["n"].lower()), match["unit"].lower().rstrip("s")
    if unit == "day":
        day = today - timedelta(days=amount)
        return day, day
    if unit == "week":
        centre = today - timedelta(weeks=amount)
        return centre - timedelta(days=3), centre + timedelta(days=3)
    if unit == "month":
        month_index = today.year * 12 + today.month - 1 - amount
        year, month = divmod(month_index, 12)
        return date(year, month + 1, 1), _month_end(year, month + 1)
    year = today.year - amount
    return date(year, 1, 1), date(year, 12, 31)


def _named_period(match: re.Match[str], today: date) -> tuple[date, date] | None:
    which, unit = match["which"].lower(), match["unit"].lower()
    shift = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1}[which]
    if unit == "week":
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=shift)
        return monday, monday + timedelta(days=6)
    if unit == "weekend":
        # The Saturday of this (Monday-based) week; "last weekend" is the one before it.
        saturday = today + timedelta(days=5 - today.weekday()) + timedelta(weeks=shift)
        return saturday, saturday + timedelta(days=1)
    if unit == "month":
        month_index = today.year * 12 + today.month - 1 + shift
        year, month = divmod(month_index, 12)
        return date(year, month + 1, 1), _month_end(year, month + 1)
    year = today.year + shift
    return date(year, 1, 1), date(year, 12, 31)


def _weekday(match: re.Match[str], today: date) -> tuple[date, date] | None:
    target = WEEKDAYS[match["weekday"].lower()]
    back = (today.weekday() - target) % 7 or 7
    if (match["which"] or "").lower() == "next":
        forward = (target - today.weekday()) % 7 or 7
        day = today + timedelta(days=forward)
    else:
        day = today - timedelta(days=back)
    return day, day


def _day_month(match: re.Match[str], today: date) -> tuple[date, date] | None:
    month = MONTHS[(match["month"] or match["month2"]).lower()]
    day = int(match["day"] or match["day2"])
    year = int(match["year"]) if match["year"] else _recent_month(month, today)
    try:
        when = date(year, month, day)
    except ValueError:
        return None
    return when, when


def _month(match: re.Match[str], today: date) -> tuple[date, date] | None:
    month = MONTHS[match["month"].lower()]
    year = int(match["year"]) if match["year"] else _recent_month(month, today)
    return date(year, month, 1), _month_end(year, month)


def _year(match: re.Match[str], today: date) -> tuple[date, date] | None:
    year = int(match["year"])
    return date(year, 1, 1), date(year, 12, 31)


def _season(match: re.Match[str], today: date) -> tuple[date, date] | None:
    first, last = SEASONS[match["season"].lower()]
    which = (match["which"] or "").lower()
    year = today.year if (today.month >= first or which == "this") else today.year - 1
    if which == "last":
        year -= 1 if today.month > (last if last >= first else 12) else 0
    if last < first:  # winter runs into the next year
        return date(year, first, 1), _month_end(year + 1, last)
    return date(year, first, 1), _month_end(year, last)


def _fixed(offset_start: int, offset_end: int | None = None) -> object:
    def resolve(_match: re.Match[str], today: date) -> tuple[date, date]:
        end = offset_start if offset_end is None else offset_end
        return today + timedelta(days=offset_start), today + timedelta(days=end)

    return resolve


_PATTERNS: tuple[tuple[re.Pattern[str], object], ...] = (
    (re.compile(r"\bthe day before yesterday\b", re.I), _fixed(-2)),
    (re.compile(r"\b(?:yesterday|last night)\b", re.I), _fixed(-1)),
    (re.compile(r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b", re.I), _fixed(0)),
    (re.compile(r"\btomorrow\b", re.I), _fixed(1)),
    (re.compile(r"\b(?:recently|lately|the other day)\b", re.I), _fixed(-30, 0)),
    (re.compile(r"\bearlier this year\b", re.I), None),
    (
        re.compile(rf"\b(?P<n>{_NUM_RE})\s+(?P<unit>days?|weeks?|months?|years?)\s+ago\b", re.I),
        _relative,
    ),
    (
        re.compile(
            r"\b(?P<which>last|past|previous|this|next)\s+(?P<unit>weekend|week|month|year)\b", re.I
        ),
        _named_period,
    ),
    (
        re.compile(
            r"\b(?:(?P<which>last|this|next|on)\s+)?(?P<weekday>" + "|".join(WEEKDAYS) + r")\b",
            re.I,
        ),
        _weekday,
    ),
    (
        re.compile(
            rf"\b(?:{_DAY_RE.replace('(', '(?P<day>', 1)}\s+(?:of\s+)?(?P<month>{_MONTH_RE})\.?"
            rf"|(?P<month2>{_MONTH_RE})\.?\s+{_DAY_RE.replace('(', '(?P<day2>', 1)})\b"
            r"(?:,?\s+(?P<year>(?:19|20)\d{2}))?",
            re.I,
        ),
        _day_month,
    ),
    (
        re.compile(
            rf"\b(?P<month>{_MONTH_RE})\b(?:\s+(?:of\s+)?(?P<year>(?:19|20)\d{{2}}))?", re.I
        ),
        _month,
    ),
    (re.compile(r"\b(?:in|during|since|of|from)\s+(?P<year>(?:19|20)\d{2})\b", re.I), _year),
    (
        re.compile(
            r"\b(?:(?P<which>last|this)\s+)?(?P<season>spring|summer|autumn|fall|winter)\b", re.I
        ),
        _season,
    ),
)
_ANCHOR = re.compile(
    r"\b(?P<relation>before|after)\s+(?:the|my|our|his|her|their|your)\s+"
    r"(?P<event>[a-z][a-z'-]+(?:\s+[a-z][a-z'-]+){0,2}?)"
    r"(?=\s*[?.!,;]|\s+(?:and|but|when|what|who|where|how|why|did|do|does|was|were|is|are|"
    r"i|we|you|he|she|they|with|in|on|at|to)\b|\s*$)",
    re.I,
)
# Words that look like month names but often are not ("may" the verb, "march" the walk):
# they count only after one of _MONTH_LEADS or with a year.
_AMBIGUOUS_MONTH = re.compile(
    r"^(?:may|march|jan|mar|jun|jul|aug|sep|sept|oct|nov|dec|apr|feb)$", re.I
)
_MONTH_LEADS = frozenset(
    [
        "in",
        "of",
        "since",
        "until",
        "till",
        "by",
        "during",
        "early",
        "late",
        "mid",
        "last",
        "this",
        "next",
        "from",
        "before",
        "after",
    ]
)


def _month_is_real(match: re.Match[str], text: str) -> bool:
    """ "in May", "May 2023": a month; "I may go", "the March for Science": not one."""
    word = match["month"]
    if not _AMBIGUOUS_MONTH.match(word) or match["year"]:
        return True
    before = text[: match.start()].rstrip().lower().rsplit(" ", 1)[-1]
    return before in _MONTH_LEADS


def resolve_window(text: str, when: datetime | date) -> TimeWindow | None:
    """The first time expression of ``text``, resolved against ``when``; None when there is none."""
    today = when.date() if isinstance(when, datetime) else when
    found: list[tuple[int, TimeWindow]] = []
    for pattern, resolver in _PATTERNS:
        for match in pattern.finditer(text):
            if pattern.pattern.startswith(r"\b(?P<month>") and not _month_is_real(match, text):
                continue
            if resolver is None:  # earlier this year
                span: tuple[date, date] | None = (date(today.year, 1, 1), today)
            else:
                span = resolver(match, today)  # type: ignore[operator]
            if span is not None:
                start, end = span
                found.append((match.start(), TimeWindow(start, end, match.group(0).strip())))
                break
    if not found:
        return None
    return min(found, key=lambda pair: (pair[0], pair[1].end - pair[1].start))[1]


def find_anchor(text: str) -> EventAnchor | None:
    match = _ANCHOR.search(text)
    if match is None:
        return None
    relation: Literal["before", "after"] = (
        "before" if match["relation"].lower() == "before" else "after"
    )
    return EventAnchor(relation, match["event"].strip(), match.group(0).strip())

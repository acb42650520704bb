"""Time expressions resolved against a message's own time (time-aware recall).

"last week" in a message sent on Wednesday 14 June 2023 means 5-11 June 2023,
whenever the question is asked. Both sides use it: a stored message gets the
dates it refers to ("yesterday" → the day before it was sent), and a question
gets the window its answer should fall in. "before/after the trip" names an
event instead of a date: it comes back as an ``EventAnchor`` that the pack
resolves against the memories themselves. The observer reads the one day a
statement refers to with ``referred_day``: the same patterns, read as a
statement may mean them (ahead of the message too).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
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
VAGUE = frozenset({"a couple of", "a few", "several"})
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
    word, unit = match["n"].lower(), match["unit"].lower().rstrip("s")
    amount = _number(word)
    if unit == "day":
        day = today - timedelta(days=amount)
        # "a few days ago" is not one day: a day either side of three.
        spread = 1 if word in VAGUE else 0
        return day - timedelta(days=spread), day + timedelta(days=spread)
    if unit == "weekend":
        # "two weekends ago": the weekend before last weekend.
        saturday = today + timedelta(days=5 - today.weekday()) - timedelta(weeks=amount)
        return saturday, saturday + timedelta(days=1)
    if unit == "week":
        centre = today - timedelta(weeks=amount)
        return centre - timedelta(days=3), centre + timedelta(days=3)
    if unit == "month":
        month_index = today.year * 12 + today.month - 1 - amount
        year, month = divmod(month_index, 12)
        return date(year, month + 1, 1), _month_end(year, month + 1)
    year = today.year - amount
    return date(year, 1, 1), date(year, 12, 31)


def _ahead(match: re.Match[str], today: date) -> tuple[date, date] | None:
    """ "in three days", "in two weeks": a time ahead, as ``_relative`` reads one behind."""
    word, unit = match["n"].lower(), match["unit"].lower().rstrip("s")
    amount = _number(word)
    if unit == "day":
        day = today + timedelta(days=amount)
        spread = 1 if word in VAGUE else 0
        return day - timedelta(days=spread), day + timedelta(days=spread)
    if unit == "week":
        centre = today + timedelta(weeks=amount)
        return centre - timedelta(days=3), centre + timedelta(days=3)
    if unit == "month":
        month_index = today.year * 12 + today.month - 1 + amount
        year, month = divmod(month_index, 12)
        return date(year, month + 1, 1), _month_end(year, month + 1)
    year = today.year + amount
    return date(year, 1, 1), date(year, 12, 31)


def _shifted(today: date, amount: int, unit: str) -> date:
    """``today`` moved ``amount`` units (negative: back); a month's day clamped to its end."""
    if unit == "day":
        return today + timedelta(days=amount)
    if unit == "week":
        return today + timedelta(weeks=amount)
    months = amount * (12 if unit == "year" else 1)
    year, month = divmod(today.year * 12 + today.month - 1 + months, 12)
    return date(year, month + 1, min(today.day, calendar.monthrange(year, month + 1)[1]))


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


def _nearest_day_month(match: re.Match[str], today: date) -> tuple[date, date] | None:
    """A day and month without a year, as a statement means it: the nearest such day
    ("14 June" said on 8 May is five weeks ahead, not eleven months back)."""
    if match["year"]:
        return _day_month(match, today)
    month = MONTHS[(match["month"] or match["month2"]).lower()]
    day = int(match["day"] or match["day2"])
    candidates = []
    for year in (today.year - 1, today.year, today.year + 1):
        try:
            candidates.append(date(year, month, day))
        except ValueError:
            continue  # 29 February of a common year
    if not candidates:
        return None
    # The nearer one; a tie goes to the past.
    when = min(candidates, key=lambda d: (abs((d - today).days), d > today))
    return when, when


def _month(match: re.Match[str], today: date) -> tuple[date, date] | None:
    month = MONTHS[match["month"].lower()]
    if match["year"]:
        year = int(match["year"])
    elif (match["which"] or "").lower() == "next":
        # "next May": the first May after this month.
        year = today.year if month > today.month else today.year + 1
    else:
        year = _recent_month(month, today)
    part = (match["part"] or "").lower()
    # Thirds of the month: "early May" is 1-10, "mid-May" 11-20, "late May" 21-31.
    if part == "early":
        return date(year, month, 1), date(year, month, 10)
    if part == "mid":
        return date(year, month, 11), date(year, month, 20)
    if part == "late":
        return date(year, month, 21), _month_end(year, month)
    return date(year, month, 1), _month_end(year, month)


def _year(match: re.Match[str], today: date) -> tuple[date, date] | None:
    year = int(match["year"])
    return date(year, 1, 1), date(year, 12, 31)


def _season_of(year: int, first: int, last: int) -> tuple[date, date]:
    """The season that starts in ``year`` (winter runs into the next one)."""
    return date(year, first, 1), _month_end(year + 1 if last < first else year, last)


def _season(match: re.Match[str], today: date) -> tuple[date, date] | None:
    first, last = SEASONS[match["season"].lower()]
    which = (match["which"] or "").lower()
    recent = [_season_of(year, first, last) for year in range(today.year - 2, today.year + 1)]
    if which == "last":
        # The latest that is over: in June, last summer is the year before's.
        return max(span for span in recent if span[1] < today)
    if which == "this":
        # The one under way, else this year's.
        under_way = [span for span in recent if span[0] <= today <= span[1]]
        return under_way[0] if under_way else _season_of(today.year, first, last)
    # Bare "in the summer": the latest that has begun.
    return max(span for span in recent if span[0] <= today)


def easter_sunday(year: int) -> date:
    """Western Easter Sunday (the anonymous Gregorian computus)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    g = (8 * b + 13) // 25
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    weekday = (32 + 2 * e + 2 * i - h - k) % 7
    m = (a + 11 * h + 19 * weekday) // 433
    month, day = divmod(h + weekday - 7 * m + 114, 31)
    return date(year, month, day + 1)


def thanksgiving_day(year: int) -> date:
    """The fourth Thursday of November (the US holiday)."""
    first = date(year, 11, 1)
    return first + timedelta(days=(3 - first.weekday()) % 7 + 21)


# Each holiday's days in a given year: (first, last).
HOLIDAYS: dict[str, Callable[[int], tuple[date, date]]] = {
    "christmas eve": lambda y: (date(y, 12, 24), date(y, 12, 24)),
    "christmas": lambda y: (date(y, 12, 24), date(y, 12, 26)),
    "xmas": lambda y: (date(y, 12, 24), date(y, 12, 26)),
    "new year's eve": lambda y: (date(y, 12, 31), date(y, 12, 31)),
    "new year's day": lambda y: (date(y, 1, 1), date(y, 1, 1)),
    # The night it turns: the eve of the year named, and its first day.
    "new year": lambda y: (date(y - 1, 12, 31), date(y, 1, 1)),
    "valentine's day": lambda y: (date(y, 2, 14), date(y, 2, 14)),
    "halloween": lambda y: (date(y, 10, 31), date(y, 10, 31)),
    "independence day": lambda y: (date(y, 7, 4), date(y, 7, 4)),
    "the fourth of july": lambda y: (date(y, 7, 4), date(y, 7, 4)),
    # Good Friday to Easter Monday; Thanksgiving Thursday to Sunday.
    "easter": lambda y: (
        easter_sunday(y) - timedelta(days=2),
        easter_sunday(y) + timedelta(days=1),
    ),
    "thanksgiving": lambda y: (thanksgiving_day(y), thanksgiving_day(y) + timedelta(days=3)),
}
_HOLIDAY_RE = "|".join(
    re.escape(name).replace("'", "['\u2019]?") for name in sorted(HOLIDAYS, key=len, reverse=True)
)


# A word of every holiday's name, as it must appear in a text that names it.
_HOLIDAY_WORDS: tuple[str, ...] = (
    *("christmas", "xmas", "new year", "valentine", "halloween", "independence"),
    *("july", "easter", "thanksgiving"),
)


def _unquoted(name: str) -> str:
    return name.lower().replace("'", "").replace("\u2019", "")


# Looked up as written or without the apostrophe ("new years eve").
_HOLIDAYS_UNQUOTED = {_unquoted(name): days for name, days in HOLIDAYS.items()}


def _holiday(match: re.Match[str], today: date) -> tuple[date, date] | None:
    name = _unquoted(match["holiday"])
    days = _HOLIDAYS_UNQUOTED[name]
    if match["year"]:
        return days(int(match["year"]))
    which = (match["which"] or "").lower()
    if which == "next":
        return next(days(y) for y in (today.year, today.year + 1) if days(y)[0] > today)
    if which == "this":
        return (
            days(today.year + 1) if name == "new year" and today.month == 12 else days(today.year)
        )
    # "at Christmas", "last Easter": the latest that has begun.
    return max(days(y) for y in (today.year - 1, today.year) if days(y)[0] <= today)


def _iso_day(match: re.Match[str], today: date) -> tuple[date, date] | None:
    try:
        when = date(int(match["year"]), int(match["month"]), int(match["day"]))
    except ValueError:
        return None
    return when, when


def _fixed(offset_start: int, offset_end: int | None = None) -> object:
    def resolve(_match: re.Match[str], today: date) -> tuple[date, date]:
        end = offset_start if offset_end is None else offset_end
        return today + timedelta(days=offset_start), today + timedelta(days=end)

    return resolve


_RECENTLY = re.compile(r"\b(?:recently|lately|the other day)\b", re.I)
_EARLIER_THIS_YEAR = re.compile(r"\bearlier this year\b", re.I)
# A window up to the message, but no day a statement could be said to refer to.
_NO_DAY_OF_THEIR_OWN = (_RECENTLY, _EARLIER_THIS_YEAR)

_PATTERNS: tuple[tuple[re.Pattern[str], object], ...] = (
    (
        re.compile(r"\b(?P<year>(?:19|20)\d{2})-(?P<month>\d{2})-(?P<day>\d{2})\b"),
        _iso_day,
    ),
    (
        re.compile(
            rf"\b(?:(?P<which>last|this|next)\s+)?(?P<holiday>{_HOLIDAY_RE})\b"
            r"(?:,?\s+(?P<year>(?:19|20)\d{2}))?",
            re.I,
        ),
        _holiday,
    ),
    (re.compile(r"\bthe day before yesterday\b", re.I), _fixed(-2)),
    (re.compile(r"\b(?:yesterday|last night)\b", re.I), _fixed(-1)),
    (re.compile(r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b", re.I), _fixed(0)),
    (re.compile(r"\btomorrow\b", re.I), _fixed(1)),
    (_RECENTLY, _fixed(-30, 0)),
    (_EARLIER_THIS_YEAR, None),
    (
        re.compile(
            rf"\b(?P<n>{_NUM_RE})\s+(?P<unit>days?|weekends?|weeks?|months?|years?)\s+ago\b", re.I
        ),
        _relative,
    ),
    (
        re.compile(rf"\bin\s+(?P<n>{_NUM_RE})\s+(?P<unit>days?|weeks?|months?|years?)\b", re.I),
        _ahead,
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
            rf"\b(?:(?P<which>next)\s+)?(?:(?P<part>early|mid|late)(?:\s+|-|\s+in\s+))?"
            rf"(?P<month>{_MONTH_RE})\b"
            rf"(?:\s+(?:of\s+)?(?P<year>(?:19|20)\d{{2}}))?",
            re.I,
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
        "between",
    ]
)


# "every Friday", "At Christmas we usually bake": a habit, not a day. Read in the
# sentence of a bare weekday, month, season or holiday only ("last Christmas I
# always ..." names one Christmas; "yesterday, as always" names yesterday).
_HABITUAL = re.compile(
    r"\b(?:every|each|usually|always|typically|normally|generally|traditionally|"
    r"tend\s+to|tradition|annual(?:ly)?|yearly|favou?rite)\b",
    re.I,
)
_SENTENCE_END = re.compile(r"[.!?;\n]")


def _is_habit(match: re.Match[str], text: str) -> bool:
    groups = match.groupdict()
    # Last, this or next, a year, a day or a part of the month: one time.
    if (groups.get("which") or "").lower() in ("last", "this", "next") or any(
        groups.get(name) for name in ("year", "day", "day2", "part")
    ):
        return False
    before = text[: match.start()]
    ends = list(_SENTENCE_END.finditer(before))
    start = ends[-1].end() if ends else 0
    after = _SENTENCE_END.search(text, match.end())
    sentence = text[start : after.start() if after else len(text)]
    return _HABITUAL.search(sentence) is not None


def _month_is_real(match: re.Match[str], text: str) -> bool:
    """ "in May", "May 2023": a month; "I may go", "the March for Science": not one."""
    word = match["month"]
    if not _AMBIGUOUS_MONTH.match(word) or match["year"] or match["part"] or match["which"]:
        return True
    before = text[: match.start()].rstrip().lower().rsplit(" ", 1)[-1]
    if word == "may" and before == "this":
        return False  # "this may help": the verb (the month is written "May")
    return before in _MONTH_LEADS


_NAMED_TIMES = (_weekday, _month, _season, _holiday)

_BETWEEN = re.compile(
    r"\b(?:between|from)\s+(?P<first>.+?)\s+(?:and|to|until|till)\s+(?P<last>[^?.!,;]+)", re.I
)
_SINCE = re.compile(r"\bsince\s*$", re.I)


def resolve_window(text: str, when: datetime | date) -> TimeWindow | None:
    """The first time expression of ``text``, resolved against ``when``; None when there is none.

    "between May and June" (or "from ... to ...") spans both; "since Monday" runs
    to the message's own day. Questions and the pack's stored messages are read
    as about what happened (a day and month without a year is the latest past one).
    """
    return _window(text, when, statement=False)


def _window(text: str, when: datetime | date, statement: bool) -> TimeWindow | None:
    today = when.date() if isinstance(when, datetime) else when
    between = _BETWEEN.search(text)
    if between is not None:
        # Each side read as a time on its own ("in" so "May" counts as the month).
        first = _first_window(f"in {between['first']}", today, statement)
        last = _first_window(f"in {between['last']}", today, statement)
        if first is not None and last is not None and first.start <= last.end:
            return TimeWindow(first.start, last.end, between.group(0).strip())
    return _first_window(text, today, statement)


_AGO_OR_AHEAD = re.compile(
    rf"(?:in\s+)?(?P<n>{_NUM_RE})\s+(?P<unit>days?|weeks?|months?|years?)(?P<ago>\s+ago)?", re.I
)


def referred_day(text: str, when: datetime | date) -> tuple[date, str] | None:
    """The one day a statement refers to, and the words that named it (the observer's reading).

    ``resolve_window``'s patterns, read as a statement may mean them: "in three
    days" is a time ahead, and a day and month without a year the nearest such
    day ("my exam is on 3 July" said in June). Words that name no day of their own
    ("recently", "lately", "the other day", "earlier this year": the pack's window
    up to the message) are passed over. Of a window longer than a day, its first
    day ("last week": that Monday), except a count of days, weeks, months or years
    back or ahead ("two weeks ago"): the day that far from the message, which the
    window is drawn around.
    """
    today = when.date() if isinstance(when, datetime) else when
    window = _window(text, when, statement=True)
    if window is None:
        return None
    counted = _AGO_OR_AHEAD.fullmatch(window.phrase)
    if counted is not None and (counted["ago"] or window.phrase.lower().startswith("in")):
        amount = _number(counted["n"].lower()) * (-1 if counted["ago"] else 1)
        return _shifted(today, amount, counted["unit"].lower().rstrip("s")), window.phrase
    return window.start, window.phrase


def _first_window(text: str, today: date, statement: bool = False) -> TimeWindow | None:
    found: list[tuple[int, TimeWindow]] = []
    lowered = text.lower()
    for pattern, resolver in _PATTERNS:
        # The holidays' alternation is the slowest pattern and seldom needed: a word
        # of one comes first (18 µs a question → 1).
        if resolver is _holiday and not any(word in lowered for word in _HOLIDAY_WORDS):
            continue
        if statement and pattern in _NO_DAY_OF_THEIR_OWN:
            continue
        if resolver is _ahead and not statement:
            continue
        for match in pattern.finditer(text):
            if resolver is _month and not _month_is_real(match, text):
                continue
            if resolver in _NAMED_TIMES and _is_habit(match, text):
                continue
            if resolver is None:  # earlier this year
                span: tuple[date, date] | None = (date(today.year, 1, 1), today)
            elif resolver is _day_month and statement:
                span = _nearest_day_month(match, today)
            else:
                span = resolver(match, today)  # type: ignore[operator]
            if span is not None:
                start, end = span
                phrase = match.group(0).strip()
                since = phrase.lower().startswith("since ") or _SINCE.search(text[: match.start()])
                if since and start <= today:
                    end = max(end, today)
                    phrase = phrase if phrase.lower().startswith("since ") else f"since {phrase}"
                found.append((match.start(), TimeWindow(start, end, phrase)))
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

"""Days ahead, for forward triggers: ``memory/timeparse.py``'s tables read forward.

``resolve_window`` reads a message as about what happened; ``future_days`` reads
it as a plan may mean it: "Friday" is the coming Friday, "on the 12th" the next
12th, "14 June" the next 14 June. Every expression of the text is read (not only
the first), and a year of any four digits is taken, so a date in the year 3000 is
seen (and left to the caller's horizon) rather than read as some other day. The
month, weekday, number and holiday tables, the habit rule and the date arithmetic
are timeparse's own: one parser, read two ways. Kept apart so timeparse.py stays
under ~600 lines.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from memory.timeparse import (
    _DAY_RE,
    _HOLIDAY_RE,
    _HOLIDAY_WORDS,
    _HOLIDAYS_UNQUOTED,
    _MONTH_RE,
    _NUM_RE,
    MONTHS,
    WEEKDAYS,
    _is_habit,
    _number,
    _shifted,
    _unquoted,
)


@dataclass(frozen=True)
class FutureDay:
    """A day after the message's own, where its words named it in ``text``.

    ``explicit``: the words alone point ahead ("tomorrow", "next Friday", "in six
    months", a date with its year); otherwise ("Friday", "on the 12th", "14 June")
    the day is the next such one only if the sentence speaks of what is to come.
    """

    day: date
    phrase: str
    start: int
    end: int
    explicit: bool


def _next_day_of_month(day: int, today: date) -> date | None:
    """The first ``day``-th of a month after ``today`` (months too short are passed)."""
    year, month = today.year, today.month
    for _ in range(13):
        if day <= calendar.monthrange(year, month)[1]:
            candidate = date(year, month, day)
            if candidate > today:
                return candidate
        year, month0 = divmod(year * 12 + month, 12)  # the next month (``month`` is 1-12)
        month = month0 + 1
    return None


def _ahead_iso(match: re.Match[str], today: date) -> tuple[date, bool] | None:
    try:
        return date(int(match["year"]), int(match["month"]), int(match["day"])), True
    except ValueError:
        return None


def _ahead_day_month(match: re.Match[str], today: date) -> tuple[date, bool] | None:
    month = MONTHS[(match["month"] or match["month2"]).lower()]
    day = int(match["day"] or match["day2"])
    try:
        if match["year"]:
            return date(int(match["year"]), month, day), True
        for year in (today.year, today.year + 1):
            if calendar.monthrange(year, month)[1] < day:
                continue  # 29 February of a common year
            if date(year, month, day) >= today:
                return date(year, month, day), False
    except ValueError:
        return None
    return None


def _ahead_holiday(match: re.Match[str], today: date) -> tuple[date, bool] | None:
    days = _HOLIDAYS_UNQUOTED[_unquoted(match["holiday"])]
    which = (match["which"] or "").lower()
    if match["year"]:
        return days(int(match["year"]))[0], True
    if which == "last":
        return None
    first = next(days(y)[0] for y in (today.year, today.year + 1) if days(y)[0] >= today)
    return first, which == "next"


def _ahead_count(match: re.Match[str], today: date) -> tuple[date, bool] | None:
    """ "in 3 weeks", "3 weeks from now": that many units after the message's day."""
    amount = _number((match["n"] or match["n2"]).lower())
    return _shifted(today, amount, (match["unit"] or match["unit2"]).lower().rstrip("s")), True


def _ahead_period(match: re.Match[str], today: date) -> tuple[date, bool] | None:
    which, unit = match["which"].lower(), match["unit"].lower()
    if which != "next" and not (which == "this" and unit == "weekend"):
        return None  # "this week", "last month": no day ahead of its own
    if unit == "week":
        return today - timedelta(days=today.weekday()) + timedelta(weeks=1), True
    if unit == "weekend":
        saturday = today + timedelta(days=5 - today.weekday())
        if which == "next":
            saturday += timedelta(weeks=1) if today.weekday() >= 5 else timedelta(0)
        return saturday, True
    if unit == "month":
        year, month = divmod(today.year * 12 + today.month, 12)
        return date(year, month + 1, 1), True
    return None  # "next year": no day to be reminded on


def _ahead_weekday(match: re.Match[str], today: date) -> tuple[date, bool] | None:
    which = " ".join((match["which"] or "").lower().split())
    if which == "last":
        return None
    target = WEEKDAYS[match["weekday"].lower()]
    forward = (target - today.weekday()) % 7
    if which in ("next", "this coming", "coming"):
        return today + timedelta(days=forward or 7), True
    # "this Friday" said on a Friday is today; "on Friday" likewise.
    return today + timedelta(days=forward), which == "this"


def _ahead_nth(match: re.Match[str], today: date) -> tuple[date, bool] | None:
    found = _next_day_of_month(int(match["day"]), today)
    return None if found is None else (found, False)


def _ahead_fixed(days: int) -> Callable[[re.Match[str], date], tuple[date, bool] | None]:
    def resolve(_match: re.Match[str], today: date) -> tuple[date, bool] | None:
        return today + timedelta(days=days), True

    return resolve


def _no_day_ahead(_match: re.Match[str], _today: date) -> tuple[date, bool] | None:
    return None


_AheadReader = Callable[[re.Match[str], date], tuple[date, bool] | None]
# Most specific first: a span read by one is not read again by a later one
# ("the day after tomorrow" is not also "tomorrow"; "last Friday" not "Friday").
_AHEAD_PATTERNS: tuple[tuple[re.Pattern[str], _AheadReader], ...] = (
    (re.compile(r"\b(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})\b"), _ahead_iso),
    (
        re.compile(
            rf"\b(?:{_DAY_RE.replace('(', '(?P<day>', 1)}\s+(?:of\s+)?(?P<month>{_MONTH_RE})\.?"
            rf"|(?P<month2>{_MONTH_RE})\.?\s+(?:the\s+)?{_DAY_RE.replace('(', '(?P<day2>', 1)})\b"
            r"(?:,?\s+(?P<year>\d{4}))?",
            re.I,
        ),
        _ahead_day_month,
    ),
    (
        re.compile(
            rf"\b(?:(?P<which>last|this|next)\s+)?(?P<holiday>{_HOLIDAY_RE})\b"
            r"(?:,?\s+(?P<year>\d{4}))?",
            re.I,
        ),
        _ahead_holiday,
    ),
    (re.compile(r"\b(?:the\s+)?day\s+after\s+tomorrow\b", re.I), _ahead_fixed(2)),
    (re.compile(r"\btomorrow\b", re.I), _ahead_fixed(1)),
    (
        re.compile(r"\b(?:today|tonight|this (?:morning|afternoon|evening)|yesterday)\b", re.I),
        _no_day_ahead,  # today or before: the span is taken, no day ahead
    ),
    (
        re.compile(
            rf"\b(?:in\s+(?P<n>{_NUM_RE})\s+(?P<unit>days?|weeks?|months?|years?)(?:'?\s*time)?"
            rf"|(?P<n2>{_NUM_RE})\s+(?P<unit2>days?|weeks?|months?|years?)\s+from\s+(?:now|today))\b",
            re.I,
        ),
        _ahead_count,
    ),
    (
        re.compile(
            r"\b(?P<which>last|past|previous|this|next)\s+(?P<unit>weekend|week|month|year)\b", re.I
        ),
        _ahead_period,
    ),
    (
        re.compile(
            r"\b(?:(?P<which>last|this\s+coming|coming|this|next|on)\s+)?"
            r"(?P<weekday>" + "|".join(WEEKDAYS) + r")\b",
            re.I,
        ),
        _ahead_weekday,
    ),
    (
        re.compile(
            rf"\b(?:on|by|until|till)\s+the\s+{_DAY_RE.replace('(', '(?P<day>', 1)}\b"
            rf"(?!\s+(?:of\s+)?(?:{_MONTH_RE})\b)",
            re.I,
        ),
        _ahead_nth,
    ),
)


def future_days(text: str, when: datetime | date) -> list[FutureDay]:
    """Every day after ``when``'s own that ``text`` names, in the order written.

    Read as plans are spoken (see ``FutureDay.explicit``); a habit ("every Friday")
    names no day. Days on or before ``when``'s are left out: "last Friday",
    "yesterday", "tonight".
    """
    today = when.date() if isinstance(when, datetime) else when
    taken: list[tuple[int, int]] = []
    found: list[FutureDay] = []
    lowered = text.lower()
    for pattern, reader in _AHEAD_PATTERNS:
        if reader is _ahead_holiday and not any(word in lowered for word in _HOLIDAY_WORDS):
            continue
        for match in pattern.finditer(text):
            start, end = match.span()
            if any(start < t_end and end > t_start for t_start, t_end in taken):
                continue
            if reader in (_ahead_weekday, _ahead_holiday) and _is_habit(match, text):
                taken.append((start, end))
                continue
            taken.append((start, end))
            try:
                read = reader(match, today)
            except (ValueError, OverflowError):
                read = None  # a day past date's range (year 9999 and beyond)
            if read is not None and read[0] > today:
                found.append(FutureDay(read[0], match.group(0).strip(), start, end, read[1]))
    return sorted(found, key=lambda f: f.start)

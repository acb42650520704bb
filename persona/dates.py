"""Dates that people refer to, resolved against the time of their message.

"yesterday", "last Friday", "two weeks ago", "in May", "7 May 2023",
"2023-05-07": the observer keeps both the resolved date and the phrase, so
an observation written on 8 May 2023 about "yesterday" says 7 May 2023.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, datetime, timedelta

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
_COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY_RE = "|".join(_WEEKDAYS)
_COUNT_RE = r"\d+|a|an|one|two|three|four|five|six"

_DATE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("iso", re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")),
    (
        "day_month",
        re.compile(
            rf"\b(\d{{1,2}})(?:st|nd|rd|th)?(?: of)? ({_MONTH_RE})\b,?(?: (\d{{4}}))?", re.I
        ),
    ),
    (
        "month_day",
        re.compile(rf"\b({_MONTH_RE}) (\d{{1,2}})(?:st|nd|rd|th)?\b,?(?: (\d{{4}}))?", re.I),
    ),
    ("simple", re.compile(r"\b(yesterday|today|tonight|tomorrow|last night|this morning)\b", re.I)),
    ("ago", re.compile(rf"\b({_COUNT_RE}) (day|week|month|year)s? ago\b", re.I)),
    ("in_n", re.compile(rf"\bin ({_COUNT_RE}) (day|week|month|year)s?\b", re.I)),
    ("weekday", re.compile(rf"\b(last|next|this|on) ({_DAY_RE})\b", re.I)),
    ("span", re.compile(r"\b(last|next|this) (week|weekend|month|year)\b", re.I)),
    ("month", re.compile(rf"\b(in|last|this|next) ({_MONTH_RE})\b(?: (\d{{4}}))?", re.I)),
    ("year", re.compile(r"\b(?:in|since|back in) ((?:19|20)\d{2})\b", re.I)),
)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _COUNTS[word.lower()]


def _shift_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def resolve_date(text: str, at: datetime) -> tuple[date, str] | None:
    """The first date ``text`` refers to, resolved against ``at``, and the phrase used."""
    today = at.date()
    for kind, pattern in _DATE_PATTERNS:
        match = pattern.search(text)
        if match is None:
            continue
        phrase = match.group(0)
        if re.search(r"\bmay\b", phrase) and kind in ("day_month", "month_day", "month"):
            continue  # lower-case "may" is the verb ("this may help"), not the month
        try:
            resolved = _resolve(kind, match, today)
        except (ValueError, KeyError):
            continue
        if resolved is not None:
            return resolved, phrase
    return None


def _resolve(kind: str, match: re.Match[str], today: date) -> date | None:
    groups = [g.lower() if g else g for g in match.groups()]
    if kind == "iso":
        return date(int(groups[0]), int(groups[1]), int(groups[2]))
    if kind in ("day_month", "month_day"):
        day, month = (groups[0], groups[1]) if kind == "day_month" else (groups[1], groups[0])
        year = int(groups[2]) if groups[2] else today.year
        return date(year, _MONTHS[month], int(day))
    if kind == "simple":
        offsets = {"yesterday": -1, "last night": -1, "tomorrow": 1}
        return today + timedelta(days=offsets.get(groups[0], 0))
    if kind in ("ago", "in_n"):
        n = _count(groups[0]) * (-1 if kind == "ago" else 1)
        unit = groups[1]
        if unit == "day":
            return today + timedelta(days=n)
        if unit == "week":
            return today + timedelta(weeks=n)
        return _shift_months(today, n * (12 if unit == "year" else 1))
    if kind == "weekday":
        which, weekday = groups[0], _WEEKDAYS[groups[1]]
        delta = weekday - today.weekday()
        if which == "last":
            return today + timedelta(days=delta - 7 if delta >= 0 else delta)
        if which == "next":
            return today + timedelta(days=delta + 7 if delta <= 0 else delta)
        return today + timedelta(days=delta)
    if kind == "span":
        step = {"last": -1, "next": 1, "this": 0}[groups[0]]
        if groups[1] in ("week", "weekend"):
            start = today - timedelta(days=today.weekday()) + timedelta(weeks=step)
            return start + timedelta(days=5) if groups[1] == "weekend" else start
        if groups[1] == "month":
            return _shift_months(today.replace(day=1), step)
        return date(today.year + step, 1, 1)
    if kind == "month":
        which, month = groups[0], _MONTHS[groups[1]]
        if groups[2]:
            return date(int(groups[2]), month, 1)
        year = today.year
        if which == "last" and month >= today.month:
            year -= 1
        elif which == "next" and month <= today.month:
            year += 1
        return date(year, month, 1)
    if kind == "year":
        return date(int(groups[0]), 1, 1)
    return None

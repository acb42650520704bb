"""Time-aware recall (relative dates against the message's own time) and memory requests."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from memory.commands import CommandKind, classify, parse_command
from memory.timeparse import (
    HOLIDAYS,
    easter_sunday,
    find_anchor,
    referred_day,
    resolve_window,
    thanksgiving_day,
)
from memory.types import ItemType

# A Wednesday.
SENT = datetime(2023, 6, 14, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("What did I do last week?", date(2023, 6, 5), date(2023, 6, 11)),
        ("I went to a support group yesterday", date(2023, 6, 13), date(2023, 6, 13)),
        ("anything from the day before yesterday?", date(2023, 6, 12), date(2023, 6, 12)),
        ("what happened in May?", date(2023, 5, 1), date(2023, 5, 31)),
        ("we talked in September", date(2022, 9, 1), date(2022, 9, 30)),
        ("in May 2021 we met", date(2021, 5, 1), date(2021, 5, 31)),
        ("my exam on 8 May", date(2023, 5, 8), date(2023, 5, 8)),
        ("3 days ago", date(2023, 6, 11), date(2023, 6, 11)),
        ("two months ago", date(2023, 4, 1), date(2023, 4, 30)),
        ("last weekend was fun", date(2023, 6, 10), date(2023, 6, 11)),
        ("last Friday", date(2023, 6, 9), date(2023, 6, 9)),
        ("in 2022", date(2022, 1, 1), date(2022, 12, 31)),
        ("last month", date(2023, 5, 1), date(2023, 5, 31)),
        ("two weekends ago", date(2023, 6, 3), date(2023, 6, 4)),
        # Vague: a day either side.
        ("a few days ago", date(2023, 6, 10), date(2023, 6, 12)),
        # In June, last summer is the one that is over: the year before's.
        ("last summer", date(2022, 6, 1), date(2022, 8, 31)),
        ("this summer", date(2023, 6, 1), date(2023, 8, 31)),
        ("last winter", date(2022, 12, 1), date(2023, 2, 28)),
        ("over Christmas", date(2022, 12, 24), date(2022, 12, 26)),
        ("New Year\u2019s Eve", date(2022, 12, 31), date(2022, 12, 31)),
        ("at Easter", date(2023, 4, 7), date(2023, 4, 10)),  # Good Friday to Easter Monday
        ("Thanksgiving 2022", date(2022, 11, 24), date(2022, 11, 27)),
        ("next Halloween", date(2023, 10, 31), date(2023, 10, 31)),
        ("on 2023-05-03", date(2023, 5, 3), date(2023, 5, 3)),
        ("in early May", date(2023, 5, 1), date(2023, 5, 10)),
        ("mid-May", date(2023, 5, 11), date(2023, 5, 20)),
        ("late April", date(2023, 4, 21), date(2023, 4, 30)),
        ("since Monday", date(2023, 6, 12), date(2023, 6, 14)),
        ("since 2022", date(2022, 1, 1), date(2023, 6, 14)),
        ("what did I do between May and June?", date(2023, 5, 1), date(2023, 6, 30)),
        ("from March 3rd to March 10th", date(2023, 3, 3), date(2023, 3, 10)),
    ],
)
def test_relative_dates_resolve_against_the_message_time(text: str, start: date, end: date) -> None:
    window = resolve_window(text, SENT)
    assert window is not None
    assert (window.start, window.end) == (start, end)


def test_the_same_words_mean_other_days_in_an_older_message() -> None:
    old = datetime(2023, 1, 4, 9, 0, tzinfo=UTC)
    window = resolve_window("last week", old)
    assert window is not None
    assert (window.start, window.end) == (date(2022, 12, 26), date(2023, 1, 1))


def test_every_holiday_is_found_by_its_name() -> None:
    # The quick word check before the holidays' pattern must let each of them through.
    for name in HOLIDAYS:
        window = resolve_window(f"what did we do at {name.title()}?", SENT)
        assert window is not None, name
        assert (window.start, window.end) == max(
            HOLIDAYS[name](year) for year in (2022, 2023) if HOLIDAYS[name](year)[0] <= SENT.date()
        ), name


def test_easter_and_thanksgiving_fall_on_their_days() -> None:
    for year, easter in (
        (2000, date(2000, 4, 23)),
        (2019, date(2019, 4, 21)),
        (2024, date(2024, 3, 31)),
        (2025, date(2025, 4, 20)),
    ):
        assert easter_sunday(year) == easter
    assert thanksgiving_day(2024) == date(2024, 11, 28)


@pytest.mark.parametrize(
    "text",
    [
        "I may go hiking",
        "The March for Science",
        "hello there",
        "between you and me",
        "I drove from Lisbon to Porto",
    ],
)
def test_words_that_only_look_like_dates_are_not_dates(text: str) -> None:
    assert resolve_window(text, SENT) is None


@pytest.mark.parametrize(
    "text",
    [
        "every Friday I go to the gym",
        "On Friday I always go swimming",
        "At Christmas we usually bake cookies",
        "Every year at Easter we paint eggs",
        "I always visit my parents in May",
        "we go camping each summer",
        "Christmas is my favourite holiday",
    ],
)
def test_a_habit_names_no_day(text: str) -> None:
    assert resolve_window(text, SENT) is None


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        # One time named, a habit beside it: the time stands.
        ("Last Christmas I always felt sad", date(2022, 12, 24), date(2022, 12, 26)),
        ("This summer we usually go to the lake", date(2023, 6, 1), date(2023, 8, 31)),
        ("in May 2021 we always went", date(2021, 5, 1), date(2021, 5, 31)),
        # The habit is another sentence's.
        ("We usually bake. At Christmas we made a cake", date(2022, 12, 24), date(2022, 12, 26)),
        ("on Friday I went to the gym", date(2023, 6, 9), date(2023, 6, 9)),
    ],
)
def test_a_habit_beside_one_time_leaves_it(text: str, start: date, end: date) -> None:
    window = resolve_window(text, SENT)
    assert window is not None
    assert (window.start, window.end) == (start, end)


def test_event_anchors() -> None:
    anchor = find_anchor("What did I eat before the road trip?")
    assert anchor is not None
    assert (anchor.relation, anchor.event) == ("before", "road trip")
    after = find_anchor("how was work after my wedding, then?")
    assert after is not None
    assert (after.relation, after.event) == ("after", "wedding")
    assert find_anchor("before long") is None


@pytest.mark.parametrize(
    ("message", "kind", "what"),
    [
        (
            "Remember that I am allergic to peanuts.",
            CommandKind.REMEMBER,
            "I am allergic to peanuts",
        ),
        (
            "please remember my favourite colour is green",
            CommandKind.REMEMBER,
            "my favourite colour is green",
        ),
        ("Note: my sister is called Ana", CommandKind.REMEMBER, "my sister is called Ana"),
        ("Forget that I like jazz", CommandKind.FORGET, "I like jazz"),
        ("Ada, please forget what I said about my ex.", CommandKind.FORGET, "my ex"),
    ],
)
def test_memory_requests_are_recognised(message: str, kind: CommandKind, what: str) -> None:
    command = parse_command(message)
    assert command is not None
    assert (command.kind, command.text) == (kind, what)


@pytest.mark.parametrize(
    "message",
    [
        "Do you remember my dog?",
        "remember when we went hiking",
        "forget it",
        "notebook on the desk",
    ],
)
def test_questions_and_idioms_are_not_requests(message: str) -> None:
    assert parse_command(message) is None


def test_remembered_statements_get_a_type() -> None:
    assert classify("my name is Sam") is ItemType.PERSONA
    assert classify("I prefer short answers") is ItemType.PREFERENCE
    assert classify("always answer in French") is ItemType.PROCEDURAL
    assert classify("dentist appointment next Monday") is ItemType.EVENT
    assert classify("the car is blue") is ItemType.FACT


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        # "next" with a month: the first such month after this one.
        ("we move next May", date(2024, 5, 1), date(2024, 5, 31)),
        ("next December", date(2023, 12, 1), date(2023, 12, 31)),
    ],
)
def test_next_month_is_ahead(text: str, start: date, end: date) -> None:
    window = resolve_window(text, SENT)
    assert window is not None
    assert (window.start, window.end) == (start, end)


def test_this_may_is_the_verb() -> None:
    assert resolve_window("this may help with the back pain", SENT) is None
    window = resolve_window("This May we went to Rome", SENT)
    assert window is not None
    assert (window.start, window.end) == (date(2023, 5, 1), date(2023, 5, 31))


@pytest.mark.parametrize(
    ("text", "day", "phrase"),
    [
        # Counts ahead, read only as a statement: the day that far from the message.
        ("I fly out in three days", date(2023, 6, 17), "in three days"),
        ("the course starts in two weeks", date(2023, 6, 28), "in two weeks"),
        ("in a month we move", date(2023, 7, 14), "in a month"),
        # A count back: that day, which the pack's window is drawn around.
        ("two weeks ago I ran", date(2023, 5, 31), "two weeks ago"),
        # A day and month without a year: the nearest (19 days ahead, not a year back).
        ("my exam is on 3 July", date(2023, 7, 3), "3 July"),
        ("my exam was on 8 May", date(2023, 5, 8), "8 May"),
        # A longer window: its first day.
        ("I moved to Denver last week", date(2023, 6, 5), "last week"),
    ],
)
def test_referred_day_reads_a_statement(text: str, day: date, phrase: str) -> None:
    assert referred_day(text, SENT) == (day, phrase)


def test_questions_are_not_read_ahead() -> None:
    # The pack reads questions and stored messages as about what happened.
    assert resolve_window("I fly out in three days", SENT) is None
    window = resolve_window("my exam is on 3 July", SENT)
    assert window is not None
    assert window.start == date(2022, 7, 3)


def test_referred_day_passes_over_words_that_name_no_day() -> None:
    # The pack's window for "lately" runs up to the message; no one day is meant.
    assert referred_day("I've been painting a lot lately", SENT) is None
    assert referred_day("Lately I went hiking, last week too", SENT) == (
        date(2023, 6, 5),
        "last week",
    )
    window = resolve_window("I've been painting a lot lately", SENT)
    assert window is not None
    assert (window.start, window.end) == (date(2023, 5, 15), date(2023, 6, 14))

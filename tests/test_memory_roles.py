"""Roles (memory/roles.py): a job title read from the many shapes people say it in,
by the head noun of an occupation, so a new title or employer ends the older one; and
the guards: someone else's job, the past, a wish, a second job, a title of a club or
an evening, what others think. The rules alone, then through the memory service
(real store, real MiniLM)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memory.embed import SentenceEmbedder
from memory.roles import OCCUPATIONS, title_at
from memory.service import MemoryService
from memory.slots import Claim, claims
from tests.test_memory_frames import ended_contents
from tests.test_memory_trust import T0, embedder, say, service

__all__ = ["embedder", "service"]  # fixtures, used by name


def _job(text: str) -> list[tuple[str, str]]:
    """The job claims of a statement: (attribute, value)."""
    return [
        (c.attribute, c.value)
        for c in claims(text, T0)
        if c.attribute in ("job_title", "employer") and not c.ends
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the lockbox's two misses, and their shapes said otherwise
        ("Guess who's head chef now! They gave me the kitchen.", [("job_title", "head chef")]),
        (
            "I've joined the ESB as an apprentice trainer, started this week.",
            [("employer", "esb"), ("job_title", "apprentice trainer")],
        ),
        (
            "I'm an electrician with a small firm in Cork.",
            [("job_title", "electrician"), ("employer", "small firm")],
        ),
        ("Head chef now!", [("job_title", "head chef")]),
        ("I'm head chef now.", [("job_title", "head chef")]),
        ("Look who got made team lead!", [("job_title", "team lead")]),
        # "as a TITLE" after a job started or held
        ("I got hired as a barista at Pret!", [("job_title", "barista"), ("employer", "pret")]),
        (
            "I've taken a job as a bus driver for Arriva.",
            [("job_title", "bus driver"), ("employer", "arriva")],
        ),
        (
            "I started at Google last week as a PM.",
            [("employer", "google"), ("job_title", "pm")],
        ),
        ("I work as a sommelier in Soho.", [("job_title", "sommelier")]),
        ("I'm working as a waiter at the Ivy.", [("job_title", "waiter"), ("employer", "ivy")]),
        ("Started my new job as a paramedic today!", [("job_title", "paramedic")]),
        ("My new job as a night porter starts Monday.", [("job_title", "night porter")]),
        (
            "I landed the junior developer role at Monzo",
            [("job_title", "junior developer"), ("employer", "monzo")],
        ),
        # given, or become
        ("I've been promoted to charge nurse.", [("job_title", "charge nurse")]),
        ("They've made me deputy head.", [("job_title", "deputy head")]),
        ("Finally qualified as a nurse!", [("job_title", "nurse")]),
        ("They hired me as their new sous chef.", [("job_title", "sous chef")]),
        (
            "I'm the new assistant manager at Lidl.",
            [("job_title", "assistant manager"), ("employer", "lidl")],
        ),
        (
            "I'm head of marketing at Acme.",
            [("job_title", "head of marketing"), ("employer", "acme")],
        ),
        ("I\u2019m a nurse at St Mary's.", [("job_title", "nurse"), ("employer", "st mary's")]),
    ],
)
def test_a_title_is_read_in_its_many_shapes(text: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(_job(text)) == sorted(expected)


@pytest.mark.parametrize(
    "text",
    [
        # someone else's job
        "My brother is an electrician.",
        "My sister just became a lawyer.",
        "Our new manager is great.",
        "I met a chef at the party.",
        # the past
        "I used to be a nurse.",
        "When I was a waiter I loved the tips.",
        "I started out as a waiter.",
        "I joined Acme as an intern back in 2015.",
        "I'm an ex-teacher.",
        # a wish, a plan, a guess
        "I'd love to be a chef.",
        "I'm thinking of becoming a nurse.",
        "I want to become a teacher.",
        # a second job alongside the first
        "I also teach yoga on weekends.",
        "I'm a DJ at weekends.",
        "I'm also a yoga instructor.",
        # titles of a club, an evening, a hobby; what others think
        "I'm the treasurer of the book club now.",
        "I joined the book club as a coach.",
        "I'm the driver tonight.",
        "I'm a proud dog owner.",
        "I'm a huge fan of that chef.",
        "I'm employee of the month!",
        "I work as a volunteer at the food bank.",
        "She thinks I'm a great manager.",
        "They treat me like I'm the manager.",
        "I'm an engineer by training.",
        "I'm an artist at heart.",
        "I'm a painter, mostly watercolours, just for fun.",
        "I joined the Ramblers Club last week.",
        # a question
        "Guess who's head chef now? My cousin Rui!",
    ],
)
def test_no_job_is_claimed_here(text: str) -> None:
    assert _job(text) == []


def test_a_title_is_the_longest_ending_in_an_occupation() -> None:
    assert title_at("assistant manager at Lidl") == ("assistant manager", len("assistant manager"))
    assert title_at("senior backend software engineer") is not None
    assert title_at("big fan of the chef") is None
    assert title_at("good cook") is None  # how well, no job
    assert title_at("team lead") == ("team lead", len("team lead"))
    assert title_at("lead") is None  # "lead" is a job only with what one leads
    # A broad list: heads the earlier ~200 did not hold.
    assert {"sommelier", "paralegal", "welder", "midwife", "croupier"} <= OCCUPATIONS


def test_a_joining_is_a_change_and_a_job_held_a_state() -> None:
    joined = claims("I've joined the ESB as an apprentice trainer.", T0)
    assert Claim("job_title", "apprentice trainer", renews=True) in joined
    held = claims("I work as a sommelier in Soho.", T0)
    assert Claim("job_title", "sommelier") in held


# -- through the memory service --------------------------------------------------------


# A job said, then a newer one said in another shape: the older one ends.
CHANGES = (
    ("I'm a sous chef at a tapas place in Valencia.", "Guess who's head chef now!"),
    (
        "I'm an electrician with a small firm in Cork.",
        "I've joined the ESB as an apprentice trainer.",
    ),
    ("I work as a paralegal at Hogan Lovells.", "I got hired as a sommelier at Noma!"),
    ("I'm a junior developer at Monzo.", "Senior developer now!"),
    ("I'm a bus driver for Arriva.", "I took a job as a croupier at the Hippodrome."),
)
# A job said, then what is no change of it.
NO_CHANGES = (
    ("I'm a nurse at St Mary's.", "My brother is an electrician."),
    ("I'm a nurse at St Mary's.", "I used to be a waiter, years ago."),
    ("I'm a nurse at St Mary's.", "I'd love to be a chef someday."),
    ("I'm a nurse at St Mary's.", "I also teach yoga on weekends."),
    ("I'm a nurse at St Mary's.", "I'm a DJ at weekends, for fun."),
    ("I'm a nurse at St Mary's.", "I'm the treasurer of the book club now."),
    ("I'm a nurse at St Mary's.", "They treat me like I'm the manager."),
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [(*pair, True) for pair in CHANGES] + [(*pair, False) for pair in NO_CHANGES],
)
async def test_a_new_job_ends_the_older_one_and_nothing_else_does(
    service: MemoryService, embedder: SentenceEmbedder, before: str, after: str, changed: bool
) -> None:
    await say(service, before, T0)
    await say(service, after, T0 + timedelta(days=60))
    assert await ended_contents(service) == ([before] if changed else [])

"""Query-time conflicts (issue 22; memory/trust.py ``query_conflicts``): two statements
of the person's own that answer the message with different values, which no write-time
rule tied together, are both tagged [conflict] in the pack, the newer first, and
nothing is ended. Through the memory service (real store and MiniLM)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import select

from memory.changes import own_values
from memory.models import MemoryItem
from memory.service import MemoryService
from memory.trust import Statement, query_conflicts
from tests import test_memory_trust as trust_tests
from tests.test_memory_trust import line_of, pack, say

pytestmark = pytest.mark.slow

# The trust tests' fixtures (pytest knows a fixture by the name it is bound to here):
# MiniLM once a module, and a memory service on a fresh store.
embedder = trust_tests.embedder
service = trust_tests.service


@pytest.fixture
def memory_service(service: MemoryService) -> MemoryService:
    """The trust tests' service with query-time conflicts on (off by default)."""
    service.settings = replace(service.settings, query_conflicts=True)
    return service


T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
# The older a frame ("I rent ..."), the newer said in words no slot rule, frame, status
# or change cue reads: only the pack can tell.
OLD = "I rent a room in Utrecht, Lombok side."
NEW = "Ended up in Groningen after the summer, the city is great for cycling."


async def ended(memory_service: MemoryService) -> list[str]:
    async with memory_service.store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.content).where(MemoryItem.valid_until.is_not(None))
        )
        return list(rows.all())


async def test_two_values_the_rules_missed_are_both_flagged_the_newer_first(
    memory_service: MemoryService,
) -> None:
    await say(memory_service, OLD, T0)
    await say(memory_service, NEW, T0 + timedelta(days=200))
    lines = await pack(
        memory_service, "Which city do I live in these days?", T0 + timedelta(days=230)
    )
    old, new = line_of(lines, "room in Utrecht"), line_of(lines, "in Groningen")
    assert "[conflict]" in lines[old]
    assert "[conflict]" in lines[new]
    assert new < old
    assert "[conflict]: two memories disagree" in "\n".join(lines)
    # Nothing was ended: the write path never read it as a change.
    assert await ended(memory_service) == []


async def test_a_question_about_the_past_gets_both_untagged(memory_service: MemoryService) -> None:
    await say(memory_service, OLD, T0)
    await say(memory_service, NEW, T0 + timedelta(days=200))
    lines = await pack(
        memory_service, "Which city did I live in last year?", T0 + timedelta(days=230)
    )
    for words in ("room in Utrecht", "in Groningen"):
        assert "[conflict]" not in lines[line_of(lines, words)]


NOW_Q = "Which city do I live in these days?"
UNREAD = "I stay in Utrecht, Lombok side, with two flatmates."


@pytest.mark.parametrize(
    ("older", "apart", "question", "switched_on"),
    [
        # Switched off: only the write-time readings decide.
        (OLD, timedelta(days=200), NOW_Q, False),
        # The same pair an hour apart: a second message of one sitting, not a change.
        (OLD, timedelta(hours=1), NOW_Q, True),
        # No slot rule or frame reads "I stay in ...": it may be a story, not a state.
        (UNREAD, timedelta(days=200), NOW_Q, True),
        # A message about someone else, not its writer.
        (OLD, timedelta(days=200), "Which city does Ada live in these days?", True),
    ],
    ids=["switched-off", "one-sitting", "older-unread", "about-someone-else"],
)
async def test_no_query_time_conflict(
    memory_service: MemoryService, older: str, apart: timedelta, question: str, switched_on: bool
) -> None:
    memory_service.settings = replace(memory_service.settings, query_conflicts=switched_on)
    await say(memory_service, older, T0)
    await say(memory_service, NEW, T0 + apart)
    lines = await pack(memory_service, question, T0 + apart + timedelta(days=30))
    assert not any("[conflict]" in line for line in lines)


@pytest.mark.parametrize(
    "later",
    [
        # Someone else's move; the speaker's own clause is the future.
        "My brother's just moved to Leeds, so I'll be driving up and down the A1 a lot.",
        # A visit, a wish, the past told as a memory.
        "In Manchester for the week for work, it's grey and wet.",
        "If we ever move to Bristol I'm getting a dog.",
        "When I lived in Sheffield the rent was half this.",
    ],
)
async def test_what_is_no_present_state_of_the_speaker_is_no_conflict(
    memory_service: MemoryService, later: str
) -> None:
    await say(memory_service, "I live in York, near the Minster.", T0)
    await say(memory_service, later, T0 + timedelta(days=100))
    lines = await pack(memory_service, "Where do I live?", T0 + timedelta(days=120))
    assert "[conflict]" not in lines[line_of(lines, "I live in York")]


def test_own_values_are_the_speakers_present_names_and_figures() -> None:
    assert own_values("Shifted to Bengaluru last month, PG near Koramangala.") == {
        "bengaluru",
        "koramangala",
        "pg",
    }
    assert own_values("It's 6 November now!") == {"6"}
    # Someone else's, the future, a question, a day of the week.
    assert own_values("My sister's just moved to Cambridge.") == frozenset()
    assert own_values("So I'll be up and down the A11.") == frozenset()
    assert own_values("Do you know Galway?") == frozenset()
    assert own_values("I volunteer on Saturdays, last Fri too.") == frozenset()
    # Whom the speaker addresses is no value.
    assert own_values("Thanks, Melanie! I'm at Deloitte now.") == {"deloitte"}
    assert own_values("Hey Mel! Welcome to the world, Beatrix!") == frozenset()


def test_a_new_value_must_be_of_a_kind_the_older_names() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    vector = np.ones(4, np.float32) / 2.0  # the two statements alike (cosine 1)

    def pair(newer: str) -> list[set[int]]:
        statements = [
            Statement("Our cat is called Mango.", "Ada", True, "ada:pet_name", at, 0.5),
            Statement(newer, "Ada", True, None, at + timedelta(days=40), 0.5),
        ]
        return query_conflicts(statements, [vector, vector])

    assert pair("Since then we call him Biscuit, he answers to it.") == [{0, 1}]
    # A figure is no answer to a name ("17" to "Mango").
    assert pair("Turned 17 this spring and still going strong.") == []

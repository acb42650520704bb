"""Query-time conflicts (issue 22; memory/trust.py ``query_conflicts``): two statements
of the person's own that answer the message with different values, which no write-time
rule tied together, are both tagged [conflict] in the pack, the newer first, and
nothing is ended. Through the memory service (real store and MiniLM)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from memory.changes import own_values
from memory.embed import SentenceEmbedder
from memory.models import MemoryItem
from memory.service import Episode, MemoryService, PackRequest
from tests.test_memory_trust import line_of, trust_config

pytestmark = pytest.mark.slow

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
# The older a frame ("I rent ..."), the newer said in words no slot rule, frame, status
# or change cue reads: only the pack can tell.
OLD = "I rent a room in Utrecht, Lombok side."
NEW = "Ended up in Groningen after the summer, the city is great for cycling."


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder.load()


@pytest.fixture
async def service(tmp_path: Path, embedder: SentenceEmbedder) -> AsyncIterator[MemoryService]:
    from gateway.store import Store
    from gateway.store.models import Person

    config = trust_config(tmp_path)
    async with Store(config.database_url) as store:
        async with store.session() as session:
            session.add(Person(id=1, display_name="Ada"))
        started = await MemoryService.start(store, config, embedder=embedder)
        try:
            yield started
        finally:
            await started.aclose()


async def say(service: MemoryService, text: str, at: datetime) -> None:
    await service.ingest([Episode(person_id=1, text=text, at=at, role="user", speaker="Ada")])


async def pack(service: MemoryService, text: str, at: datetime) -> list[str]:
    built = await service.build_pack(PackRequest(person_id=1, text=text, at=at))
    return built.text.splitlines()


async def ended(service: MemoryService) -> list[str]:
    async with service.store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.content).where(MemoryItem.valid_until.is_not(None))
        )
        return list(rows.all())


async def test_two_values_the_rules_missed_are_both_flagged_the_newer_first(
    service: MemoryService,
) -> None:
    await say(service, OLD, T0)
    await say(service, NEW, T0 + timedelta(days=200))
    lines = await pack(service, "Which city do I live in these days?", T0 + timedelta(days=230))
    old, new = line_of(lines, "room in Utrecht"), line_of(lines, "in Groningen")
    assert "[conflict]" in lines[old]
    assert "[conflict]" in lines[new]
    assert new < old
    assert "[conflict]: two memories disagree" in "\n".join(lines)
    # Nothing was ended: the write path never read it as a change.
    assert await ended(service) == []


async def test_a_question_about_the_past_gets_both_untagged(service: MemoryService) -> None:
    await say(service, OLD, T0)
    await say(service, NEW, T0 + timedelta(days=200))
    lines = await pack(service, "Which city did I live in last year?", T0 + timedelta(days=230))
    for words in ("room in Utrecht", "in Groningen"):
        assert "[conflict]" not in lines[line_of(lines, words)]


async def test_switched_off_the_pack_says_nothing(service: MemoryService) -> None:
    service.settings = replace(service.settings, query_conflicts=False)
    await say(service, OLD, T0)
    await say(service, NEW, T0 + timedelta(days=200))
    lines = await pack(service, "Which city do I live in these days?", T0 + timedelta(days=230))
    assert not any("[conflict]" in line for line in lines)


async def test_one_sitting_says_more_of_one_thing_not_two_values(
    service: MemoryService,
) -> None:
    # The same pair an hour apart: a second message of one sitting, not a change.
    await say(service, OLD, T0)
    await say(service, NEW, T0 + timedelta(hours=1))
    lines = await pack(service, "Which city do I live in these days?", T0 + timedelta(days=30))
    assert not any("[conflict]" in line for line in lines)


async def test_an_older_statement_no_reading_held_is_no_state_to_dispute(
    service: MemoryService,
) -> None:
    # No slot rule or frame reads "I stay in ...": it may be a story, not a state.
    await say(service, "I stay in Utrecht, Lombok side, with two flatmates.", T0)
    await say(service, NEW, T0 + timedelta(days=200))
    lines = await pack(service, "Which city do I live in these days?", T0 + timedelta(days=230))
    assert not any("[conflict]" in line for line in lines)


async def test_a_message_about_someone_else_weighs_nothing(service: MemoryService) -> None:
    await say(service, OLD, T0)
    await say(service, NEW, T0 + timedelta(days=200))
    lines = await pack(service, "Which city does Ada live in these days?", T0 + timedelta(days=230))
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
    service: MemoryService, later: str
) -> None:
    await say(service, "I live in York, near the Minster.", T0)
    await say(service, later, T0 + timedelta(days=100))
    lines = await pack(service, "Where do I live?", T0 + timedelta(days=120))
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

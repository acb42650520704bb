"""Statuses and life events (memory/statuses.py, memory/frames.py's ended states): an
event ends the state it changes, through real turns and through the memory service
(real store, real MiniLM); the same verbs about someone or something else end nothing.
Also: a bare "moved to X" is no move of home when X is a tool, and frames go
``[stale]`` by their item's category."""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from gateway.brains.scripted import ScriptedBrain
from memory.embed import SentenceEmbedder
from memory.models import MemoryItem
from memory.service import MemoryService
from memory.trust import item_tags
from tests.conftest import RunningGateway
from tests.test_memory_frames import ended_contents
from tests.test_memory_trust import (
    T0,
    embedder,
    gateway,
    line_of,
    pack,
    pack_lines,
    say,
    service,
    trust_config,
    turn,
)

pytestmark = pytest.mark.slow

__all__ = ["embedder", "service"]  # fixtures, used by name


# -- through real turns --------------------------------------------------------------


async def ended_statements(running: RunningGateway) -> set[str]:
    """The person's statements that were ended (the agent's replies left out)."""
    memory = running.gateway.memory
    assert memory is not None
    async with memory.store.reader() as session:
        query = select(MemoryItem.content).where(
            MemoryItem.valid_until.is_not(None), MemoryItem.role == "user"
        )
        return set(await session.scalars(query))


async def test_a_promotion_then_a_lost_job_packs_the_loss_first_and_the_promotion_superseded(
    tmp_path: Path, embedder: SentenceEmbedder
) -> None:
    """LoCoMo's John in general: a promotion says one holds a job (title unnamed); losing
    the job ends it. Someone else's promotion, a hoped-for one and a second role said
    with "also" end nothing."""
    brain = ScriptedBrain()
    async with gateway(trust_config(tmp_path), brain, embedder) as running:
        await turn(running, "I work as a data analyst at the NHS.")
        await turn(running, "My sister got promoted to head of marketing!")
        await turn(running, "I'm hoping to get promoted in the spring.")
        await turn(running, "I got promoted at work! It's been a long time coming.")
        await turn(running, "I also became a volunteer at the food bank.")
        await turn(running, "Bad news: I got laid off this morning, the whole team went.")
        await turn(running, "Do I still have a job?")
        ended = await ended_statements(running)
    assert ended == {
        "I work as a data analyst at the NHS.",
        "I got promoted at work! It's been a long time coming.",
    }
    lines = pack_lines(brain)
    promoted, lost = line_of(lines, "I got promoted at work"), line_of(lines, "got laid off")
    assert "[superseded " in lines[promoted]
    assert "[superseded" not in lines[lost]
    assert lost < promoted


async def test_a_move_to_a_tool_is_no_move_of_home(
    tmp_path: Path, embedder: SentenceEmbedder
) -> None:
    brain = ScriptedBrain()
    async with gateway(trust_config(tmp_path), brain, embedder) as running:
        await turn(running, "I live in Leeds, near the university.")
        await turn(running, "I use Firefox on my laptop.")
        await turn(running, "I've moved to Chrome since the update broke my extensions.")
        await turn(running, "Where do I live, and which browser do I use?")
        ended = await ended_statements(running)
    # The browser changed; where the person lives did not, and nothing says otherwise
    # (read as a home, "Chrome" would be a second one the same day: a conflict).
    assert ended == {"I use Firefox on my laptop."}
    lines = pack_lines(brain)
    leeds = lines[line_of(lines, "I live in Leeds")]
    assert "[superseded" not in leeds
    assert "[conflict]" not in leeds


# -- the service, dated ----------------------------------------------------------------


# An event, then whether it ends the state said before it.
CHANGES = (
    # A role said as "I'm a TITLE at ORG" holds its employer too.
    ("I'm a nurse at St Mary's, nights mostly.", "I started a new job at a GP surgery."),
    ("I'm a shift supervisor at the warehouse.", "I'm the operations manager now."),
    ("I'm a second-year student at Edinburgh.", "I graduated last week!"),
    ("I'm seeing a guy called Tom.", "I'm single again, we ended things."),
    ("I'm vegetarian, have been since uni.", "I went fully vegan in January."),
    ("I smoke about ten a day.", "I quit smoking in March."),
    ("I have a 2015 Golf, it's been reliable.", "I sold the Golf, I take the train now."),
    ("We have a cat called Miso, she's twelve.", "Miso passed away last night."),
    ("I teach maths at Hillside Secondary.", "I retired after thirty years of teaching."),
    ("I work for an ad agency in Shoreditch.", "I went freelance in the summer."),
)
# The same verbs about someone or something else.
NO_CHANGES = (
    ("I work at the library on weekdays.", "I quit sugar for Lent, it's brutal."),
    ("I'm an accountant at KPMG.", "They laid off half my team today, I survived."),
    ("I work as a vet in Bristol.", "I graduated from Glasgow back in 2015."),
    ("I'm a teacher at Oakfield Primary.", "I'm now a member of the climbing club."),
    ("I have a Vespa for getting around town.", "I sold my old bike on eBay."),
    ("We have a rescue greyhound called Dash.", "My neighbour's old cat died last week."),
    ("I live in Bath, in a flat by the river.", "We moved to a four-day week at work."),
    ("I'm a PE teacher at Northfield.", "I'm so fired up about the new season."),
)


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [(*pair, True) for pair in CHANGES] + [(*pair, False) for pair in NO_CHANGES],
)
async def test_an_event_ends_the_state_it_changes_and_no_other(
    service: MemoryService, before: str, after: str, changed: bool
) -> None:
    await say(service, before, T0)
    await say(service, after, T0 + timedelta(days=90))
    assert await ended_contents(service) == ([before] if changed else [])


async def test_the_same_loss_said_again_is_no_change(service: MemoryService) -> None:
    await say(service, "Lost my job as a banker yesterday, so I'm starting a business.", T0)
    await say(service, "It's been tough since I lost my job.", T0 + timedelta(days=20))
    assert await ended_contents(service) == []
    await say(service, "I started at Barclays on Monday!", T0 + timedelta(days=60))
    assert sorted(await ended_contents(service)) == [
        "It's been tough since I lost my job.",
        "Lost my job as a banker yesterday, so I'm starting a business.",
    ]


async def test_a_frame_goes_stale_by_its_category(service: MemoryService) -> None:
    await say(service, "I drive a 2012 Honda Civic to work.", T0)
    fresh = await pack(service, "What car do I drive?", T0 + timedelta(days=10))
    assert "[stale]" not in fresh[line_of(fresh, "Honda Civic")]
    # Past every category's TTL (the longest, health, is 365 days).
    old = await pack(service, "What car do I drive?", T0 + timedelta(days=400))
    assert "[stale]" in old[line_of(old, "Honda Civic")]


def test_a_frames_ttl_is_its_items_category() -> None:
    ttls = {"hobbies": 60.0, "work": 90.0, "other": 90.0}

    def tags(category: str, days: int) -> list[str]:
        return item_tags(
            slot="ada:~play",
            confidence=1.0,
            valid_until=None,
            seen_at=T0,
            now=T0 + timedelta(days=days),
            zone=UTC,
            ttls=ttls,
            category=category,
        )

    assert tags("hobbies", 61) == ["stale"]
    assert tags("work", 61) == []
    assert tags("", 91) == ["stale"]  # no category: "other"

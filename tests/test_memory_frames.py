"""Statement frames (memory/frames.py): changes said in verbs no slot rule reads are
linked to what they change, and same-verb statements about other things are not.

The reading on its own, then through the memory service (real store, real MiniLM):
the older state is ended, tagged [superseded …] in the pack and put after the newer.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from memory.frames import Frame, frames
from memory.models import MemoryItem
from memory.service import MemoryService
from tests.test_memory_trust import T0, embedder, line_of, pack, say, service

pytestmark = pytest.mark.slow

__all__ = ["embedder", "service"]  # fixtures, used by name


@pytest.mark.parametrize(
    ("text", "key", "obj", "change", "negated"),
    [
        ("I drive a 2012 Honda Civic to work.", "drive", "2012 honda civic", False, False),
        ("I drive a Tesla now, the Civic finally died.", "drive", "tesla", True, False),
        ("I changed course, I study medicine now.", "studi", "medicine", True, False),
        ("I'm learning Japanese instead.", "learn", "japanese", True, False),
        ("I go to a climbing gym now.", "go to", "climbing gym", True, False),
        ("I no longer drink coffee, only green tea.", "drink", "coffee", True, True),
        ("My new doctor is Dr. Lindqvist.", "my doctor", "dr lindqvist", True, False),
    ],
)
def test_first_person_states_are_read_as_frames(
    text: str, key: str, obj: str, change: bool, negated: bool
) -> None:
    found = frames(text)
    assert found
    assert (found[0].key, found[0].object) == (key, obj)
    assert (found[0].change, found[0].negated) == (change, negated)


@pytest.mark.parametrize(
    "text",
    [
        "I went to Madrid.",  # an event, not a state
        "I'm so tired today.",
        "I love hiking.",  # likings add up
        "Do you use Vim?",
        "I think it's fine.",
    ],
)
def test_events_likings_and_questions_are_no_frames(text: str) -> None:
    assert frames(text) == []


def test_scopes_and_amounts() -> None:
    home, work = frames("I speak Portuguese at home.")[0], frames("I speak English at work now.")[0]
    assert home.scope == frozenset({"home"})
    assert work.scope == frozenset({"work"})
    amount: Frame = frames("I read a lot of sci-fi these days.")[0]
    assert amount.partitive
    assert amount.object == "sci-fi"


async def ended_contents(service: MemoryService) -> list[str]:
    async with service.store.reader() as session:
        return list(
            (
                await session.scalars(
                    select(MemoryItem.content).where(MemoryItem.valid_until.is_not(None))
                )
            ).all()
        )


async def test_a_changed_state_ends_the_older_one_of_the_same_verb(
    service: MemoryService,
) -> None:
    await say(service, "I drive a 2012 Honda Civic to work.", T0)
    await say(service, "I drive a Tesla now, the Civic finally died.", T0 + timedelta(days=90))
    assert await ended_contents(service) == ["I drive a 2012 Honda Civic to work."]
    lines = await pack(service, "What car do I drive?", T0 + timedelta(days=100))
    old, new = line_of(lines, "Honda Civic"), line_of(lines, "Tesla")
    assert "[superseded " in lines[old]
    assert new < old


async def test_a_state_that_stopped_ends_it(service: MemoryService) -> None:
    await say(service, "I run 10k every Sunday morning.", T0)
    await say(service, "I don't run anymore because of my knee.", T0 + timedelta(days=60))
    assert await ended_contents(service) == ["I run 10k every Sunday morning."]


async def test_same_verb_about_other_things_ends_nothing(service: MemoryService) -> None:
    # Another scope ("at home" / "at work"), even said with "now"; no word of change;
    # an amount; another noun ("my dentist" / "my gym").
    for n, text in enumerate(
        (
            "I speak Portuguese at home.",
            "I speak English at work now that the team is international.",
            "I use Vim at work.",
            "I use VS Code for notebooks.",
            "I read the Guardian every morning.",
            "I read a lot of sci-fi these days.",
            "My dentist is in Camden.",
            "My gym is in Islington now.",
        )
    ):
        await say(service, text, T0 + timedelta(days=20 * n))
    assert await ended_contents(service) == []
    lines = await pack(service, "Which editors do I use?", T0 + timedelta(days=200))
    assert not any("[conflict]" in line for line in lines)


async def test_another_verb_for_the_same_thing_ends_it_by_similarity(
    service: MemoryService,
) -> None:
    await say(service, "I take the bus to the office every day.", T0)
    await say(
        service,
        "I cycle to the office now that the bike lane is open.",
        T0 + timedelta(days=120),
    )
    assert await ended_contents(service) == ["I take the bus to the office every day."]
    lines = await pack(service, "How do I get to the office?", T0 + timedelta(days=130))
    assert line_of(lines, "cycle") < line_of(lines, "bus to the office")


async def test_a_switch_names_the_old_value_of_a_frame(service: MemoryService) -> None:
    await say(service, "I use Vim for everything at work.", T0)
    await say(service, "I switched from Vim to Emacs, don't judge.", T0 + timedelta(days=20))
    assert await ended_contents(service) == ["I use Vim for everything at work."]


async def test_my_new_x_replaces_my_x(service: MemoryService) -> None:
    await say(service, "My doctor is Dr. Okafor at the Elm Street practice.", T0)
    await say(
        service, "My new doctor is Dr. Lindqvist since Okafor retired.", T0 + timedelta(days=30)
    )
    assert await ended_contents(service) == ["My doctor is Dr. Okafor at the Elm Street practice."]

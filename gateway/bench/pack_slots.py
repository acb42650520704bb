"""``bench pack --slot-items N``: statements of one's own state in the synthetic store.

The store of ``bench pack`` holds diary sentences ("With Ana I went hiking near
Lisbon; it rained"), which claim no slot: the trust pass (memory/trust.py) then
only checks, it tags nothing. These are the statements it works on — where one
lives and works, a title, a pet's name, a favourite, a state said as a frame,
a life event — written through the real path (embedding, slots, frames,
statuses, validity, so older values are ended as they come), with the same
names and places as the diary, so the bench's questions find them. LoCoMo's
conversations have 7.6 % of such statements (210 slot rows of 2,760 turns).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from gateway.bench.report import progress
from memory.service import Episode, MemoryService

# Statements of the person's state, filled with the diary's names and places (and an
# activity); about half change a value held before, which ends the older statement.
STATES = (
    "I live in {place} now, not far from {name}.",
    "We moved to {place} last month, {name} helped with the boxes.",
    "I work at the {place} cafe with {name}.",
    "I started at {name} Labs on Monday.",
    "I'm a barista at the {place} cafe.",
    "I got promoted at work, {name} told me first.",
    "My dog's name is {name}.",
    "My favourite place is {place}.",
    "I drive {name}'s old van now.",
    "I use {name}'s laptop for everything now.",
    "I'm learning {activity} these days.",
    "I no longer work at the {place} cafe.",
    "I go to the gym near {place} now.",
    "My partner is {name}.",
    "I sold my bike to {name}.",
    "I got laid off from the {place} cafe.",
)
ACTIVITIES = ("guitar", "pottery", "Spanish", "climbing", "chess", "sourdough", "salsa")


def state(rng: random.Random, names: list[str], places: list[str]) -> str:
    return rng.choice(STATES).format(
        name=rng.choice(names), place=rng.choice(places), activity=rng.choice(ACTIVITIES)
    )


async def add_states(
    service: MemoryService,
    person_id: int,
    conversation_id: int,
    count: int,
    names: list[str],
    places: list[str],
    seed: int,
) -> None:
    """``count`` state statements of the person, spread over the diary's two years."""
    rng = random.Random(seed)
    start = datetime(2022, 1, 1, 6, tzinfo=UTC)
    step = timedelta(days=730) / max(count, 1)
    bar = progress(count, "adding state statements", "item")
    batch = 64
    for first in range(0, count, batch):
        await service.ingest(
            [
                Episode(
                    person_id=person_id,
                    text=state(rng, names, places),
                    at=start + step * n,
                    role="user",
                    speaker="Sam",
                    conversation_id=conversation_id,
                    source_ref=f"state{n}",
                )
                for n in range(first, min(first + batch, count))
            ]
        )
        bar.update(min(batch, count - first))
    bar.close()
    await service.save_indexes()

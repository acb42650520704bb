"""The weekly job's questions to the utility model: categories, summaries, insights.

Each answer that does not parse, or a call that fails, falls back to the
no-model way for what it covered (and the log says so): a model never leaves
an item without a category or a summary unwritten.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gateway.brains.answers import json_object
from gateway.errors import BrainError
from memory.categories import CATEGORIES, Category
from memory.jobs.queries import JobItem
from memory.utility import UtilityModel

log = logging.getLogger(__name__)

_NAMES = ", ".join(str(c) for c in CATEGORIES)

CATEGORY_INSTRUCTIONS = f"""You sort a person's memories into categories: {_NAMES}.
persona: who they are; preferences: likes, dislikes, how they want things; facts: other
facts; events: things that happened or will happen; relationships: family, partners,
friends; work: job, colleagues, career; health: body, mind, care; hobbies: pastimes.
Answer with one JSON object mapping each memory's number to its category and nothing else:
{{"1": "work", "2": "health"}}"""

SUMMARY_INSTRUCTIONS = """You write what an assistant knows about a person in one category,
from their memories below (dated). Three sentences at most, plain, factual, newest facts
winning over older ones; nothing that the memories do not say."""

INSIGHT_INSTRUCTIONS = """The memories below are old and similar. Write the one sentence
they have in common about the person (a pattern, a recurring theme), nothing else."""


def _lines(items: Sequence[JobItem]) -> str:
    return "\n".join(
        f"{n}. ({item.occurred_at:%Y-%m-%d}) {item.content[:400]}"
        for n, item in enumerate(items, start=1)
    )


async def model_categories(utility: UtilityModel, items: Sequence[JobItem]) -> dict[int, str]:
    """The model's category of each item it answered for (by id); the rest are left out."""
    found: dict[int, str] = {}
    for start in range(0, len(items), 50):
        chunk = items[start : start + 50]
        try:
            answer = json_object(
                await utility.complete(CATEGORY_INSTRUCTIONS, _lines(chunk), 20 * len(chunk))
            )
        except BrainError as exc:
            log.warning("weekly upkeep: the utility model could not categorise: %s", exc)
            return found
        if answer is None:
            log.warning("weekly upkeep: the utility model's categories did not parse")
            continue
        known = {str(c) for c in CATEGORIES}
        for n, item in enumerate(chunk, start=1):
            value = answer.get(str(n))
            if isinstance(value, str) and value.strip().lower() in known:
                found[item.id] = str(Category(value.strip().lower()))
    return found


async def model_text(
    utility: UtilityModel, instructions: str, items: Sequence[JobItem], max_tokens: int
) -> str | None:
    """The model's text about ``items``; None when the call failed or said nothing."""
    try:
        text = (await utility.complete(instructions, _lines(items), max_tokens)).strip()
    except BrainError as exc:
        log.warning("weekly upkeep: the utility model failed: %s", exc)
        return None
    return text or None

"""The domain TTLs: one table for the weekly archive and the trust pass's ``[stale]``.

``[upkeep_jobs] ttl_days_*`` say how long an item of a category stays current
without being used or said again: the weekly job archives an item past it
(memory/jobs/weekly.py), and the trust pass tags a slot's statement past it
``[stale]`` (memory/trust.py). Both read it here, so one setting moves both.
A slot's category comes from its attribute (``SLOT_CATEGORY``): where one works
is work, a partner's or a pet's name relationships, a favourite preferences.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config import UpkeepJobsConfig
from memory.categories import Category

# Categories with a TTL of their own; every other one has ttl_days_other.
DOMAINS: tuple[Category, ...] = (
    Category.WORK,
    Category.PREFERENCES,
    Category.HEALTH,
    Category.HOBBIES,
    Category.RELATIONSHIPS,
)
OTHER = "other"

# A slot attribute (memory/slots.py), or its family (the part before the first "_":
# "favourite" for "favourite_film"), or its last part ("name" for "dog_name").
SLOT_CATEGORY: dict[str, Category] = {
    "employer": Category.WORK,
    "job_title": Category.WORK,
    "partner": Category.RELATIONSHIPS,
    "name": Category.RELATIONSHIPS,
    "favourite": Category.PREFERENCES,
    "uses": Category.PREFERENCES,
    "residence": Category.FACTS,
    "date": Category.EVENTS,
}


def domain_ttls(jobs: UpkeepJobsConfig) -> dict[str, float]:
    """Days by category name, and ``"other"`` for the categories without their own."""
    ttls: dict[str, float] = {c.value: getattr(jobs, f"ttl_days_{c.value}") for c in DOMAINS}
    ttls[OTHER] = jobs.ttl_days_other
    return ttls


def category_ttl(ttls: Mapping[str, float], category: str | None) -> float:
    return ttls.get(category or OTHER, ttls[OTHER])


def slot_category(slot: str) -> Category | None:
    attribute = slot.partition(":")[2]
    for key in (attribute, attribute.partition("_")[0], attribute.rpartition("_")[2]):
        if key in SLOT_CATEGORY:
            return SLOT_CATEGORY[key]
    return None


def slot_ttl(ttls: Mapping[str, float], slot: str) -> float:
    """How long a statement of ``slot`` stays fresh without being said again (days)."""
    return category_ttl(ttls, slot_category(slot))

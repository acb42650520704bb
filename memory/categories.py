"""A category for every memory item, without a model: rules, then embedding prototypes.

Categories say what an item is about (persona, preferences, facts, events,
relationships, work, health, hobbies); the weekly job summarises each and
archives by its domain TTL (memory/jobs/weekly.py). Without a model the
category comes from, in order:

1. the item's type where it says enough (a persona item is persona, a
   relational one relationships, a stated preference preferences);
2. keyword rules for the domains (a doctor, a deadline, a guitar), the one
   with most hits when one leads;
3. the nearest category prototype — the best cosine of the item's vector to a
   few example sentences per category, embedded once with the same model —
   when it is at least ``category_min_similarity``;
4. else the type again: an event is events, anything else facts.

The utility model, when configured, categorises instead (memory/jobs/weekly.py).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from memory.types import ItemType


class Category(enum.StrEnum):
    PERSONA = "persona"
    PREFERENCES = "preferences"
    FACTS = "facts"
    EVENTS = "events"
    RELATIONSHIPS = "relationships"
    WORK = "work"
    HEALTH = "health"
    HOBBIES = "hobbies"


_BY_TYPE: dict[ItemType, Category] = {
    ItemType.PERSONA: Category.PERSONA,
    ItemType.RELATIONAL: Category.RELATIONSHIPS,
    ItemType.PREFERENCE: Category.PREFERENCES,
}


def _words(*words: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(words) + r")\b", re.IGNORECASE)


# Words that name a domain; stems end in \w* so "doctors", "meetings" count too.
_RULES: dict[Category, re.Pattern[str]] = {
    Category.HEALTH: _words(
        r"doctor\w*",
        r"hospital\w*",
        r"clinic\w*",
        r"allerg\w*",
        r"medication\w*",
        r"medicine\w*",
        r"pills?",
        r"therap\w*",
        r"surgery",
        r"diagnos\w*",
        r"symptom\w*",
        r"migraine\w*",
        r"asthma",
        r"diabet\w*",
        r"blood pressure",
        r"injur\w*",
        r"sick",
        r"ill(?:ness)?",
        r"flu",
        r"fever",
        r"dentist\w*",
        r"physio\w*",
        r"health\w*",
        r"sleep\w*",
        r"insomnia",
        r"anxiety",
        r"depress\w*",
        r"pregnan\w*",
        r"vaccin\w*",
    ),
    Category.WORK: _words(
        r"job\w*",
        r"work(?:s|ed|ing)?",
        r"office\w*",
        r"boss\w*",
        r"colleague\w*",
        r"cowork\w*",
        r"manager\w*",
        r"meeting\w*",
        r"deadline\w*",
        r"project\w*",
        r"client\w*",
        r"salary",
        r"promot\w*",
        r"career\w*",
        r"hired",
        r"interview\w*",
        r"company",
        r"employer\w*",
        r"shift\w*",
        r"startup",
        r"quarterly",
        r"presentation\w*",
        r"team lead",
    ),
    Category.HOBBIES: _words(
        r"hobb\w*",
        r"painting\w*",
        r"paint",
        r"guitar\w*",
        r"piano",
        r"violin",
        r"hik\w*",
        r"climb\w*",
        r"knit\w*",
        r"garden\w*",
        r"chess",
        r"photograph\w*",
        r"pottery",
        r"cycl\w*",
        r"surf\w*",
        r"fishing",
        r"camping",
        r"marathon\w*",
        r"run(?:ning)?",
        r"yoga",
        r"baking",
        r"video games?",
        r"gaming",
        r"board games?",
        r"novels?",
        r"reading",
        r"sketch\w*",
        r"dance\w*|dancing",
        r"sing(?:ing)?",
        r"band",
        r"woodwork\w*",
    ),
    Category.RELATIONSHIPS: _words(
        r"wife",
        r"husband",
        r"partner",
        r"girlfriend",
        r"boyfriend",
        r"married",
        r"marriage",
        r"divorc\w*",
        r"sister\w*",
        r"brother\w*",
        r"mom|mum|mother",
        r"dad|father",
        r"parents?",
        r"son|daughter",
        r"kids?|children",
        r"grand\w*",
        r"cousin\w*",
        r"aunt|uncle",
        r"friend\w*",
        r"best friend",
        r"neighbou?r\w*",
        r"family",
        r"dating",
        r"fianc\w*",
    ),
    Category.PREFERENCES: _words(
        r"prefer\w*",
        r"favou?rite",
        r"i (?:really )?(?:love|like|enjoy|hate|dislike|can't stand|adore)",
        r"rather",
        r"not a fan",
        r"fan of",
        r"vegetarian",
        r"vegan",
    ),
    Category.EVENTS: _words(
        r"yesterday",
        r"tomorrow",
        r"last (?:week|month|year|night|weekend)",
        r"next (?:week|month|year|weekend)",
        r"wedding",
        r"birthday",
        r"party",
        r"trip",
        r"concert",
        r"holiday",
        r"vacation",
        r"festival",
        r"graduat\w*",
        r"anniversary",
        r"conference",
        r"moved",
        r"visited",
        r"happened",
    ),
}

# A few sentences per category, the embedding prototypes: written as people say them.
PROTOTYPES: dict[Category, tuple[str, ...]] = {
    Category.PERSONA: (
        "I am a nurse and I live in Lisbon.",
        "My name is Sam and I'm 34 years old.",
        "I grew up in a small town by the sea.",
        "I'm an introvert who likes quiet evenings.",
        "I speak Spanish and English.",
    ),
    Category.PREFERENCES: (
        "I prefer tea to coffee.",
        "My favourite colour is green.",
        "I don't like spicy food.",
        "I'd rather travel by train than fly.",
        "Please keep your answers short.",
    ),
    Category.FACTS: (
        "The car is parked in the garage.",
        "My flat has two bedrooms.",
        "The password manager is on my laptop.",
        "Our cat Miso is grey.",
        "The library closes at six.",
    ),
    Category.EVENTS: (
        "We went to a concert last Friday.",
        "My cousin's wedding is next month.",
        "I moved to a new apartment in May.",
        "We had a party for my birthday yesterday.",
        "The trip to Rome was last summer.",
    ),
    Category.RELATIONSHIPS: (
        "My sister Ana lives in Porto.",
        "My husband and I have been married for ten years.",
        "My best friend is moving away.",
        "My mother calls me every Sunday.",
        "My kids are seven and nine.",
    ),
    Category.WORK: (
        "I have a meeting with my boss tomorrow.",
        "The project deadline is on Friday.",
        "I work as a software engineer at a startup.",
        "My colleague got promoted.",
        "I have a job interview next week.",
    ),
    Category.HEALTH: (
        "I'm allergic to penicillin.",
        "I have a doctor's appointment on Monday.",
        "My back hurts after the run.",
        "I take medication for my blood pressure.",
        "I haven't been sleeping well lately.",
    ),
    Category.HOBBIES: (
        "I love painting landscapes on weekends.",
        "I'm learning to play the guitar.",
        "We go hiking in the mountains.",
        "I'm training for a marathon.",
        "I read a lot of science fiction.",
    ),
}

CATEGORIES: tuple[Category, ...] = tuple(Category)


def rule_category(item_type: ItemType, text: str) -> Category | None:
    """The category the type or the keywords settle, or None when they do not."""
    found = _BY_TYPE.get(item_type)
    if found is not None:
        return found
    hits = {category: len(pattern.findall(text)) for category, pattern in _RULES.items()}
    ranked = sorted(hits.items(), key=lambda pair: -pair[1])
    (best, most), (_, second) = ranked[0], ranked[1]
    if most in (0, second):
        return None
    return best


def fallback_category(item_type: ItemType) -> Category:
    return Category.EVENTS if item_type is ItemType.EVENT else Category.FACTS


@dataclass(frozen=True)
class CategoryPrototypes:
    """The example sentences' vectors, stacked, and the category of each row."""

    matrix: NDArray[np.float32]
    owners: tuple[Category, ...]
    model: str

    @staticmethod
    def texts() -> list[tuple[Category, str]]:
        return [(category, text) for category, texts in PROTOTYPES.items() for text in texts]

    def nearest(self, vectors: NDArray[np.float32]) -> list[tuple[Category, float]]:
        """Each row's nearest category by its best example, with that cosine."""
        if len(vectors) == 0:
            return []
        sims = vectors @ self.matrix.T
        best = np.argmax(sims, axis=1)
        return [
            (self.owners[int(col)], float(sims[row, col])) for row, col in enumerate(best.tolist())
        ]


def categorise(
    types: Sequence[ItemType],
    texts: Sequence[str],
    vectors: NDArray[np.float32] | None,
    prototypes: CategoryPrototypes | None,
    min_similarity: float,
) -> list[Category]:
    """Each item's category without a model (see the module's docstring)."""
    nearest = (
        prototypes.nearest(vectors)
        if prototypes is not None and vectors is not None and len(vectors) == len(texts)
        else [None] * len(texts)
    )
    out = []
    for item_type, text, near in zip(types, texts, nearest, strict=True):
        found = rule_category(item_type, text)
        if found is None and near is not None and near[1] >= min_similarity:
            found = near[0]
        out.append(found if found is not None else fallback_category(item_type))
    return out

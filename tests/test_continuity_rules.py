"""The focus and decision rules on the labelled sets: the tuned part fully right, the
held-out part (written before the rules were run on it, never tuned on) nearly so."""

from __future__ import annotations

import pytest

from memory.continuity.evaluate import HELD_OUT, KINDS, LABELLED, score_file
from memory.continuity.rules import decisions_of, focus_done, focus_of, reverses, tags_of


@pytest.mark.parametrize("kind", KINDS)
def test_the_tuned_set_is_all_right(kind: str) -> None:
    score = score_file(LABELLED, kind)
    assert score.messages >= 20
    assert score.precision == 1.0, score.misses
    assert score.recall == 1.0, score.misses


@pytest.mark.parametrize("kind", KINDS)
def test_the_held_out_set(kind: str) -> None:
    score = score_file(HELD_OUT, kind)
    assert score.messages >= 15
    assert score.precision >= 0.9, score.misses
    assert score.recall >= 0.85, score.misses


def test_a_focus_reads_as_a_phrase_and_ends_where_the_clause_does() -> None:
    found = focus_of("I'm preparing for the Berlin marathon, so I need lots of carbs.")
    assert found is not None
    assert found.text == "Preparing for the Berlin marathon"
    assert focus_of("are we working on the export?") is None


def test_done_reversal_and_tags() -> None:
    done = focus_done("We're done with the invoice export!")
    assert done is not None
    assert done.text == "the invoice export"
    assert [d.text for d in decisions_of("We decided to use Postgres. Let's go with Fly.io")] == [
        "Use Postgres",
        "Fly.io",
    ]
    assert reverses("Actually, let's go with SQLite instead.")
    assert not reverses("We decided to use Postgres.")
    assert tags_of("decision: weekly standups #team #Meetings") == ["team", "meetings"]
    # A paste of one endless sentence is not read (and costs no quadratic scan).
    assert decisions_of("we decided " + "x " * 1_000_000) == []

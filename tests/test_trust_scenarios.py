"""The trust bench's scenarios are well formed: the words it scores by point at one statement.

``current_first`` and ``old_untagged`` find a statement in the pack by a substring, so a
substring that also sits in another message (or in none) would score the wrong line.
"""

from __future__ import annotations

import argparse

import pytest

from gateway.bench.trust_bench import DEV_SPLITS, HELD_OUT_SPLITS, main, trust_targets
from gateway.bench.trust_scenarios import SCENARIOS, Scenario
from gateway.bench.trust_scenarios_frames import HELD_OUT_FRAMES
from gateway.bench.trust_scenarios_lockbox import LOCKBOX
from gateway.bench.trust_scenarios_lockbox2 import CHANGES, KEEPS, LOCKBOX_2
from gateway.bench.trust_scenarios_lockbox3 import CHANGES as CHANGES_3
from gateway.bench.trust_scenarios_lockbox3 import KEEPS as KEEPS_3
from gateway.bench.trust_scenarios_lockbox3 import LOCKBOX_3
from gateway.bench.trust_scenarios_lockbox4 import CHANGES as CHANGES_4
from gateway.bench.trust_scenarios_lockbox4 import KEEPS as KEEPS_4
from gateway.bench.trust_scenarios_lockbox4 import LOCKBOX_4
from gateway.bench.trust_scenarios_status import HELD_OUT_STATUS

ALL = SCENARIOS + HELD_OUT_FRAMES + HELD_OUT_STATUS + LOCKBOX + LOCKBOX_2 + LOCKBOX_3 + LOCKBOX_4


def _holding(scenario: Scenario, words: str) -> list[int]:
    return [n for n, (_, text) in enumerate(scenario.messages) if words in text]


def test_names_are_unique_and_splits_declared() -> None:
    assert len({s.name for s in ALL}) == len(ALL)
    assert {s.split for s in ALL} == {*DEV_SPLITS, *HELD_OUT_SPLITS}


@pytest.mark.parametrize("scenario", LOCKBOX_2 + LOCKBOX_3 + LOCKBOX_4, ids=lambda s: s.name)
def test_lockbox_words_point_at_one_statement(scenario: Scenario) -> None:
    days = [day for day, _ in scenario.messages]
    assert days == sorted(days)
    assert days[-1] <= scenario.question[0]
    if scenario.current:
        (now,) = _holding(scenario, scenario.current)
        (old,) = _holding(scenario, scenario.old)
        # The change comes on a later day than the statement it replaces.
        assert days[old] < days[now]
        assert not scenario.messages[now][1].startswith("agent: ")
    for words in scenario.keep:
        # The kept statement comes first: everything after it is what must not end it.
        assert _holding(scenario, words) == [0]


@pytest.mark.parametrize(
    ("split", "lockbox", "changes", "keeps"),
    [
        ("lockbox_2", LOCKBOX_2, CHANGES, KEEPS),
        ("lockbox_3", LOCKBOX_3, CHANGES_3, KEEPS_3),
        ("lockbox_4", LOCKBOX_4, CHANGES_4, KEEPS_4),
    ],
)
def test_lockbox_is_one_split_of_changes_and_keeps(
    split: str,
    lockbox: tuple[Scenario, ...],
    changes: tuple[Scenario, ...],
    keeps: tuple[Scenario, ...],
) -> None:
    assert {s.split for s in lockbox} == {split}
    assert lockbox == changes + keeps
    assert all(s.current and s.old and not s.keep for s in changes)
    assert all(s.keep and not s.current and not s.old for s in keeps)
    assert len(changes) >= 30
    assert len(keeps) >= 12


def test_one_split_run_is_judged_on_that_split_alone() -> None:
    # `bench trust --split lockbox_4` reports by_split for that split only; the
    # verdicts must name it and not stop on the splits that were not run.
    scores = {"current_first": 0.5, "old_untagged": 0.25, "false_supersessions": 0.0}
    result = {
        "old_untagged": None,
        "false_supersessions": 0.0,
        "by_split": {"lockbox_4": scores},
        "old_untagged_held_out": 0.25,
        "false_supersessions_held_out": 0.0,
    }
    names = [t.name for t in trust_targets(result)]
    assert [n for n in names if "current fact first" in n] == [
        "current fact first on lockbox_4 scenarios, rules only (>= 0.9)"
    ]


def test_an_unknown_split_is_refused() -> None:
    args = argparse.Namespace(split=["lockbox_9"], set=None, repeats=1, json=True)
    with pytest.raises(SystemExit, match="lockbox_9"):
        main(args)

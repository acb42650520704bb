"""The lesson extractors: the rules on the labelled and held-out sets, the utility model's
JSON (asked again once, then the rules), and the two-session scenario of the trust bench."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.bench.trust_lessons import bench_config, run_scenario
from gateway.brains.base import Purpose
from gateway.brains.scripted import ScriptedBrain
from gateway.errors import BrainUnavailable
from persona.lessons.evaluate import HELD_OUT, LABELLED, score_file
from persona.lessons.extract import Candidate, extract
from persona.lessons.learn import LLMExtractor, broken_rules, parse_lessons, rule_lessons


def test_rules_on_the_labelled_set() -> None:
    score = score_file(LABELLED)
    assert score.messages >= 50
    assert score.precision == 1.0, score.misses
    assert score.recall == 1.0, score.misses


def test_rules_on_the_held_out_set() -> None:
    # Written before the rules and never tuned on: its figures are the honest ones.
    score = score_file(HELD_OUT)
    assert score.messages >= 35
    assert score.precision >= 0.95, score.misses
    assert score.recall >= 0.95, score.misses


@pytest.mark.parametrize(
    "text",
    ["No worries", "I don't know", "stop by later", "Call me later.", "Don't worry about it."],
)
def test_look_alikes_teach_nothing(text: str) -> None:
    assert extract(text) == []


def test_each_sentence_teaches_and_a_slot_is_named() -> None:
    found = extract("Stop adding emojis. Don't call me Bob, it's Robert. Stop using emojis!")
    assert found == [
        Candidate("Do not add emojis.", "style:emoji"),
        Candidate("Call the user Robert, not Bob.", "name"),
    ]
    assert extract("Call me Bob.")[0].slot == extract("Don't call me Bob.")[0].slot == "name"


def test_a_broken_hard_rule_becomes_a_lesson() -> None:
    detail = {"rules": [{"rule": "Never use emojis", "kept": False}, {"rule": "x", "kept": None}]}
    assert broken_rules(detail) == ["Never use emojis"]
    assert rule_lessons(["Never use emojis", "Sign as Ada"]) == [
        Candidate("Do not use emojis.", "style:emoji"),
        Candidate("Sign as Ada.", "rule:sign as ada"),
    ]


def test_parse_lessons_refuses_what_is_not_the_json_asked_for() -> None:
    assert parse_lessons('{"lessons": [{"text": "Do not use emojis.", "slot": "Emoji"}]}', 400) == [
        Candidate("Do not use emojis.", "emoji")
    ]
    assert parse_lessons('{"lessons": []}', 400) == []
    assert parse_lessons("Sure! Here are the lessons.", 400) is None
    assert parse_lessons('{"lessons": [{"slot": "x"}]}', 400) is None
    # Too long for the store: left out, not cut.
    assert parse_lessons('{"lessons": [{"text": "' + "y" * 500 + '"}]}', 400) == []


async def test_the_utility_model_writes_lessons_and_is_asked_again_once() -> None:
    brain = ScriptedBrain(
        script=[
            "not json",
            '{"lessons": [{"text": "Call the user Robert, not Bob.", "slot": "name"}]}',
        ]
    )
    extractor = LLMExtractor(brain)
    found = await extractor.from_message("No! It's Robert.", "Sure thing, Bob!")
    assert found == [Candidate("Call the user Robert, not Bob.", "name")]
    assert len(brain.requests) == 2
    assert all(r.purpose is Purpose.UTILITY for r in brain.requests)
    assert "Sure thing, Bob!" in brain.requests[0].messages[-1].text
    assert extractor.name == "llm:scripted-1"


async def test_the_utility_model_is_not_asked_about_ordinary_chat() -> None:
    brain = ScriptedBrain()
    assert await LLMExtractor(brain).from_message("Lovely weather in Porto today.", "") == []
    assert brain.requests == []


async def test_a_failing_or_malformed_model_falls_back_to_the_rules() -> None:
    failing = ScriptedBrain(script=[BrainUnavailable("down")])
    assert await LLMExtractor(failing).from_message("Stop adding emojis.", "") == [
        Candidate("Do not add emojis.", "style:emoji")
    ]
    malformed = ScriptedBrain(script=["no", "still no"])
    assert await LLMExtractor(malformed).from_message("Stop adding emojis.", "") == [
        Candidate("Do not add emojis.", "style:emoji")
    ]


async def test_trust_bench_scenario_applies_every_correction(tmp_path: Path) -> None:
    result = await run_scenario(bench_config(tmp_path))
    assert result["lessons_applied"] == 1.0, result["missed"]
    assert result["corrections"] == 6
    assert result["false_lessons"] == 0
    assert result["stale_in_prompt"] == 0
    assert "- Call the user Bob." in result["prompt_lessons"]

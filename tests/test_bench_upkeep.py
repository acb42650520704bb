"""``bench upkeep``'s replay (issue 21): a tiny LoCoMo-format conversation on the
simulated calendar runs each job as often as the calendar passes its times, and a
five-week downtime runs each job once. No wall-clock figures are asserted."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.bench.locomo_bench import bench_config, load_conversation
from gateway.bench.upkeep_replay import JobTally, run_replay, sessions_of
from memory.embed import SentenceEmbedder
from memory.jobs.registry import job_bodies

pytestmark = pytest.mark.slow

# Wednesday 1 March 2023 to Monday 20 March; asked a day after the last turn.
SESSIONS = [
    ("10:00 am on 1 March, 2023", ["I adopted a puppy called Miso.", "What breed is Miso?"]),
    ("6:30 pm on 9 March, 2023", ["Miso is a beagle and she is 3.", "Does she like walks?"]),
    ("10:00 am on 20 March, 2023", ["We went hiking at the lake.", "Was Miso tired after?"]),
]
# The scheduled times in (first session - 1 min, asked at], plus the first run at the
# first catch-up (a job that never ran is due at once): nightly 02:00 on 2-21 March,
# weekly on Sundays 5, 12 and 19 March, monthly none (1 March 03:00 is before).
EXPECTED_RUNS = {"nightly": 20 + 1, "weekly": 3 + 1, "monthly": 0 + 1}
# Five weeks after 21 March: 35 nights, 5 Sundays, 1 April the 1st.
EXPECTED_MISSED = {"nightly": 35, "weekly": 5, "monthly": 1}


def write_fixture(folder: Path) -> Path:
    data: dict[str, Any] = {"speaker_a": "Sam", "speaker_b": "Ana", "qa": []}
    for n, (when, texts) in enumerate(SESSIONS, start=1):
        data[f"session_{n}_date_time"] = when
        data[f"session_{n}"] = [
            {"speaker": "Sam" if i % 2 == 0 else "Ana", "dia_id": f"D{n}:{i + 1}", "text": text}
            for i, text in enumerate(texts)
        ]
    data["qa"] = [
        {"question": "How old is Miso?", "category": 1, "evidence": ["D2:1"]},
        {"question": "Where did Sam go hiking?", "category": 4, "evidence": ["D3:1"]},
    ]
    path = folder / "conv-1.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_sessions_are_split_by_dia_id_and_ordered_by_date(tmp_path: Path) -> None:
    conversation = load_conversation(write_fixture(tmp_path))
    sessions = sessions_of([conversation])
    assert [s.at for s in sessions] == [
        datetime(2023, 3, 1, 10, 0, tzinfo=UTC),
        datetime(2023, 3, 9, 18, 30, tzinfo=UTC),
        datetime(2023, 3, 20, 10, 0, tzinfo=UTC),
    ]
    assert [len(s.turns) for s in sessions] == [2, 2, 2]


async def test_the_calendar_runs_each_job_as_it_passes_and_once_after_downtime(
    tmp_path: Path,
) -> None:
    conversation = load_conversation(write_fixture(tmp_path))
    config = bench_config(
        tmp_path / "data", 1000, {"embedder": "minilm"}, sections={"agent": {"timezone": "UTC"}}
    )
    registered = set(job_bodies(config))
    result = await run_replay(
        config,
        SentenceEmbedder.load(),
        [conversation],
        1000,
        upkeep=True,
        observe=True,
        label="test",
    )
    tally: JobTally = result["tally"]
    for job, runs in EXPECTED_RUNS.items():
        assert tally.runs.get(job, 0) == (runs if job in registered else 0), job
    # The hourly job catches up at every step: at least as often as the nightly.
    assert tally.runs["hourly"] >= tally.runs["nightly"]
    assert not tally.failed
    # Every run was timed (the bench's upkeep_seconds).
    assert {job: len(t) for job, t in tally.seconds.items()} == dict(tally.runs)
    # The rules observer read every turn through the nightly's extraction catch-up.
    assert tally.counts["nightly"]["extracted"] == len(conversation.turns)
    catch_up = result["catch_up"]
    assert catch_up["runs_at_start"] == dict.fromkeys(sorted(registered), 1)
    assert set(catch_up["registered"]) == registered
    for job, missed in EXPECTED_MISSED.items():
        if job in registered:
            assert catch_up["missed_periods"][job] == missed, job
    assert catch_up["missed_periods"]["hourly"] == 35 * 24
    assert result["questions"] == 2

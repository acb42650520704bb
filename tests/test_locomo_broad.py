"""The broad-question measure of ``bench locomo`` (gateway/bench/locomo_broad.py): a
session is represented only by a whole turn of that speaker from it or a verbatim
sentence of at least 8 words of one; a paraphrase, a short sentence, another
speaker's turn or another session's does not count; and the half-budget figure
asks its packs at half the budget."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from gateway.bench import locomo_broad
from memory.service import MemoryService, PackRequest

TURNS = [
    ("D1:1", "Ana", "I adopted a puppy from the shelter last weekend and named her Biscuit."),
    ("D1:2", "Ben", "Congratulations on the new puppy, that is wonderful news for you."),
    ("D2:1", "Ana", "Work was busy. I finished the quarterly report for the whole sales team."),
    ("D3:1", "Ana", "Great!"),
]


def test_a_session_is_represented_by_a_whole_turn_or_a_long_verbatim_sentence() -> None:
    whole = f'- 2023-05-01 Ana: "{TURNS[0][2]}"'
    assert locomo_broad.represented(whole, TURNS, "Ana", 1)
    # One sentence of 8 words or more, verbatim, is enough (an extractive line).
    sentence = "I finished the quarterly report for the whole sales team."
    assert locomo_broad.represented(f"- {sentence}", TURNS, "Ana", 2)
    # A sentence under 8 words is not ("Work was busy."), nor a paraphrase.
    assert not locomo_broad.represented("- Work was busy.", TURNS, "Ana", 2)
    assert not locomo_broad.represented(
        "- Ana adopted a shelter puppy called Biscuit last weekend.", TURNS, "Ana", 1
    )
    # Another speaker's turn of that session, or the speaker's turn of another session.
    assert not locomo_broad.represented(f"- {TURNS[1][2]}", TURNS, "Ana", 1)
    assert not locomo_broad.represented(whole, TURNS, "Ana", 2)
    assert locomo_broad.represented("- Great!", TURNS, "Ana", 3)


@dataclass
class Recording:
    asked: list[PackRequest] = field(default_factory=list)

    async def build_pack(self, request: PackRequest) -> Any:
        self.asked.append(request)
        return type("Pack", (), {"text": f"- {TURNS[0][2]}"})()


async def test_coverage_asks_at_the_budget_given(tmp_path: Path) -> None:
    path = tmp_path / "conv-1.json"
    data = {
        "session_1": [],
        "session_2": [],
        "events_session_1": {"Ana": ["adopted a puppy"]},
        "events_session_2": {"Ana": ["finished a report"]},
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    service = Recording()
    at = datetime(2023, 6, 1, tzinfo=UTC)
    rows = [(path, "Ana", "Ben", TURNS, 1, at)]
    shares = await locomo_broad.coverage(cast(MemoryService, service), rows, budget_tokens=500)
    # Ana had events in sessions 1 and 2; the pack quotes session 1 only.
    assert shares == [("conv-1", 0.5), ("conv-1", 0.5)]
    assert {r.budget_tokens for r in service.asked} == {500}
    assert len(service.asked) == len(locomo_broad.QUESTIONS)

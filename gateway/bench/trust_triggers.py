"""Forward triggers for ``agentgw bench trust``: ``triggers_fired_on_day``.

On a fake clock, each scenario's person (in their own zone) sends a dated
message through the real turn pipeline and store; then a message at noon of
their day before the named day and one at noon of that day. A scenario counts
when the Today block quoting the sentence is in the second prompt and not in the
first. Alongside, the detector's precision and recall on the labelled messages
of ``gateway/bench/trigger_cases.py`` (tuning and held-out apart).

Runnable alone: ``python -m gateway.bench.trust_triggers [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import update

from gateway.app import build_stages
from gateway.bench.trigger_cases import HELD_OUT, SENT_ON, TUNE, Case
from gateway.brains.scripted import ScriptedBrain
from gateway.config import load_config
from gateway.context import load_persona
from gateway.hub import ConversationHub
from gateway.pipeline import PipelineSettings, TurnPipeline
from gateway.store import Store
from gateway.store.models import Person
from gateway.store.repo import resolve_address, store_inbound
from gateway.zones import PersonZones
from memory.triggers.detect import days_ahead
from memory.triggers.stages import TodayStage, TriggerScanStage

# (zone, when it is sent there, the message, the day it names there).
SCENARIOS: tuple[tuple[str, datetime, str, date], ...] = (
    ("Europe/Lisbon", datetime(2026, 11, 25, 10),
     "My job interview is next Friday", date(2026, 11, 27)),
    ("America/Los_Angeles", datetime(2026, 11, 25, 19),
     "Dentist tomorrow at 3", date(2026, 11, 26)),
    ("Pacific/Auckland", datetime(2026, 11, 26, 8),
     "The exam is on Monday", date(2026, 11, 30)),
    ("Asia/Tokyo", datetime(2026, 11, 25, 23),
     "We fly to Seoul on the 12th", date(2026, 12, 12)),
    ("UTC", datetime(2026, 11, 25, 12),
     "We move to Porto in 6 months", date(2027, 5, 25)),
    ("Europe/Berlin", datetime(2026, 11, 25, 9),
     "Next week I start at the bakery", date(2026, 11, 30)),
    ("America/New_York", datetime(2026, 11, 25, 22),
     "My sister's wedding is on 19 December", date(2026, 12, 19)),
    ("Australia/Sydney", datetime(2026, 11, 25, 7),
     "Concert this weekend, so excited", date(2026, 11, 28)),
    ("America/Sao_Paulo", datetime(2026, 11, 25, 18),
     "Surgery is scheduled for 2027-01-04", date(2027, 1, 4)),
    ("Asia/Kolkata", datetime(2026, 11, 25, 23, 45),
     "The recital is the day after tomorrow", date(2026, 11, 27)),
    ("Europe/London", datetime(2026, 12, 30, 20),
     "I'll see you on New Year's Day", date(2027, 1, 1)),
    ("America/Chicago", datetime(2026, 11, 25, 8),
     "In two weeks I have my driving test", date(2026, 12, 9)),
)  # fmt: skip


def _noon(day: date, zone: str) -> datetime:
    return datetime.combine(day, day_time(12), tzinfo=ZoneInfo(zone)).astimezone(UTC)


async def fired_on_day(folder: Path) -> dict[str, Any]:
    config = load_config(
        None,
        env={},
        overrides={
            "store": {"data_dir": str(folder)},
            "memory": {"enabled": False},
            "agent": {"timezone": "UTC"},
        },
    )
    rows: list[dict[str, Any]] = []
    async with Store(config.database_url) as store:
        zones = PersonZones(store, config.zone)
        brain = ScriptedBrain()
        pipeline = TurnPipeline(
            store,
            brain,
            [
                *build_stages(
                    config,
                    None,
                    zones,
                    persona=load_persona(config.agent.persona_file, config.agent.name),
                ),
                TodayStage(store, zones),
            ],
            ConversationHub(),
            PipelineSettings(max_tokens=200, temperature=None, timeout_s=5, history_max_messages=4),
            after_stages=[TriggerScanStage(store, zones)],
        )

        async def say(address: Any, text: str, at: datetime) -> str:
            inbound = await store_inbound(store, address, text, at, None)
            await pipeline.run(inbound, time.perf_counter())
            return "\n".join(b.text for b in brain.requests[-1].system if b.kind == "memory")

        for index, (zone, sent_local, text, day) in enumerate(SCENARIOS):
            address = await resolve_address(store, "webchat", f"bench-{index}")
            async with store.session() as session:
                await session.execute(
                    update(Person).where(Person.id == address.person_id).values(timezone=zone)
                )
            sent = sent_local.replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)
            await say(address, text, sent)
            before = await say(address, "hello", _noon(day - timedelta(days=1), zone))
            on_day = await say(address, "hello again", _noon(day, zone))
            ok = text in on_day and text not in before
            rows.append({"zone": zone, "message": text, "day": day.isoformat(), "fired_on_day": ok})
    return {
        "triggers_fired_on_day": sum(r["fired_on_day"] for r in rows) / len(rows),
        "scenarios": len(rows),
        "failed": [r for r in rows if not r["fired_on_day"]],
    }


def detector_scores(cases: Sequence[Case]) -> dict[str, float]:
    """Precision and recall of the days found in ``cases`` (read as sent on ``SENT_ON``)."""
    true_pos = found = wanted = 0
    for text, want in cases:
        got = {d.day.isoformat() for d in days_ahead(text, SENT_ON, horizon_days=1826, max_days=3)}
        true_pos += len(got & set(want))
        found += len(got)
        wanted += len(want)
    return {
        "precision": round(true_pos / found, 3) if found else 0.0,
        "recall": round(true_pos / wanted, 3) if wanted else 0.0,
        "messages": len(cases),
    }


def triggers_fired_on_day() -> dict[str, Any]:
    """The figure and its parts, in a temporary store."""
    with tempfile.TemporaryDirectory(prefix="agentgw-triggers-") as folder:
        result = asyncio.run(fired_on_day(Path(folder)))
    result["detector_tune"] = detector_scores(TUNE)
    result["detector_held_out"] = detector_scores(HELD_OUT)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    result = triggers_fired_on_day()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"triggers_fired_on_day: {result['triggers_fired_on_day']:.3f} of {result['scenarios']}"
        )
        for name in ("detector_tune", "detector_held_out"):
            d = result[name]
            print(
                f"{name}: precision {d['precision']:.3f}, recall {d['recall']:.3f} "
                f"({d['messages']} messages)"
            )
        for row in result["failed"]:
            print(f"  not on its day: {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

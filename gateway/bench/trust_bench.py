"""``agentgw bench trust``: current facts first, outdated ones tagged, nothing wrongly ended.

Each scenario (gateway/bench/trust_scenarios.py) is one person's dated
messages, stored through the real write path (MiniLM, SQLite, the slot rules
and validity of memory/validity.py), then a question whose pack is read as
the model reads it:

- ``current_first``: the statement true now is in the pack, above the one it
  replaced if that is there too;
- ``old_untagged``: an outdated statement is in the pack without a
  ``[superseded …]`` or ``[conflict]`` tag (target 0);
- ``conflicts_flagged``: of the scenarios with two values said the same day,
  those where both lines carry ``[conflict]``;
- ``false_supersessions``: statements about other things that were ended,
  over all such statements (target 0);
- ``keeps_tagged``: of the scenarios with such statements, those whose statement
  is in the pack tagged ``[superseded …]`` or ``[conflict]`` — the tags' cost, a
  true fact told as outdated or disputed (target 0);
- ``pack_p95_ms_added``: the pack's p95 with the trust pass less without it,
  the same packs interleaved in one run.

The headline figures are the dev scenarios' (``tuned``, written beside the
rules; ``held_out``, written after them and taken from LoCoMo; ``held_out_2``,
written after the rules' last change; ``lockbox``, jobs, roles and other life
statuses, blind once, at 7eec89c: its two misses — "Guess who's head chef now!"
and "I've joined the ESB as an apprentice trainer" ending nothing — were then
read to build the role readings of memory/roles.py, so it is seen and is dev
since; ``lockbox_2``, every slot kind in natural phrasing, written blind by a
helper while the role readings were being built and run blind once at 6be4373 —
current_first 0.28, old_untagged 0.875, false_supersessions 0 — then used to
build the change-cue fallback of memory/changes.py, so dev since). The held-out
sets, written before the mechanisms they test (``held_out_frames``: verbs no slot
rule reads; ``held_out_3``: jobs, roles and other life statuses, read while
memory/statuses.py was built, so no longer blind either; ``lockbox_3``: every
slot kind again, in several Englishes, written blind by a helper on 2026-11-28
while the change-cue fallback was being built, run once after it was frozen;
``lockbox_4``: every slot kind and a few more, written blind by another helper on
2026-11-28 while the rules were being improved on the dev splits, run once on
bf99360's rules to check it scores, next after the rules are frozen),
are reported apart: each in ``by_split``, and together as the ``*_held_out`` keys.
The keys are
produced by ``METRICS``, one function each: another key (lessons, triggers) is
one more function in that list.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gateway.bench import trust_lessons
from gateway.bench.locomo_bench import bench_config, parse_overrides
from gateway.bench.pack_bench import percentile
from gateway.bench.report import Target, at_most, print_verdicts
from gateway.bench.trust_scenarios import SCENARIOS, Scenario
from gateway.bench.trust_scenarios_frames import HELD_OUT_FRAMES
from gateway.bench.trust_scenarios_lockbox import LOCKBOX
from gateway.bench.trust_scenarios_lockbox2 import LOCKBOX_2
from gateway.bench.trust_scenarios_lockbox3 import LOCKBOX_3
from gateway.bench.trust_scenarios_lockbox4 import LOCKBOX_4
from gateway.bench.trust_scenarios_status import HELD_OUT_STATUS
from gateway.bench.trust_triggers import fired_on_day
from gateway.store import Store
from gateway.store.models import Person
from memory.embed import Embedder
from memory.models import MemoryItem
from memory.service import Episode, MemoryService, PackRequest, load_embedder

TAGS = ("[superseded ", "[conflict]")
# The lockbox was run blind once and its misses then read (memory/roles.py): dev.
# lockbox_2 was run blind once at 6be4373 (current_first 0.28, old_untagged 0.875,
# false_supersessions 0), then used to build the change-cue fallback
# (memory/changes.py): dev. lockbox_3 was run blind once at 705e45a (0.36 / 0.75 / 0),
# then its misses read to build the query-time conflicts (memory/trust.py): dev.
DEV_SPLITS = ("tuned", "held_out", "held_out_2", "lockbox", "lockbox_2", "lockbox_3")
# Written before the mechanisms they test; never the headline figures. lockbox_4 is
# the blind one (run once on bf99360's rules, once with the query-time conflicts).
HELD_OUT_SPLITS = ("held_out_frames", "held_out_3", "lockbox_4")


@dataclass
class Outcome:
    """What one scenario's pack and store showed."""

    scenario: Scenario
    lines: list[str]
    current_first: bool
    old_in_pack: bool
    old_untagged: bool
    conflict_flagged: bool
    kept_total: int
    kept_ended: list[str]
    # A keep (a true statement) in the pack with [superseded …] or [conflict]: the model
    # is told a true fact is outdated or disputed.
    keep_tagged: bool = False


@dataclass
class BenchRun:
    outcomes: list[Outcome]
    # Pack times (ms) of the same questions with and without the trust pass.
    with_trust_ms: list[float] = field(default_factory=list)
    without_trust_ms: list[float] = field(default_factory=list)


Metric = Callable[[BenchRun], dict[str, Any]]


def _share(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def current_first(run: BenchRun) -> dict[str, Any]:
    scored = [o for o in run.outcomes if o.scenario.current]
    return {"current_first": _share(sum(o.current_first for o in scored), len(scored))}


def old_untagged(run: BenchRun) -> dict[str, Any]:
    scored = [o for o in run.outcomes if o.scenario.old]
    return {
        "old_untagged": _share(sum(o.old_untagged for o in scored), len(scored)),
        "old_in_pack": _share(sum(o.old_in_pack for o in scored), len(scored)),
    }


def conflicts_flagged(run: BenchRun) -> dict[str, Any]:
    scored = [o for o in run.outcomes if o.scenario.conflict]
    return {"conflicts_flagged": _share(sum(o.conflict_flagged for o in scored), len(scored))}


def false_supersessions(run: BenchRun) -> dict[str, Any]:
    total = sum(o.kept_total for o in run.outcomes)
    wrong = sum(len(o.kept_ended) for o in run.outcomes)
    return {"false_supersessions": _share(wrong, total) if total else 0.0}


def keeps_tagged(run: BenchRun) -> dict[str, Any]:
    """Of the scenarios with statements that must stay true, those whose statement is in
    the pack tagged [superseded …] or [conflict] (the tags' cost: target 0)."""
    scored = [o for o in run.outcomes if o.scenario.keep]
    return {"keeps_tagged": _share(sum(o.keep_tagged for o in scored), len(scored))}


def pack_p95_ms_added(run: BenchRun) -> dict[str, Any]:
    if not run.with_trust_ms or not run.without_trust_ms:
        return {}
    return {
        "pack_p95_ms_added": round(_p95(run.with_trust_ms) - _p95(run.without_trust_ms), 3),
        # Medians: what a loaded machine's bursts leave of the pass's own cost.
        "pack_p50_ms_added": round(
            statistics.median(run.with_trust_ms) - statistics.median(run.without_trust_ms), 3
        ),
        "pack_p95_ms": round(_p95(run.with_trust_ms), 3),
        "pack_p95_ms_without_trust": round(_p95(run.without_trust_ms), 3),
    }


# One function per key (or group of keys) of the memory scenarios; lessons_applied
# and triggers_fired_on_day come from runs of their own (see ``main``).
METRICS: list[Metric] = [
    current_first,
    old_untagged,
    conflicts_flagged,
    false_supersessions,
    keeps_tagged,
    pack_p95_ms_added,
]


def _p95(values: Sequence[float]) -> float:
    return percentile(list(values), 0.95)


def _at(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(hour=12, tzinfo=UTC)


def _line(lines: Sequence[str], words: str) -> int | None:
    if not words:
        return None
    return next((n for n, line in enumerate(lines) if words in line), None)


async def play(service: MemoryService, person_id: int, scenario: Scenario) -> Outcome:
    for n, (day, text) in enumerate(scenario.messages):
        agent = text.startswith("agent: ")
        at = _at(day).replace(minute=n)  # same-day messages keep their order
        await service.ingest(
            [
                Episode(
                    person_id=person_id,
                    text=text.removeprefix("agent: "),
                    at=at,
                    role="assistant" if agent else "user",
                    speaker="Agent" if agent else scenario.speaker,
                )
            ]
        )
    day, question = scenario.question
    pack = await service.build_pack(PackRequest(person_id=person_id, text=question, at=_at(day)))
    lines = [line for line in pack.text.splitlines() if line.startswith("- ")]
    now, old = _line(lines, scenario.current), _line(lines, scenario.old)
    flagged = (
        scenario.conflict
        and now is not None
        and old is not None
        and "[conflict]" in lines[now]
        and "[conflict]" in lines[old]
    )
    async with service.store.reader() as session:
        ended = (
            await session.scalars(
                select(MemoryItem.content).where(
                    MemoryItem.person_id == person_id, MemoryItem.valid_until.is_not(None)
                )
            )
        ).all()
    return Outcome(
        scenario,
        lines,
        current_first=now is not None and (old is None or now < old),
        old_in_pack=old is not None,
        old_untagged=old is not None and not any(t in lines[old] for t in TAGS),
        conflict_flagged=bool(flagged),
        kept_total=len(scenario.keep),
        kept_ended=[k for k in scenario.keep if any(k in text for text in ended)],
        keep_tagged=any(
            any(t in line for t in TAGS) for k in scenario.keep for line in lines if k in line
        ),
    )


async def time_packs(
    service: MemoryService, asked: Sequence[tuple[int, Scenario]], repeats: int, run: BenchRun
) -> None:
    """The same packs with and without the trust pass, interleaved (a noisy machine
    slows both alike)."""
    settings = service.settings
    timed = ((True, run.with_trust_ms), (False, run.without_trust_ms))
    for n in range(repeats):
        for person_id, scenario in asked:
            day, question = scenario.question
            request = PackRequest(person_id=person_id, text=question, at=_at(day))
            # Alternating which goes first: the second of a pair finds warmer caches.
            for trust, times in timed if n % 2 == 0 else timed[::-1]:
                service.settings = replace(settings, trust_pass=trust)
                started = time.perf_counter()
                await service.build_pack(request)
                times.append((time.perf_counter() - started) * 1000)
    service.settings = settings


def summary(run: BenchRun) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for metric in METRICS:
        result |= metric(run)
    return result


async def bench(
    scenarios: Sequence[Scenario],
    repeats: int,
    overrides: dict[str, str],
    embedder: Embedder,
    splits: Sequence[str] = (*DEV_SPLITS, *HELD_OUT_SPLITS),
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentgw-bench-trust-") as folder:
        config = bench_config(Path(folder) / "data", 1000, overrides)
        async with Store(config.database_url) as store:
            service = MemoryService(
                store, config.memory, config.data_dir / "memory-index", embedder
            )
            try:
                asked = []
                async with store.session() as session:
                    people = [Person(display_name=s.speaker) for s in scenarios]
                    session.add_all(people)
                    await session.flush()
                    ids = [p.id for p in people]
                outcomes = []
                for person_id, scenario in zip(ids, scenarios, strict=True):
                    outcomes.append(await play(service, person_id, scenario))
                    asked.append((person_id, scenario))
                run = BenchRun(outcomes)
                await time_packs(service, asked, repeats, run)
            finally:
                await service.aclose()
    # The headline keys are the dev scenarios' (the 65 the rules were read beside or
    # checked on before); the held-out sets are reported on their own.
    dev = [o for o in run.outcomes if o.scenario.split in DEV_SPLITS]
    result = summary(replace(run, outcomes=dev))
    result["by_split"] = {
        split: summary(BenchRun([o for o in run.outcomes if o.scenario.split == split]))
        for split in splits
    }
    result["old_untagged_dev"] = result["old_untagged"]
    held = summary(BenchRun([o for o in run.outcomes if o.scenario.split in HELD_OUT_SPLITS]))
    result["current_first_held_out"] = held.get("current_first")
    result["old_untagged_held_out"] = held.get("old_untagged")
    result["false_supersessions_held_out"] = held.get("false_supersessions")
    result["keeps_tagged_held_out"] = held.get("keeps_tagged")
    result["scenarios"] = len(dev)
    result["scenarios_held_out"] = len(run.outcomes) - len(dev)
    result["failures"] = [
        {"name": o.scenario.name, "split": o.scenario.split, "pack": o.lines}
        for o in run.outcomes
        if (o.scenario.current and not o.current_first)
        or o.old_untagged
        or o.kept_ended
        or o.keep_tagged
        or (o.scenario.conflict and not o.conflict_flagged)
    ]
    result["timing_packs"] = len(run.with_trust_ms)
    return result


def trust_targets(result: dict[str, Any]) -> list[Target]:
    targets = [
        Target(
            f"current fact first on {split} scenarios, rules only (>= 0.9)",
            (result["by_split"][split].get("current_first") or 0) >= 0.9,
            str(result["by_split"][split].get("current_first")),
        )
        for split in (*DEV_SPLITS[1:], *HELD_OUT_SPLITS)
        if split in result["by_split"]
    ]
    targets += [
        at_most("outdated facts untagged in the pack", result["old_untagged"] or 0.0, 0.0, ""),
        at_most("unrelated facts wrongly ended", result["false_supersessions"], 0.0, ""),
        at_most(
            "outdated facts untagged, held-out sets",
            result.get("old_untagged_held_out") or 0.0,
            0.0,
            "",
        ),
        at_most(
            "unrelated facts wrongly ended, held-out sets",
            result.get("false_supersessions_held_out") or 0.0,
            0.0,
            "",
        ),
    ]
    if "lessons_applied" in result:
        targets.append(
            Target(
                "corrections of session 1 in session 2's prompt (all)",
                result["lessons_applied"] == 1.0,
                str(result["lessons_applied"]),
            )
        )
    if "triggers_fired_on_day" in result:
        targets.append(
            Target(
                "triggers in the prompt on their day, not the day before (all)",
                result["triggers_fired_on_day"] == 1.0,
                str(result["triggers_fired_on_day"]),
            )
        )
    if "pack_p95_ms_added" in result:
        targets.append(
            at_most("pack p95 added by the trust pass", result["pack_p95_ms_added"], 2.0, " ms")
        )
    return targets


def main(args: argparse.Namespace) -> int:
    overrides = parse_overrides(args.set or [])
    unknown = set(args.split or ()) - {*DEV_SPLITS, *HELD_OUT_SPLITS}
    if unknown:
        raise SystemExit(f"unknown split(s): {', '.join(sorted(unknown))}")

    async def go() -> dict[str, Any]:
        config = bench_config(Path(tempfile.gettempdir()) / "agentgw-trust-config", 1000, overrides)
        embedder = await asyncio.to_thread(load_embedder, config.memory)
        scenarios = (
            SCENARIOS
            + HELD_OUT_FRAMES
            + HELD_OUT_STATUS
            + LOCKBOX
            + LOCKBOX_2
            + LOCKBOX_3
            + LOCKBOX_4
        )
        if args.split:
            # One split alone (a lockbox's single blind run): the lessons and triggers
            # runs belong to no split, so they are left out.
            chosen = [s for s in scenarios if s.split in args.split]
            return await bench(chosen, args.repeats, overrides, embedder, args.split)
        result = await bench(scenarios, args.repeats, overrides, embedder)
        # A correction in session 1 in session 2's prompt: a real gateway, two sessions.
        lessons = await trust_lessons.run()
        result["lessons_applied"] = lessons["lessons_applied"]
        result["lessons"] = lessons
        # A trigger's Today block on its day and not the day before, in 12 zones.
        with tempfile.TemporaryDirectory(prefix="agentgw-bench-triggers-") as folder:
            fired = await fired_on_day(Path(folder))
        result["triggers_fired_on_day"] = fired["triggers_fired_on_day"]
        result["triggers"] = fired
        return result

    result = asyncio.run(go())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            if key != "failures":
                print(f"{key:>24}: {value}")
        for failure in result["failures"]:
            print(f"\n{failure['split']} {failure['name']}:\n  " + "\n  ".join(failure["pack"]))
    print_verdicts(trust_targets(result), as_json_output=args.json)
    return 0

"""``agentgw bench upkeep`` (issue 21): does memory that keeps itself still recall?

``--data DIR``: LoCoMo conversations replayed on a simulated calendar, every due
job run as it passes (gateway/bench/upkeep_replay.py says how), recall with and
without the jobs in the same run, the jobs' runs, counts and times, and a
five-week downtime's catch-up. ``--scale-store DIR``: the nightly job over a
``bench pack --store`` store (gateway/bench/nightly_bench.py's run), timed, with
pack latency before and while it runs. Either or both.

Only argparse at import (``agentgw`` builds every parser at each start); the work
is imported when the bench runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.errors import ConfigError

if TYPE_CHECKING:
    from gateway.bench.report import Target
    from gateway.config import CpuWorkKind

# The targets.
RECALL_SLACK = 0.005
NIGHTLY_MAX_S = 300.0
PACK_P95_MAX_MS = 25.0
PACKS_DURING_MIN = 50


def add_parser(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    upkeep = bench_sub.add_parser(
        "upkeep",
        help="LoCoMo on a simulated upkeep calendar: recall with and without the jobs, "
        "catch-up after a downtime; the nightly over a 100k store",
    )
    upkeep.add_argument(
        "--data",
        type=Path,
        help="folder of LoCoMo conv-*.json to replay (default: none, only --scale-store runs)",
    )
    upkeep.add_argument("--budget", type=int, default=1000, help="pack budget in tokens")
    upkeep.add_argument(
        "--no-observer",
        action="store_true",
        help="replay without the rules observer (default: it runs, as in the gateway)",
    )
    upkeep.add_argument(
        "--without-job",
        action="append",
        default=[],
        metavar="JOB",
        help="leave this job off the calendar of the upkeep replay, repeatable: which job "
        "moves recall (default: every job with a body runs)",
    )
    upkeep.add_argument(
        "--scale-store",
        type=Path,
        help="also time a nightly over this `agentgw bench pack --store` store, with pack "
        "latency before and during (default: not run)",
    )
    upkeep.add_argument(
        "--facts",
        type=int,
        default=2500,
        help="observer facts the scale run adds to a store that has none yet (a fifth twice)",
    )
    upkeep.add_argument(
        "--packs-during",
        type=int,
        default=50,
        help="the scale run repeats the nightly (its merges undone in between) until this "
        "many packs were timed while one ran (default: 50)",
    )
    upkeep.add_argument(
        "--cpu-work",
        choices=["process", "thread"],
        help="where the scale run's nightly does its CPU-bound steps (default: the "
        "config's [upkeep_jobs] cpu_work, process)",
    )
    upkeep.add_argument(
        "--json", action="store_true", help="print JSON instead of text (default: text)"
    )
    upkeep.set_defaults(func=main)


async def replay_bench(
    files: list[Path], budget: int, *, observe: bool, left_out: Sequence[str] = ()
) -> dict[str, Any]:
    from gateway.bench.locomo_bench import bench_config
    from gateway.bench.upkeep_replay import JobTally, load_all, run_replay
    from memory.service import load_embedder

    conversations = await asyncio.to_thread(load_all, files)
    results: dict[str, dict[str, Any]] = {}
    embedder = None
    for label, upkeep in (("without", False), ("with", True)):
        with tempfile.TemporaryDirectory(prefix=f"agentgw-bench-upkeep-{label}-") as folder:
            sections: dict[str, dict[str, Any]] = {"agent": {"timezone": "UTC"}}
            if upkeep and left_out:
                # An empty cron expression: the job is not on the calendar.
                sections["upkeep"] = {"schedule": dict.fromkeys(left_out, "")}
            config = bench_config(Path(folder) / "data", budget, {}, sections=sections)
            if embedder is None:
                embedder = await asyncio.to_thread(load_embedder, config.memory)
            results[label] = await run_replay(
                config, embedder, conversations, budget, upkeep=upkeep, observe=observe, label=label
            )
    with_, without = results["with"], results["without"]
    tally: JobTally = with_.pop("tally")
    without.pop("tally")
    counts = {key: tally.total(key) for key in ("merged", "archived", "insights", "cold")}
    return {
        "budget_tokens": budget,
        "conversations": [c.name for c in conversations],
        "turns": sum(len(c.turns) for c in conversations),
        "questions": with_["questions"],
        "simulated_from": with_["simulated_from"],
        "asked_at": with_["asked_at"],
        "recall_without_upkeep": without["recall"],
        "recall_with_upkeep": with_["recall"],
        "recall_by_category_without_upkeep": without["recall_by_category"],
        "recall_by_category_with_upkeep": with_["recall_by_category"],
        "jobs_run": dict(tally.runs),
        "jobs_failed": {job: len(errors) for job, errors in tally.failed.items()},
        **{key: int(value) for key, value in counts.items()},
        "extracted": int(tally.total("extracted")),
        "counts_by_job": tally.counts,
        "upkeep_seconds": tally.seconds_summary(),
        "catch_up": with_["catch_up"],
        "items_without_upkeep": without["items"],
        "items_with_upkeep": with_["items"],
        "pack_p95_ms_without": without["pack_p95_ms"],
        "pack_p95_ms_with": with_["pack_p95_ms"],
        "replay_s_without": without["replay_s"],
        "replay_s_with": with_["replay_s"],
        "observer": "rules" if observe else "none",
        "jobs_left_out": list(left_out),
    }


async def scale_bench(
    store: Path, facts: int, packs_during: int = 50, cpu_work: CpuWorkKind | None = None
) -> dict[str, Any]:
    from gateway.bench import nightly_bench

    result = await nightly_bench.run(store, facts, min_packs=packs_during, cpu_work=cpu_work)
    before, during = result["pack_p95_ms_before"], result["pack_p95_ms_during"]
    result["pack_p95_ratio"] = round(during / before, 2) if during and before else None
    return result


def upkeep_targets(result: dict[str, Any]) -> list[Target]:
    from gateway.bench.report import Target

    targets: list[Target] = []
    if "recall_with_upkeep" in result:
        with_, without = result["recall_with_upkeep"], result["recall_without_upkeep"]
        targets.append(
            Target(
                f"recall with upkeep >= without - {RECALL_SLACK}",
                with_ >= without - RECALL_SLACK,
                f"{with_} against {without}",
            )
        )
        ran = result["catch_up"]["runs_at_start"]
        targets.append(
            Target(
                "every overdue job runs exactly once at start",
                bool(ran) and all(n == 1 for n in ran.values()),
                json.dumps(ran),
            )
        )
    scale = result.get("nightly_at_scale")
    if scale is not None:
        targets.append(
            Target(
                f"nightly over {scale['items']} items <= {NIGHTLY_MAX_S:.0f} s",
                scale["nightly_s_max"] <= NIGHTLY_MAX_S,
                f"{scale['nightly_s']} s (median of {scale['rounds']} runs), "
                f"{scale['nightly_s_max']} s at most",
            )
        )
        during = scale["pack_p95_ms_during"]
        # A p95 of a handful of packs says little: the target needs enough of them.
        enough = scale["packs_during"] >= PACKS_DURING_MIN
        targets.append(
            Target(
                f"pack p95 <= {PACK_P95_MAX_MS:.0f} ms while the nightly runs "
                f"(over >= {PACKS_DURING_MIN} packs)",
                enough and during is not None and during <= PACK_P95_MAX_MS,
                f"{during} ms during ({scale['packs_during']} packs), "
                f"{scale['pack_p95_ms_before']} ms before (ratio {scale['pack_p95_ratio']})",
            )
        )
    return targets


def main(args: argparse.Namespace) -> int:
    from gateway.bench.report import print_verdicts

    if args.data is None and args.scale_store is None:
        raise ConfigError("bench upkeep needs --data DIR (LoCoMo) or --scale-store DIR, or both")
    if args.budget < 1:
        raise ConfigError("--budget must be positive")
    result: dict[str, Any] = {}
    if args.data is not None:
        files = sorted(Path(args.data).glob("conv-*.json"))
        if not files:
            raise ConfigError(f"no conv-*.json in {args.data}")
        from memory.jobs.registry import JOB_NAMES

        unknown = sorted(set(args.without_job) - set(JOB_NAMES))
        if unknown:
            raise ConfigError(
                f"--without-job {', '.join(unknown)}: not a job (the jobs: {', '.join(JOB_NAMES)})"
            )
        result |= asyncio.run(
            replay_bench(
                files, args.budget, observe=not args.no_observer, left_out=args.without_job
            )
        )
    if args.scale_store is not None:
        if not (args.scale_store / "bench-pack.json").exists():
            raise ConfigError(
                f"--scale-store {args.scale_store}: not a store of `agentgw bench pack --store`"
            )
        if args.packs_during < 1:
            raise ConfigError("--packs-during must be positive")
        result["nightly_at_scale"] = asyncio.run(
            scale_bench(args.scale_store, args.facts, args.packs_during, args.cpu_work)
        )
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        for key, value in result.items():
            print(f"{key:>34}: {value}")
    print_verdicts(upkeep_targets(result), as_json_output=args.json)
    return 0

"""The weekly and monthly upkeep job bodies timed over a pack bench store.

    python -m gateway.bench.jobs_bench --store DIR [--now 2024-01-02] [--uncategorised]
        [--jobs weekly,monthly] [--json]

``DIR`` is a store kept by ``agentgw bench pack --items N --store DIR`` (one
person, N episodes over two years from 2022-01-01). The jobs change it (they
archive, summarise, move to the cold tier): run it on a copy to keep the bench
store as it was. ``--uncategorised`` clears every category first, so the weekly
run categorises the whole store (the worst case, after the migration).
Prints each body's seconds and counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import update

from gateway.config import Config, load_config
from gateway.store import Store
from memory.jobs.base import JobContext
from memory.jobs.monthly import monthly
from memory.jobs.weekly import weekly
from memory.models import MemoryItem
from memory.service import MemoryService, load_embedder


async def run(
    config: Config, now: datetime, uncategorised: bool, jobs: list[str]
) -> dict[str, Any]:
    embedder = await asyncio.to_thread(load_embedder, config.memory)
    result: dict[str, Any] = {"now": now.isoformat()}
    async with Store(config.database_url) as store:
        service = MemoryService(
            store,
            config.memory,
            config.data_dir / "memory-index",
            embedder,
            jobs=config.upkeep_jobs,
        )
        try:
            if uncategorised:
                async with store.session() as session:
                    await session.execute(update(MemoryItem).values(category=""))
            bodies = {"weekly": weekly, "monthly": monthly}
            for name in jobs:
                body = bodies[name]
                ctx = JobContext(service=service, now=now)
                began = time.perf_counter()
                counts = await body(ctx)
                result[f"{name}_seconds"] = round(time.perf_counter() - began, 1)
                result[f"{name}_counts"] = counts
                if ctx.report:
                    result[f"{name}_report"] = ctx.report
        finally:
            await service.aclose()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.jobs_bench")
    parser.add_argument("--store", type=Path, required=True, help="a pack bench store (a copy)")
    parser.add_argument(
        "--now", default="2024-01-02", help="the jobs' clock, a date (default: 2024-01-02)"
    )
    parser.add_argument(
        "--uncategorised", action="store_true", help="clear every category first (default: off)"
    )
    parser.add_argument(
        "--jobs",
        default="weekly,monthly",
        help="the bodies to run, in order (default: weekly,monthly)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (default: text)")
    args = parser.parse_args()
    now = datetime.fromisoformat(args.now).replace(tzinfo=UTC)
    with tempfile.TemporaryDirectory(prefix="agentgw-bench-jobs-") as folder:
        empty = Path(folder) / "agentgw.toml"
        empty.touch()
        config = load_config(empty, env={}, overrides={"store": {"data_dir": str(args.store)}})
        jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
        unknown = sorted(set(jobs) - {"weekly", "monthly"})
        if unknown:
            parser.error(f"--jobs: unknown job {unknown[0]!r} (weekly, monthly)")
        result = asyncio.run(run(config, now, args.uncategorised, jobs))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``agentgw memory health``: the memory health report from the shell.

``gateway/cli.py`` calls ``add_commands``; heavy imports wait inside the handler.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.config import load_config
from memory.porting.cli import add_subcommands as add_porting_commands


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    with_config: Callable[[argparse.ArgumentParser], None],
) -> None:
    memory = sub.add_parser(
        "memory", help="the memory layer: export, import, search, show, its health report"
    )
    memory_sub = memory.add_subparsers(dest="memory_command", required=True)
    add_porting_commands(memory_sub, with_config)
    health = memory_sub.add_parser(
        "health",
        help="items by tier, category and type, time since last use, growth, "
        "index sizes, pack latency",
    )
    with_config(health)
    health.add_argument(
        "--person", type=int, default=None, help="one person's items (default: everyone's)"
    )
    health.add_argument(
        "--json", action="store_true", help="print JSON instead of text (default: text)"
    )
    health.set_defaults(func=cmd_memory_health)


def cmd_memory_health(args: argparse.Namespace) -> int:
    path: Path | None = getattr(args, "config", None)
    report = asyncio.run(_report(path, args.person))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        from memory.jobs.health import render_health_text

        print(render_health_text(report))
    return 0


async def _report(path: Path | None, person_id: int | None) -> dict[str, Any]:
    from gateway.store import Store
    from memory.jobs.health import health_report

    config = load_config(path)
    async with Store(config.database_url, echo=config.store.echo) as store:
        return await health_report(
            store, config.data_dir / "memory-index", datetime.now(UTC), person_id
        )

"""``agentgw cluster status [--json]``: the processes of a cluster, their leases, their lag.

Read from the store (``cluster_members``, ``cluster_leases``) on PostgreSQL's
clock, so it works from any machine beside the running gateways; ``gateway/cli.py``
calls ``add_commands``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.config import Config, load_config
from gateway.errors import ConfigError


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    with_config: Callable[[argparse.ArgumentParser], None],
) -> None:
    cluster = sub.add_parser("cluster", help="a cluster of gateways on PostgreSQL (store.cluster)")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    status = cluster_sub.add_parser(
        "status", help="live and dead processes, their heartbeat lag, and who holds each lease"
    )
    with_config(status)
    status.add_argument(
        "--json", action="store_true", help="print JSON instead of text (default: text)"
    )
    status.set_defaults(func=cmd_status)


async def cluster_status(config: Config) -> dict[str, Any]:
    """Members (alive or dead within the last hour) and leases, as JSON-able dicts."""
    from gateway.store import Store
    from gateway.store.leases import describe, leases
    from gateway.store.members import members

    if not config.store.cluster:
        raise ConfigError("cluster status: store.cluster is off in this config")
    async with Store(config.database_url) as store:
        rows = await members(store, config.store.lease_s)
        held = await leases(store)
    return {
        "lease_s": config.store.lease_s,
        "live": sum(1 for m in rows if m.alive),
        "members": [m.as_json() for m in rows],
        "leases": describe(held),
    }


def status_text(status: dict[str, Any]) -> str:
    lines = [f"{status['live']} live process(es); a process is dead after {status['lease_s']:g} s"]
    holds: dict[str, list[str]] = {}
    for lease in status["leases"]:
        if lease["holder"] is not None:
            holds.setdefault(lease["holder"], []).append(lease["name"])
    for member in status["members"]:
        state = "alive" if member["alive"] else "DEAD "
        leased = ", ".join(holds.get(member["id"], [])) or "-"
        lines.append(
            f"  {state} {member['id']:<40} {member['listen']:<22} v{member['version']:<8} "
            f"heartbeat {member['heartbeat_lag_s']:6.1f} s ago  leases: {leased}"
        )
    lines.append("leases:")
    if not status["leases"]:
        lines.append("  (none)")
    for lease in status["leases"]:
        holder = lease["holder"] or "(free: ran out)"
        lines.append(f"  {lease['name']:<30} {holder:<40} {lease['remaining_s']:6.1f} s left")
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    path: Path | None = getattr(args, "config", None)
    status = asyncio.run(cluster_status(load_config(path)))
    out = json.dumps(status, indent=2) if args.json else status_text(status)
    sys.stdout.write(out + "\n")
    return 0

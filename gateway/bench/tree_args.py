"""The arguments of ``agentgw bench tree``, apart from the bench: the CLI imports this
at start, and the bench (memory, models) only when it runs."""

from __future__ import annotations

import argparse
from pathlib import Path


def _main(args: argparse.Namespace) -> int:
    from gateway.bench import tree_bench

    return tree_bench.main(args)


def add_parser(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tree = bench_sub.add_parser(
        "tree",
        help="the memory tree on a kept pack-bench store: full rebuild, incremental "
        "updates, pack p95 with the tree",
    )
    tree.add_argument(
        "--store",
        type=Path,
        required=True,
        help="a folder `agentgw bench pack --items N --store DIR` filled (copied, not changed)",
    )
    tree.add_argument("--adds", type=int, default=200, help="turns added one at a time")
    tree.add_argument(
        "--burst",
        type=int,
        default=10,
        help="then --adds more turns in bursts of this many, one coalesced update per "
        "burst (0: no burst phase)",
    )
    tree.add_argument("--queries", type=int, default=200, help="questions packed (tree on/off)")
    tree.add_argument("--budget", type=int, default=1000, help="pack budget in tokens")
    tree.add_argument("--json", action="store_true", help="print JSON instead of text")
    tree.set_defaults(bench_main=_main)

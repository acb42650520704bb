"""The arguments of ``agentgw bench trust``, apart from the bench: the CLI imports this
at start, and the bench (memory, models) only when it runs."""

from __future__ import annotations

import argparse


def _main(args: argparse.Namespace) -> int:
    from gateway.bench import trust_bench

    return trust_bench.main(args)


def add_parser(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    trust = bench_sub.add_parser(
        "trust", help="current facts first, outdated ones tagged, unrelated ones never ended"
    )
    trust.add_argument(
        "--repeats", type=int, default=10, help="timed passes over the questions (trust on/off)"
    )
    trust.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a [memory] setting for this run, repeatable (default: the built-in [memory])",
    )
    trust.add_argument(
        "--split",
        action="append",
        metavar="NAME",
        help=(
            "only this split's scenarios, repeatable (e.g. lockbox_4); no lessons or "
            "triggers (default: every split, with lessons and triggers)"
        ),
    )
    trust.add_argument("--json", action="store_true", help="print JSON instead of text")
    trust.set_defaults(bench_main=_main)

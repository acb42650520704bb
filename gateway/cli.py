"""The ``agentgw`` command: run, doctor, vacuum, bench."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway import __version__
from gateway.config import Config, load_config
from gateway.errors import AgentGWError, ConfigError, DatabaseInUse


def _config_from(args: argparse.Namespace) -> Config:
    overrides: dict[str, dict[str, Any]] = {}
    if getattr(args, "host", None):
        overrides.setdefault("server", {})["host"] = args.host
    if getattr(args, "port", None):
        overrides.setdefault("server", {})["port"] = args.port
    return load_config(args.config, overrides=overrides)


def cmd_run(args: argparse.Namespace) -> int:
    from gateway.app import STOP_ON_LOST_DATABASE, create_app
    from web import guard

    config = _config_from(args)
    logging.basicConfig(
        level=config.log.level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every request URL at INFO, and Bot API URLs carry the Telegram
    # bot token (and a line per long poll); its warnings still come through.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.root.level))
    app = create_app(config)
    lost: list[DatabaseInUse] = []

    def stop(error: DatabaseInUse) -> None:
        # Another gateway took the database while this one's lock was down: this one
        # stops, as on an operator's SIGTERM (turns under way finish, nothing is lost).
        lost.append(error)
        os.kill(os.getpid(), signal.SIGTERM)

    app[STOP_ON_LOST_DATABASE] = stop
    print(f"agentgw: webchat on http://{config.server.host}:{config.server.port}/", flush=True)
    web.run_app(
        app,
        host=config.server.host,
        port=config.server.port,
        print=None,
        shutdown_timeout=config.server.shutdown_grace_s,
        # ?token= values are redacted from the request lines it logs.
        access_log_class=guard.ACCESS_LOG_CLASS,
    )
    if lost:
        raise lost[0]  # exit 2, with what happened
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from gateway.doctor import run_doctor

    config = _config_from(args)
    return asyncio.run(run_doctor(config, config_path=args.config))


def cmd_vacuum(args: argparse.Namespace) -> int:
    from gateway.store.datalock import DatabaseFileLock, DataDirLock
    from gateway.store.db import sqlite_file, vacuum_sqlite

    config = _config_from(args)
    database = sqlite_file(config.database_url)
    # Not beside a running gateway, of this data directory or of another one
    # configured with the same file: it would be writing the file being rewritten.
    with DataDirLock(config.data_dir), contextlib.ExitStack() as held:
        if database is not None:  # else vacuum_sqlite says why it cannot
            held.enter_context(DatabaseFileLock(database))
        path, before, after = vacuum_sqlite(config.database_url)
    print(f"agentgw: {path}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if args.bench == "voice":
        from gateway.bench import voice_bench

        return voice_bench.main(args)
    if args.bench == "drift":
        from gateway.bench import drift_bench

        return drift_bench.main(args)
    if args.bench == "observe":
        from gateway.bench import observe_bench

        return observe_bench.main(args)
    if args.bench == "locomo":
        from gateway.bench import locomo_bench

        return locomo_bench.main(args)
    if args.bench == "sanitize":
        from gateway.bench import sanitize_bench

        return sanitize_bench.main(args)
    if args.bench == "pack":
        from gateway.bench import pack_bench

        return pack_bench.main(args)
    from gateway.bench import gateway_bench

    if args.bench == "gateway":
        return gateway_bench.main(args)
    raise ConfigError(f"unknown benchmark {args.bench!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgw", description=__doc__)
    parser.add_argument("--version", action="version", version=f"agentgw {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", type=Path, default=None, help="config file (agentgw.toml)")

    run = sub.add_parser("run", help="start the gateway")
    with_config(run)
    run.add_argument("--host", default=None)
    run.add_argument("--port", type=int, default=None)
    run.set_defaults(func=cmd_run)

    doctor = sub.add_parser("doctor", help="check config, database, brains and models")
    with_config(doctor)
    doctor.set_defaults(func=cmd_doctor)

    vacuum = sub.add_parser(
        "vacuum",
        help="give the space freed in the SQLite file back to the disk (stop the gateway first)",
    )
    with_config(vacuum)
    vacuum.set_defaults(func=cmd_vacuum)

    bench = sub.add_parser("bench", help="benchmarks that print JSON figures")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    gw = bench_sub.add_parser("gateway", help="concurrent webchat turns against the scripted brain")
    gw.add_argument("--conversations", type=int, default=100)
    gw.add_argument("--turns", type=int, default=10)
    gw.add_argument(
        "--stages",
        choices=("default", "core"),
        default="default",
        help="default: the configured stages (memory, persona loop); core: history only",
    )
    gw.add_argument(
        "--profile", metavar="PATH", help="run the gateway under cProfile, stats to PATH"
    )
    gw.add_argument(
        "--pause-ms",
        type=float,
        default=0.0,
        help="each page's pause between a reply and its next message (0: at once)",
    )
    gw.add_argument("--json", action="store_true")
    vb = bench_sub.add_parser(
        "voice", help="speech to text, text to speech and the spoken round trip (real models)"
    )
    with_config(vb)
    vb.add_argument("--runs", type=int, default=5)
    vb.add_argument("--stt-model", choices=["tiny.en", "base"], default=None)
    vb.add_argument("--threads", type=int, default=None)
    vb.add_argument("--beam-size", type=int, default=None)
    vb.add_argument("--json", action="store_true")
    drift = bench_sub.add_parser(
        "drift", help="60 scripted turns that drift: SyncScore detection and anchor recovery"
    )
    with_config(drift)
    drift.add_argument(
        "--judge",
        choices=["local", "llm"],
        default="local",
        help="llm: the LLM judge through the Anthropic SDK against the fake API",
    )
    drift.add_argument("--json", action="store_true")
    observe = bench_sub.add_parser(
        "observe", help="observer compression and pack recall with observations (LoCoMo)"
    )
    with_config(observe)
    observe.add_argument("--data", type=Path, required=True, help="folder of conv-*.json")
    observe.add_argument("--budget", type=int, default=1000, help="pack budget in tokens")
    observe.add_argument(
        "--observer",
        choices=["rules", "llm", "both"],
        default="both",
        help="llm: the LLM observer through the Anthropic SDK against the fake API",
    )
    observe.add_argument("--json", action="store_true")
    locomo = bench_sub.add_parser(
        "locomo", help="Memory Pack recall on LoCoMo conversations, with BM25 and dense baselines"
    )
    locomo.add_argument("--data", type=Path, required=True, help="folder of conv-*.json")
    locomo.add_argument("--budget", type=int, default=1000, help="pack budget in tokens")
    locomo.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="a [memory] setting for this run"
    )
    locomo.add_argument("--json", action="store_true")
    pack = bench_sub.add_parser(
        "pack", help="Memory Pack latency (query embedding included) over a synthetic store"
    )
    pack.add_argument("--items", type=int, default=10000, help="items in the synthetic store")
    pack.add_argument("--queries", type=int, default=200)
    pack.add_argument("--budget", type=int, default=1000, help="pack budget in tokens")
    pack.add_argument(
        "--store",
        type=Path,
        help="keep the synthetic store in this folder and reuse it when it already holds N "
        "items (a fill that was stopped goes on)",
    )
    pack.add_argument(
        "--back-to-back",
        action="store_true",
        help="start each pack as soon as the last returned, beside its trace write",
    )
    pack.add_argument("--json", action="store_true")
    sanitize = bench_sub.add_parser(
        "sanitize", help="prompt-injection red team, false positives on LoCoMo, speed"
    )
    sanitize.add_argument("--data", type=Path, required=True, help="folder of LoCoMo conv-*.json")
    sanitize.add_argument("--repeat", type=int, default=5, help="timed passes (best is kept)")
    sanitize.add_argument(
        "--compare", type=Path, help="another memory/sanitize.py, measured beside this one"
    )
    sanitize.add_argument("--json", action="store_true")
    bench.set_defaults(func=cmd_bench)

    from persona.cli import add_commands as add_persona_commands

    add_persona_commands(sub, with_config)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except AgentGWError as exc:
        print(f"agentgw: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

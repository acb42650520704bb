"""The ``agentgw`` command: run, doctor, bench."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.config import Config, load_config
from gateway.errors import AgentGWError, ConfigError


def _config_from(args: argparse.Namespace) -> Config:
    overrides: dict[str, dict[str, Any]] = {}
    if getattr(args, "host", None):
        overrides.setdefault("server", {})["host"] = args.host
    if getattr(args, "port", None):
        overrides.setdefault("server", {})["port"] = args.port
    return load_config(args.config, overrides=overrides)


def cmd_run(args: argparse.Namespace) -> int:
    from gateway.app import create_app

    config = _config_from(args)
    logging.basicConfig(
        level=config.log.level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    app = create_app(config)
    print(f"agentgw: webchat on http://{config.server.host}:{config.server.port}/", flush=True)
    web.run_app(
        app,
        host=config.server.host,
        port=config.server.port,
        print=None,
        shutdown_timeout=config.server.shutdown_grace_s,
    )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from gateway.doctor import run_doctor

    config = _config_from(args)
    return asyncio.run(run_doctor(config))


def cmd_bench(args: argparse.Namespace) -> int:
    from gateway.bench import gateway_bench

    if args.bench == "gateway":
        return gateway_bench.main(args)
    raise ConfigError(f"unknown benchmark {args.bench!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgw", description=__doc__)
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

    bench = sub.add_parser("bench", help="benchmarks that print JSON figures")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    gw = bench_sub.add_parser("gateway", help="concurrent webchat turns against the scripted brain")
    gw.add_argument("--conversations", type=int, default=100)
    gw.add_argument("--turns", type=int, default=10)
    gw.add_argument("--json", action="store_true")
    bench.set_defaults(func=cmd_bench)
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

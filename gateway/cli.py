"""The ``agentgw`` command line: run, doctor, vacuum, bench, judge, persona."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.bench import cluster_bench, continuity_bench, tree_args, trust_args
from gateway.config import Config, ServerConfig, VoiceConfig, load_config
from gateway.errors import AgentGWError, ConfigError

if TYPE_CHECKING:
    from gateway.startup import Announcer


def _config_from(args: argparse.Namespace) -> Config:
    overrides: dict[str, dict[str, Any]] = {}
    if getattr(args, "host", None):
        overrides.setdefault("server", {})["host"] = args.host
    if getattr(args, "port", None):
        overrides.setdefault("server", {})["port"] = args.port
    return load_config(args.config, overrides=overrides)


def cmd_run(args: argparse.Namespace) -> int:
    from gateway.startup import Announcer, bind_sockets, configure_logging, serving_url

    config = _config_from(args)
    configure_logging(config.log.level, config.log.format)
    # Before anything slow: a port in use ends the command here, in a fraction of a
    # second, and a bound one queues connections while the rest starts.
    sockets = bind_sockets(config.server.host, config.server.port)
    try:
        return _serve(
            config, sockets, Announcer(serving_url(config.server.host, config.server.port))
        )
    finally:
        for sock in sockets:
            sock.close()


def _serve(config: Config, sockets: list[socket.socket], announcer: Announcer) -> int:
    from aiohttp import web

    from gateway.app import ANNOUNCE_READY, STOP_ON_FAILED_START, STOP_ON_LOST_DATABASE, create_app
    from web import guard

    app = create_app(config)
    stopped: list[AgentGWError] = []

    def stop(error: AgentGWError) -> None:
        # Another gateway took the database while this one's lock was down, or what
        # loads in the background failed: this one stops, as on an operator's SIGTERM
        # (turns under way finish, nothing is lost).
        stopped.append(error)
        os.kill(os.getpid(), signal.SIGTERM)

    app[STOP_ON_LOST_DATABASE] = stop
    app[STOP_ON_FAILED_START] = stop
    app[ANNOUNCE_READY] = announcer.ready
    web.run_app(
        app,
        sock=sockets,
        print=announcer.serving,
        shutdown_timeout=config.server.shutdown_grace_s,
        # ?token= values are redacted from the request lines it logs.
        access_log_class=guard.ACCESS_LOG_CLASS,
    )
    if stopped:
        raise stopped[0]  # exit 2, with what happened
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
    if getattr(args, "bench_main", None) is not None:  # a bench that registers its own
        return int(args.bench_main(args))
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
    if args.bench == "start":
        from gateway.bench import start_bench

        return start_bench.main(args)
    from gateway.bench import gateway_bench

    if args.bench == "gateway":
        return gateway_bench.main(args)
    raise ConfigError(f"unknown benchmark {args.bench!r}")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default, unless the help already says it.

    ``None`` means "from the config" here; such options say so in their own words,
    so no "(default: None)" is printed.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS):
            return text
        if action.required or not (action.option_strings or action.nargs in ("?", "*")):
            return text
        shown = {True: "on", False: "off"}.get(action.default, "%(default)s")
        return f"{text} (default: {shown})"

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        # argparse measures subcommands at their parent's indent but prints them one
        # level deeper: the longest name ("working-memory") would wrap its help line.
        if action.help is not argparse.SUPPRESS and isinstance(action, argparse._SubParsersAction):
            longest = max(
                (len(self._format_action_invocation(a)) for a in action._get_subactions()),
                default=0,
            )
            deeper = longest + self._current_indent + self._indent_increment
            self._action_max_length = max(self._action_max_length, deeper)


class Parser(argparse.ArgumentParser):
    """The ``agentgw`` parser; subcommand parsers are made of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def _commands(
    action: argparse._SubParsersAction[Any],
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    # The subcommand parsers are Parsers (for the formatter); what adds commands
    # needs no more than an ArgumentParser.
    return typing.cast("argparse._SubParsersAction[argparse.ArgumentParser]", action)


def package_version() -> str:
    # Written once, in pyproject.toml; gateway/__init__.py reads it from the metadata.
    from gateway import __version__

    return __version__


def with_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="config file (default: ./agentgw.toml when it exists, else the built-in defaults)",
    )


def with_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of text (default: text)")


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="start the gateway (webchat, panel, Telegram, voice)")
    with_config(run)
    run.add_argument(
        "--host",
        default=None,
        help=f"address to listen on (default: server.host, {ServerConfig.host})",
    )
    run.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"port to listen on (default: server.port, {ServerConfig.port})",
    )
    run.set_defaults(func=cmd_run)


def _add_doctor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = sub.add_parser("doctor", help="check config, database, brains and models")
    with_config(doctor)
    doctor.set_defaults(func=cmd_doctor)


def _add_vacuum(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    vacuum = sub.add_parser(
        "vacuum",
        help="give the space freed in the SQLite file back to the disk (stop the gateway first)",
    )
    with_config(vacuum)
    vacuum.set_defaults(func=cmd_vacuum)


def _add_bench_gateway(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gw = bench_sub.add_parser("gateway", help="concurrent webchat turns against the scripted brain")
    gw.add_argument("--conversations", type=int, default=100, help="webchat pages at once")
    gw.add_argument("--turns", type=int, default=10, help="messages each page sends")
    gw.add_argument(
        "--stages",
        choices=("default", "core"),
        default="default",
        help="default: the configured stages (memory, persona loop); core: history only",
    )
    gw.add_argument(
        "--profile",
        metavar="PATH",
        help="run the gateway under cProfile, stats to PATH (default: no profile)",
    )
    gw.add_argument(
        "--pause-ms",
        type=float,
        default=0.0,
        help="each page's pause between a reply and its next message (0: at once)",
    )
    gw.add_argument(
        "--burst",
        type=int,
        default=0,
        metavar="N",
        help="instead: N new pages send their first message at the same moment (default: 0, off)",
    )
    gw.add_argument(
        "--new-people",
        type=int,
        metavar="N",
        help="instead: N one-message sessions, each a new person; the gateway's RSS "
        "before and after, and MB per person (default: off)",
    )
    gw.add_argument(
        "--index-cache-mb",
        type=float,
        metavar="MB",
        help="with --new-people: the gateway's memory.index_cache_mb for the run "
        "(default: the configured one)",
    )
    gw.add_argument(
        "--tree",
        choices=("on", "off"),
        default=None,
        help="the memory tree (memory.tree) on or off (default: the configured one)",
    )
    gw.add_argument(
        "--tree-window-s",
        type=float,
        default=None,
        metavar="S",
        help="memory.tree_update_window_s for the run; 0 places each person's new items "
        "as soon as the tree's worker is free, inside the measured CPU (default: configured)",
    )
    with_json(gw)


def _add_bench_voice(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    vb = bench_sub.add_parser(
        "voice", help="speech to text, text to speech and the spoken round trip (real models)"
    )
    with_config(vb)
    vb.add_argument("--runs", type=int, default=5, help="timed runs of each step")
    vb.add_argument(
        "--stt-model",
        choices=["tiny.en", "base"],
        default=None,
        help=f"Whisper model (default: voice.stt_model, {VoiceConfig.stt_model})",
    )
    vb.add_argument(
        "--threads",
        type=int,
        default=None,
        help=f"model threads (default: voice.threads, {VoiceConfig.threads})",
    )
    vb.add_argument(
        "--beam-size",
        type=int,
        default=None,
        help=f"Whisper beam, 1 is greedy (default: voice.beam_size, {VoiceConfig.beam_size})",
    )
    with_json(vb)


def _add_bench_drift(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    drift.add_argument("--onset", type=int, help="turn the drift pressure starts (default 20)")
    drift.add_argument("--pressure-until", type=int, help="last turn of pressure (default 44)")
    drift.add_argument("--pressure", type=float, help="drift added per turn (default 0.15)")
    drift.add_argument(
        "--variants", action="store_true", help="compare the drift loop's variants in one run"
    )
    with_json(drift)


def _add_bench_observe(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    with_json(observe)


def _add_bench_locomo(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    locomo = bench_sub.add_parser(
        "locomo", help="Memory Pack recall on LoCoMo conversations, with BM25 and dense baselines"
    )
    locomo.add_argument("--data", type=Path, required=True, help="folder of conv-*.json")
    locomo.add_argument("--budget", type=int, default=1000, help="pack budget in tokens")
    locomo.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a [memory] setting for this run, repeatable (default: the built-in [memory])",
    )
    locomo.add_argument("--tree", choices=("on", "off"), default="on", help="the memory tree")
    with_json(locomo)


def _add_bench_pack(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pack = bench_sub.add_parser(
        "pack", help="Memory Pack latency (query embedding included) over a synthetic store"
    )
    pack.add_argument("--items", type=int, default=10000, help="items in the synthetic store")
    pack.add_argument("--queries", type=int, default=200, help="packs timed")
    pack.add_argument("--budget", type=int, default=1000, help="pack budget in tokens")
    pack.add_argument(
        "--store",
        type=Path,
        help="keep the synthetic store in this folder and reuse it when it already holds N "
        "items, a fill that was stopped goes on (default: a temporary folder)",
    )
    pack.add_argument(
        "--compare-trust",
        action="store_true",
        help="also time every question with and without the trust pass, alternating",
    )
    pack.add_argument(
        "--trust-repeats", type=int, default=1, help="passes of --compare-trust (median ratio)"
    )
    pack.add_argument(
        "--slot-items",
        type=int,
        default=0,
        help="add this many statements of one's own state (slots, frames, life events) to "
        "the store once, for the trust pass to work on",
    )
    pack.add_argument(
        "--back-to-back",
        action="store_true",
        help="start each pack as soon as the last returned, beside its trace write",
    )
    with_json(pack)


def _add_bench_sanitize(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sanitize = bench_sub.add_parser(
        "sanitize", help="prompt-injection red team, false positives on LoCoMo, speed"
    )
    sanitize.add_argument("--data", type=Path, required=True, help="folder of LoCoMo conv-*.json")
    sanitize.add_argument("--repeat", type=int, default=5, help="timed passes (best is kept)")
    sanitize.add_argument(
        "--compare",
        type=Path,
        help="another memory/sanitize.py, measured beside this one (default: none)",
    )
    with_json(sanitize)


def _add_bench_start(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    start = bench_sub.add_parser(
        "start", help="a restart's time to an acknowledged webchat message (real gateway)"
    )
    start.add_argument(
        "--items", type=int, default=0, help="memory items in the store first (0: an empty one)"
    )
    start.add_argument("--runs", type=int, default=5, help="timed starts")
    start.add_argument(
        "--pythonpath",
        metavar="PATH",
        help="run the gateway of the checkout in PATH (default: this one)",
    )
    start.add_argument(
        "--against",
        metavar="PATH",
        help="alternate each run with the gateway of the checkout in PATH, before/after "
        "(default: none)",
    )
    with_json(start)


DESCRIPTION = """\
agentgw: a self-hosted chat gateway with memory (webchat, Telegram, voice).

Start with "agentgw run", then open http://127.0.0.1:8080/ (the panel is at /panel).
"agentgw COMMAND --help" shows a command's options and their defaults."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="agentgw", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = _commands(
        parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    )
    _add_run(sub)
    _add_doctor(sub)
    _add_vacuum(sub)

    bench = sub.add_parser("bench", help="benchmarks that print figures (text or JSON)")
    bench_sub = _commands(bench.add_subparsers(dest="bench", required=True))
    _add_bench_gateway(bench_sub)
    _add_bench_voice(bench_sub)
    _add_bench_drift(bench_sub)
    _add_bench_observe(bench_sub)
    _add_bench_locomo(bench_sub)
    _add_bench_pack(bench_sub)
    _add_bench_sanitize(bench_sub)
    _add_bench_start(bench_sub)
    trust_args.add_parser(bench_sub)
    continuity_bench.add_parser(bench_sub)
    tree_args.add_parser(bench_sub)
    cluster_bench.add_parser(bench_sub)
    bench.set_defaults(func=cmd_bench)
    from gateway.bench.upkeep_bench import add_parser as add_upkeep_bench

    add_upkeep_bench(bench_sub)

    from persona.cli import add_commands as add_persona_commands

    add_persona_commands(sub, with_config)
    from persona.lessons.cli import add_commands as add_lesson_commands

    add_lesson_commands(sub, with_config)
    from gateway.upkeep_cli import job_parts
    from memory.jobs.cli import add_commands as add_upkeep_commands

    add_upkeep_commands(sub, with_config, job_parts)
    from memory.cli import add_commands as add_memory_commands

    add_memory_commands(sub, with_config)
    from memory.continuity.cli import add_commands as add_continuity_commands

    add_continuity_commands(sub, with_config)
    from memory.continuity.handoff_cli import add_commands as add_handoff_commands

    add_handoff_commands(sub, with_config)
    from gateway.cluster_cli import add_commands as add_cluster_commands

    add_cluster_commands(sub, with_config)
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

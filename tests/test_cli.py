"""The ``agentgw`` command: help, and bad configuration reported in plain words."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text

from gateway.cli import build_parser, main
from gateway.store import Store
from memory.models import MemoryTrace
from tests.conftest import database_at

AGENTGW = Path(sys.executable).parent / "agentgw"


@pytest.fixture(autouse=True)
def _no_agentgw_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("AGENTGW_"):
            monkeypatch.delenv(name)


def run_command(
    *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGW_")}
    return subprocess.run(
        [str(AGENTGW), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_console_script_help_lists_the_commands() -> None:
    result = run_command("--help")
    assert result.returncode == 0, result.stderr
    for command in ("run", "doctor", "vacuum", "bench"):
        assert command in result.stdout


def test_run_help_lists_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--config", "--host", "--port"):
        assert flag in out


def test_bench_gateway_help_lists_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "gateway", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--conversations", "--turns", "--json"):
        assert flag in out


def every_parser(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """The parser and every subcommand's, however deep (argparse has no public walk)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from every_parser(child, (*path, name))


def options_of(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    skipped = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)
    return [action for action in parser._actions if not isinstance(action, skipped)]


COMMAND_OPTIONS = [
    pytest.param(
        parser, action, id=" ".join(path) + " " + (action.option_strings or [action.dest])[0]
    )
    for path, parser in every_parser(build_parser())
    for action in options_of(parser)
]


def test_the_walk_sees_the_nested_commands() -> None:
    paths = {path for path, _parser in every_parser(build_parser())}
    assert {("bench", "pack"), ("persona", "show"), ("judge", "calibrate")} <= paths
    assert len(COMMAND_OPTIONS) > 30


@pytest.mark.parametrize(("parser", "action"), COMMAND_OPTIONS)
def test_every_option_has_help_that_shows_its_default(
    parser: argparse.ArgumentParser, action: argparse.Action
) -> None:
    assert action.help, f"{parser.prog} {action.dest}: no help text"
    shown = parser._get_formatter()._expand_help(action)
    takes_a_default = action.option_strings or action.nargs in ("?", "*")
    if takes_a_default and not action.required:
        assert "default" in shown, f"{parser.prog} {action.dest}: default not shown: {shown!r}"
    # The help a person reads is the formatted page: the option is on it, with its text.
    assert shown.split(" (default")[0] in " ".join(parser.format_help().split())


def test_top_level_help_lists_every_command_without_backticks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(commands.choices) >= {"run", "doctor", "vacuum", "bench", "judge", "persona"}
    for name, choice in zip(commands.choices, commands._choices_actions, strict=True):
        assert choice.help, f"command {name} has no help"
        listed = rf"^ +{name} +{re.escape(choice.help[:20])}"
        assert re.search(listed, out, re.MULTILINE), f"command {name} is not listed"
    assert "`" not in out


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentgw {importlib.metadata.version('agentgw')}"


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2
    assert "usage" in capsys.readouterr().err


def test_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    """Through the real console script: the exit status and stderr a person sees."""
    config = tmp_path / "agentgw.toml"
    config.write_text('[server]\nport = "eighty"\n', encoding="utf-8")
    result = run_command("run", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 2
    assert "server.port" in result.stderr
    assert "Traceback" not in result.stderr
    # It never started serving.
    assert "webchat on" not in result.stdout
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("text", "args", "named"),
    [
        ("[server]\nbogus = 1\n", [], "server.bogus"),
        ("[nosuch]\nx = 1\n", [], "nosuch"),
        ('[brain]\nkind = "gpt"\n', [], "brain.kind"),
        ("", ["--host", "0.0.0.0"], "server.access_token"),
        ("", ["--port", "70000"], "server.port"),
        ('anthropic_api_key = "sk-x"\n', [], "anthropic_api_key"),
    ],
)
def test_run_refuses_bad_config_with_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    args: list[str],
    named: str,
) -> None:
    config = tmp_path / "agentgw.toml"
    config.write_text(text, encoding="utf-8")
    assert main(["run", "--config", str(config), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentgw: ")
    assert named in err


def test_missing_config_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--config", str(tmp_path / "absent.toml")]) == 2
    assert "absent.toml" in capsys.readouterr().err


def test_bench_gateway_refuses_zero_conversations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "gateway", "--conversations", "0", "--turns", "1"]) == 2
    assert "--conversations" in capsys.readouterr().err


def test_bench_gateway_prints_its_figures_as_json() -> None:
    """A tiny real run: the gateway as a subprocess, real WebSockets, the store read back."""
    result = run_command("bench", "gateway", "--conversations", "3", "--turns", "2", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert set(figures) == {
        "stages",
        "memory",
        "context_stages",
        "after_turn_stages",
        "conversations",
        "pause_ms",
        "turns",
        "turns_per_s",
        "errors",
        "overhead_p50_ms",
        "overhead_p95_ms",
        "prepare_p95_ms",
        "deliver_p95_ms",
        "wall_s",
        "rtt_p50_ms",
        "rtt_p95_ms",
        "cpu_s",
        "cpu_ms_per_turn",
        "children_cpu_s",
        "other_cores",
    }
    assert (figures["conversations"], figures["turns"], figures["errors"]) == (3, 6, 0)
    # No upkeep job ran in a child process; the rest of the machine is 0 cores or more.
    assert figures["children_cpu_s"] == 0.0
    assert figures["other_cores"] >= 0.0
    # The default stages ran, as the gateway itself reports them.
    assert figures["stages"] == "default"
    # No --tree or --tree-window-s: the run overrides no [memory] setting.
    assert figures["memory"] == {}
    assert {"memory", "history", "anchor"} <= set(figures["context_stages"])
    assert "memory-ingest" in figures["after_turn_stages"]
    # Figures read from the turns table: positive, and the parts within the whole.
    assert 0 < figures["overhead_p50_ms"] <= figures["overhead_p95_ms"]
    assert figures["prepare_p95_ms"] > 0
    assert figures["deliver_p95_ms"] > 0
    assert figures["turns_per_s"] > 0
    # The gateway's own CPU time: it did work for the turns.
    assert figures["cpu_ms_per_turn"] > 0


def test_bench_gateway_core_stages_leave_memory_and_persona_loop_out() -> None:
    result = run_command(
        "bench", "gateway", "--conversations", "2", "--turns", "2", "--stages", "core", "--json"
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["stages"] == "core"
    assert figures["context_stages"] == ["persona", "clock", "history"]
    assert figures["after_turn_stages"] == []
    assert (figures["turns"], figures["errors"]) == (4, 0)


def test_bench_gateway_burst_prints_its_figures_as_json() -> None:
    """A tiny real burst: new pages, one first message each, all sent at once."""
    result = run_command("bench", "gateway", "--burst", "6", "--stages", "core", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert (figures["burst"], figures["replied"], figures["errors"]) == (6, 6, 0)
    assert figures["error_codes"] == {}
    assert 0 < figures["ack_p50_ms"] <= figures["ack_p95_ms"]
    assert figures["ack_p95_ms"] <= figures["reply_p95_ms"]


def test_bench_pack_fills_a_store_then_reuses_it(tmp_path: Path) -> None:
    """A tiny real run: the bundled model, a synthetic store, timed packs; then again
    on the same store, which is reused (no ingest) with its full-text index loaded."""
    store = tmp_path / "store"
    args = ("bench", "pack", "--items", "300", "--queries", "5", "--store", str(store), "--json")
    runs = []
    for _ in range(2):
        # The first run may export the ONNX query model into the cache (once).
        result = run_command(*args, timeout=600)
        assert result.returncode == 0, result.stderr
        runs.append(json.loads(result.stdout))
        # Not a terminal: no progress bar; the verdict ends stderr, off the JSON.
        assert "\r" not in result.stderr
        verdict = result.stderr.splitlines()[-1]
        assert re.fullmatch(
            r"(PASS|MISS)  pack p95 at 300 items <= 25 ms \(measured: .+ ms\)", verdict
        )
    filled, reused = runs
    for figures in runs:
        assert (figures["items"], figures["queries"]) == (300, 5)
        assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"]
        assert 0 < figures["trace_write_p50_ms"] <= figures["trace_write_p95_ms"]
        assert figures["embed_alone_p50_ms"] > 0
        assert figures["pack_tokens_mean"] > 0
        assert set(figures["steps_p50_ms"]) == {
            "embed_ms",
            "search_ms",
            "candidates_ms",
            "pack_ms",
        }
    assert (filled["store_reused"], reused["store_reused"]) == (False, True)
    assert filled["ingest_per_s"] > 0
    assert reused["ingest_per_s"] is None
    assert list((store / "memory-index").glob("person-*.lexical.npz"))


def test_vacuum_gives_back_what_compressing_old_traces_freed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    database = data / "agentgw.db"
    # A store from before 0010, its traces plain JSON (~40 KB each in a real store).
    candidates = json.dumps(
        [{"id": n, "signals": {"similarity": n / 997}, "reason": "budget"} for n in range(300)]
    )
    with database_at(database, "0009") as connection:
        for _ in range(60):
            connection.execute(
                text(
                    "INSERT INTO memory_traces (person_id, created_at, query, budget_tokens, "
                    "used_tokens, candidates, kept_ids, filtered, notes) VALUES (1, "
                    "'2024-01-01 00:00:00', 'q', 0, 0, :candidates, '[]', '[]', '{}')"
                ),
                {"candidates": candidates},
            )
    config = tmp_path / "agentgw.toml"
    config.write_text(f'[store]\ndata_dir = "{data}"\n', encoding="utf-8")

    async def open_and_read() -> list[list[dict[str, object]]]:
        async with Store(f"sqlite+aiosqlite:///{database}") as store, store.reader() as session:
            return list((await session.scalars(select(MemoryTrace.candidates))).all())

    assert asyncio.run(open_and_read()) == [json.loads(candidates)] * 60  # 0010 ran
    size = database.stat().st_size
    assert main(["vacuum", "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    assert f"{database}: " in printed
    # Most of the plain JSON's bytes come back (measured against what was written, not
    # against the file: the schema's own size grows with every migration).
    assert size - database.stat().st_size > 0.6 * 60 * len(candidates)
    assert asyncio.run(open_and_read()) == [json.loads(candidates)] * 60


def test_vacuum_refuses_a_database_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agentgw.toml"
    config.write_text(f'[store]\ndata_dir = "{tmp_path / "none"}"\n', encoding="utf-8")
    assert main(["vacuum", "--config", str(config)]) == 2
    assert "no SQLite database file" in capsys.readouterr().err

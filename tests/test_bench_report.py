"""What a bench shows while it runs (a bar, only on a terminal) and how it ends
(PASS / MISS per target, last, with the exit status unchanged)."""

from __future__ import annotations

import argparse
import fcntl
import io
import os
import struct
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest

from gateway.bench import drift_bench, gateway_bench
from gateway.bench.report import at_most, progress
from gateway.config import load_config
from gateway.errors import ConfigError


@pytest.fixture
def terminal() -> Iterator[tuple[TextIO, int]]:
    """A pseudo-terminal 100 columns wide: the writing end as a text file, and the
    fd that reads what was drawn."""
    reader, writer = os.openpty()
    fcntl.ioctl(writer, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    os.set_blocking(reader, False)
    with os.fdopen(writer, "w") as stream:
        yield stream, reader
    os.close(reader)


def drawn(reader: int) -> str:
    try:
        return os.read(reader, 65536).decode(errors="replace")
    except BlockingIOError:
        return ""


def test_the_bar_is_drawn_on_a_terminal(terminal: tuple[TextIO, int]) -> None:
    stream, reader = terminal
    with progress(4, "packs", "pack", file=stream) as bar:
        for _ in range(4):
            bar.update()
    shown = drawn(reader)
    assert "packs:" in shown
    assert "/4 [" in shown


def test_the_bar_is_off_when_not_a_terminal() -> None:
    piped = io.StringIO()
    with progress(4, "packs", "pack", file=piped) as bar:
        for _ in range(4):
            bar.update()
    assert piped.getvalue() == ""


def test_a_target_says_pass_or_miss_with_the_figure() -> None:
    assert at_most("pack p95", 24.5, 25, "ms").line() == (
        "PASS  pack p95 <= 25 ms (measured: 24.5 ms)"
    )
    assert at_most("pack p95", 25.01, 25, "ms").line() == (
        "MISS  pack p95 <= 25 ms (measured: 25.01 ms)"
    )
    assert not at_most("round trip", None, 1, "s").met


def drift_result(ours_recovered: int | None) -> dict[str, Any]:
    def run(name: str, recovered: int | None, mean: float) -> dict[str, Any]:
        return {
            "judge": "local",
            "turns": [
                {"turn": n, "drift": 0.0, "score": 0.9, "ewma": 0.9, "tier": "ok", "action": None}
                for n in range(3)
            ],
            "summary": {
                "onset_turn": 20,
                "detected_at_turn": 23,
                "recovered_after_turns": recovered,
                "false_alarms": 0,
                "mean_drift_after_onset": mean,
                "name": name,
            },
        }

    return {
        "judge_kind": "local",
        "with_anchors": run("ours", ours_recovered, 0.2),
        "control_no_anchors": run("control", None, 0.9),
    }


@pytest.mark.parametrize("recovered", [6, None])
def test_bench_drift_prints_its_summaries_then_the_verdicts_last(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    recovered: int | None,
) -> None:
    async def canned(config: Any, kind: str, script: Any = None) -> dict[str, Any]:
        return drift_result(recovered)

    monkeypatch.setattr(drift_bench, "run", canned)
    args = argparse.Namespace(config=None, judge="local", json=False)
    assert drift_bench.main(args) == 0  # a miss does not change the exit status
    lines = capsys.readouterr().out.splitlines()
    last_turn = max(i for i, line in enumerate(lines) if line.startswith("turn "))
    summaries = [i for i, line in enumerate(lines) if line.endswith(": summary")]
    verdicts = [i for i, line in enumerate(lines) if line.startswith(("PASS", "MISS"))]
    assert len(summaries) == 2
    assert last_turn < summaries[0]
    assert len(verdicts) == 4
    assert verdicts == list(range(len(lines) - 4, len(lines)))
    recovery = next(lines[i] for i in verdicts if "back in the ok tier" in lines[i])
    assert recovery.startswith("PASS" if recovered else "MISS")


def test_with_json_the_verdicts_go_to_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def canned(config: Any, kind: str, script: Any = None) -> dict[str, Any]:
        return drift_result(6)

    monkeypatch.setattr(drift_bench, "run", canned)
    drift_bench.main(argparse.Namespace(config=None, judge="local", json=True))
    out, err = capsys.readouterr()
    assert out.lstrip().startswith("{")
    assert "PASS" not in out
    assert err.splitlines()[-1].startswith(("PASS", "MISS"))


@pytest.mark.parametrize(("errors", "status"), [(0, 0), (2, 1)])
def test_bench_gateway_misses_leave_its_exit_status_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    errors: int,
    status: int,
) -> None:
    async def canned(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"overhead_p95_ms": 80.0, "errors": errors, "problems": []}

    monkeypatch.setattr(gateway_bench, "run", canned)
    args = argparse.Namespace(conversations=1, turns=1, json=False)
    assert gateway_bench.main(args) == status  # exit 1 only for failed turns, as before
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == "MISS  gateway overhead p95 <= 25 ms (measured: 80 ms)"
    assert lines[-1].startswith("PASS" if errors == 0 else "MISS")


def test_the_gateway_bench_reads_a_process_cpu_time_from_proc() -> None:
    # The bench's cpu_ms_per_turn comes from /proc/<pid>/stat; for this process it must
    # agree with the interpreter's own count (ticks are 10 ms).
    total = 0
    for i in range(2_000_000):
        total += i
    assert abs(gateway_bench.cpu_seconds(os.getpid()) - time.process_time()) < 0.05


def test_bench_gateway_sets_the_tree_and_its_window_for_the_run(tmp_path: Path) -> None:
    """``--tree`` and ``--tree-window-s`` reach the gateway's config; with the core
    stages (no memory) they are refused, not dropped."""
    args = argparse.Namespace(tree="off", tree_window_s=0.0)
    memory = gateway_bench.memory_settings(args)
    text = gateway_bench.bench_config_text(tmp_path / "data", 8123, 10, "default", memory)
    path = tmp_path / "agentgw.toml"
    path.write_text(text, encoding="utf-8")
    config = load_config(path, env={})
    assert config.memory.tree is False
    assert config.memory.tree_update_window_s == 0.0
    args = argparse.Namespace(tree="on", tree_window_s=None)
    assert gateway_bench.memory_settings(args) == {"tree": True}
    with pytest.raises(ConfigError, match="--stages default"):
        gateway_bench.bench_config_text(tmp_path / "data", 8123, 10, "core", memory)
    with pytest.raises(ConfigError, match="0 or more"):
        gateway_bench.memory_settings(argparse.Namespace(tree=None, tree_window_s=-1.0))

"""``agentgw persona ...`` and ``agentgw judge calibrate`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main
from persona.calibrate import pearson


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "agentgw.toml"
    path.write_text(f'[store]\ndata_dir = "{tmp_path / "data"}"\n', encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_persona_rules_versions_diff_and_rollback(
    config_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    config = str(config_file)
    versions = json.loads(run(capsys, "persona", "versions", "--config", config, "--json"))
    assert [v["version"] for v in versions] == [1]

    # A rule is proposed (as the observer does), confirmed from the shell.
    import asyncio

    from gateway.config import load_config
    from gateway.store import Store
    from persona.state import PersonaBook, PersonaState

    async def propose() -> int:
        async with Store(load_config(config_file, env={}).database_url) as store:
            book = PersonaBook(store, PersonaState(traits={}))
            return (await book.propose_rule("Never use emojis")).rule_id

    rule_id = asyncio.run(propose())
    listed = run(capsys, "persona", "rules", "--config", config, "--status", "proposed")
    assert f"#{rule_id}" in listed
    assert "Never use emojis" in listed
    assert "version 2" in run(capsys, "persona", "confirm", str(rule_id), "--config", config)
    diff = run(capsys, "persona", "diff", "1", "2", "--config", config)
    assert "+ hard rule #1 'Never use emojis'" in diff
    assert "now at version 3" in run(capsys, "persona", "rollback", "1", "--config", config)
    shown = json.loads(run(capsys, "persona", "show", "--config", config, "--json"))
    assert shown["version"] == 3
    assert shown["state"]["hard_rules"] == []
    assert main(["persona", "rollback", "42", "--config", config]) == 2  # clear error, no trace
    assert "does not exist" in capsys.readouterr().err


def test_judge_calibrate_reports_correlation_per_dimension(
    tmp_path: Path, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = "Short answer: yes. Move it to Thursday and tell Sam."
    bad = (
        "Great question!!! I'm absolutely thrilled to help! 🎉 Furthermore, it is important to "
        "note that there are numerous factors to consider. Moreover, each factor shall be "
        "examined comprehensively in accordance with best practices."
    )
    middle = "Certainly! I think maybe Thursday could perhaps work, depending on various factors."
    lines = []
    for reply, value in ((good, 0.9), (bad, 0.1), (middle, 0.5)) * 2:
        lines.append(
            json.dumps(
                {
                    "reply": reply,
                    "user_message": "Can we move the meeting?",
                    "hard_rules": ["Never use emojis"],
                    "ratings": {
                        "voice": value,
                        "style": value,
                        "constraints": 0.0 if "🎉" in reply else 1.0,
                    },
                }
            )
        )
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(lines), encoding="utf-8")
    out = run(
        capsys,
        "judge",
        "calibrate",
        "--labels",
        str(labels),
        "--config",
        str(config_file),
        "--judge",
        "local",
        "--json",
    )
    result = json.loads(out)
    assert result["judge"] == "local"
    assert result["replies"] == 6
    dims = result["dimensions"]
    assert dims["voice"]["n"] == 6
    assert dims["voice"]["pearson_r"] > 0.7
    assert dims["constraints"]["pearson_r"] == pytest.approx(1.0)
    # Not rated: no correlation, so below the bar by definition.
    assert dims["relational"]["n"] == 0
    assert "relational" in result["below_bar"]
    assert "voice" not in result["below_bar"]

    labels.write_text('{"reply": "x", "ratings": {"tone": 0.5}}\n', encoding="utf-8")
    assert main(["judge", "calibrate", "--labels", str(labels), "--config", str(config_file)]) == 2
    assert "unknown dimensions" in capsys.readouterr().err


def test_pearson_needs_variation() -> None:
    assert pearson([0.1, 0.5, 0.9], [0.2, 0.4, 0.8]) == pytest.approx(0.982, abs=1e-3)
    assert pearson([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]) is None
    assert pearson([0.1, 0.2], [0.1, 0.2]) is None

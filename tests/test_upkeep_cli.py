"""``agentgw upkeep status`` and ``agentgw upkeep run``: text and JSON, a dry run
that changes nothing, unknown jobs and a running gateway refused clearly."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import load_config
from gateway.store import Store
from gateway.store.datalock import DataDirLock
from gateway.store.repo import resolve_address, store_inbound
from persona.observation.backlog import conversations_behind


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "agentgw.toml"
    path.write_text(
        f'[store]\ndata_dir = "{tmp_path / "data"}"\n[memory]\nembedder = "none"\n'
        '[agent]\ntimezone = "Europe/Lisbon"\n',
        encoding="utf-8",
    )
    return path


def test_status_then_run_then_status(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upkeep", "status", "--json", "--config", str(config_file)]) == 0
    jobs = {j["name"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}
    assert list(jobs) == ["hourly", "nightly", "weekly", "monthly"]
    assert jobs["hourly"]["due"] is True
    assert jobs["hourly"]["last_run_at"] is None
    # Next due in the agent's zone, with its offset.
    assert jobs["nightly"]["next_due"].endswith(("+00:00", "+01:00"))
    assert "T02:00:00" in jobs["nightly"]["next_due"]

    assert main(["upkeep", "run", "hourly", "--dry-run", "--config", str(config_file)]) == 0
    assert "upkeep hourly: ok" in capsys.readouterr().out
    assert main(["upkeep", "status", "--json", "--config", str(config_file)]) == 0
    hourly = json.loads(capsys.readouterr().out)["jobs"][0]
    assert hourly["last_run_at"] is None, "a dry run does not count as the job run"

    assert main(["upkeep", "run", "hourly", "--json", "--config", str(config_file)]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["status"] == "ok"
    assert run["counts"] == {"items_seen": 0, "archived": 0, "traces_deleted": 0}
    assert main(["upkeep", "status", "--config", str(config_file)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["job", "schedule", "last", "run", "status", "next", "due", "state"]
    hourly_row = table[1].split()
    assert hourly_row[0] == "hourly"
    assert hourly_row[-1] == "ok"
    assert "never" not in hourly_row


def test_unknown_jobs_and_a_running_gateway_are_clear_errors(
    config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["upkeep", "run", "fortnightly", "--config", str(config_file)]) == 2
    assert "upkeep job 'fortnightly' is not a job" in capsys.readouterr().err
    with DataDirLock(tmp_path / "data"):
        assert main(["upkeep", "run", "hourly", "--config", str(config_file)]) == 2
    said = capsys.readouterr().err
    assert "in use by another agentgw" in said
    assert "Upkeep page" in said


def test_a_nightly_run_from_the_shell_reads_the_observer_s_backlog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command line's nightly has the observer as its extractor, as the gateway's
    does (gateway/upkeep_cli.py): the unread messages are read and counted."""
    path = tmp_path / "agentgw.toml"
    path.write_text(
        f'[store]\ndata_dir = "{tmp_path / "data"}"\n[memory]\nembedder = "none"\n'
        # The observer's own threshold is never reached: only the catch-up reads them.
        '[observe]\nobserver = "rules"\nobserver_tokens = 1000000\n',
        encoding="utf-8",
    )
    config = load_config(path)

    async def seed() -> None:
        async with Store(config.database_url) as store:
            address = await resolve_address(store, "webchat", "shell-1", display_name="Sam")
            for n, words in enumerate(
                [
                    "I adopted a grey cat called Miso last spring.",
                    "My sister Ana lives in Lisbon and works as a nurse.",
                ]
            ):
                await store_inbound(store, address, words, datetime.now(UTC), f"c{n}")

    async def behind() -> list[tuple[int, int]]:
        async with Store(config.database_url) as store:
            return await conversations_behind(store, None)

    asyncio.run(seed())
    assert asyncio.run(behind())
    assert main(["upkeep", "run", "nightly", "--json", "--config", str(path)]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["status"] == "ok"
    assert run["counts"]["extracted"] == 2
    assert asyncio.run(behind()) == []

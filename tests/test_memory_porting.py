"""Export → import into an empty store → export: byte-identical, on a real store with
pins, supersessions, forgotten items, lessons, turns and traces, with the real embedder.
And ``agentgw memory search|show`` in a process of their own beside the store."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select, update

from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config, load_config
from gateway.store import Store
from gateway.store.models import Conversation, Identity, Message, MessageRole, Person, Turn
from memory.embed import SentenceEmbedder
from memory.errors import PortingError
from memory.models import MemoryItem, MemoryTrace
from memory.porting import markdown
from memory.porting.export import export_person
from memory.porting.importer import run_import
from memory.service import Episode, MemoryService, PackRequest
from memory.types import ItemStatus, ItemType
from persona.models import Lesson, LessonOrigin
from tests.conftest import RunningGateway, make_config, start_gateway
from tests.test_lessons_turns import session
from tests.test_memory_models import embedder  # noqa: F401 (the session's model, a fixture)
from tests.test_memory_postgres import PG_BINARIES, pg_store, postgres
from tests.test_persona_loop import say

pytestmark = pytest.mark.slow
__all__ = ["pg_store", "postgres"]

T0 = datetime(2026, 3, 4, 9, 0, tzinfo=UTC)


async def populate(store: Store, config: Config, model: SentenceEmbedder) -> int:
    """A person with turns, episodes, a supersession, a forgotten item, a pin, an event,
    lessons (theirs and a global one) and a pack trace."""
    async with store.session() as s:
        person = Person(display_name="Sam", created_at=T0, timezone="Europe/Paris")
        s.add(person)
        await s.flush()
        identity = Identity(person_id=person.id, channel="webchat", external_id="sam-1")
        s.add(identity)
        await s.flush()
        conv = Conversation(person_id=person.id, identity_id=identity.id, channel="webchat")
        s.add(conv)
        await s.flush()
        said = [
            ("user", "I moved to Lyon last month and I love the markets.", T0),
            ("assistant", "Lyon has wonderful markets! Which one is your favourite?", T0),
            ("user", "The one at Croix-Rousse, every Sunday morning.", T0 + timedelta(days=1)),
        ]
        messages = []
        for role, text, at in said:
            m = Message(
                conversation_id=conv.id,
                person_id=person.id,
                role=MessageRole(role),
                channel="webchat",
                text=text,
                created_at=at,
            )
            s.add(m)
            await s.flush()
            messages.append(m)
        turn = Turn(
            conversation_id=conv.id,
            inbound_message_id=messages[0].id,
            reply_message_id=messages[1].id,
            received_at=T0,
        )
        s.add(turn)
        await s.flush()
        person_id, conv_id, turn_id = person.id, conv.id, turn.id
        message_rows = [(m.id, m.role.value, m.text, m.created_at) for m in messages]
    service = await MemoryService.start(store, config, embedder=model)
    try:
        await service.ingest(
            [
                Episode(
                    person_id=person_id,
                    text=text,
                    at=at,
                    role=role,
                    speaker="Sam" if role == "user" else "Ava",
                    conversation_id=conv_id,
                    message_id=mid,
                    channel="webchat",
                    source_ref=f"m{mid}",
                )
                for mid, role, text, at in message_rows
            ]
        )
        await service.remember(person_id, "I live in Lyon now", at=T0)
        await service.remember(person_id, "my favourite colour is blue", at=T0 - timedelta(days=30))
        newer = await service.remember(person_id, "my favourite colour is green", at=T0)
        assert newer.superseded, "green must supersede blue"
        await service.remember(person_id, "I love green tea", at=T0)
        await service.remember(person_id, "My sister is called Ada", at=T0)
        await service.remember(
            person_id,
            "dentist appointment on 12 March",
            at=T0,
            item_type=ItemType.EVENT,
        )
        forgotten = await service.forget(person_id, "green tea", at=T0 + timedelta(hours=1))
        assert forgotten.items
        await service.build_pack(
            PackRequest(person_id=person_id, text="Where do I live?", at=T0, turn_id=turn_id)
        )
        await service.traces_saved()
    finally:
        await service.aclose()
    async with store.session() as s:
        await s.execute(
            update(MemoryItem)
            .where(MemoryItem.content == "My sister is called Ada")
            .values(pinned=True)
        )
        for who, text in ((person_id, "Call me Sam, never Samuel."), (None, "No emojis.")):
            await s.execute(
                insert(Lesson).values(
                    person_id=who,
                    text=text,
                    origin=LessonOrigin.MANUAL,
                    author="cli",
                    created_at=T0,
                    updated_at=T0,
                )
            )
    return person_id


def files_under(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


async def no_service() -> MemoryService:
    raise AssertionError("an agentgw import needs no memory service")


async def test_export_import_export_is_byte_identical(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = make_config(tmp_path / "a", memory={"embedder": "minilm"})
    async with Store(first.database_url) as store:
        person_id = await populate(store, first, embedder)
        async with store.reader() as s:
            statuses = set((await s.scalars(select(MemoryItem.status))).all())
            assert {ItemStatus.SUPERSEDED, ItemStatus.FORGOTTEN, ItemStatus.ACTIVE} <= statuses
            assert await s.scalar(select(func.count()).select_from(MemoryTrace)) == 1
        exported = await export_person(store, person_id, tmp_path / "out1", first.zone)
    one = files_under(exported.folder)
    assert {"agentgw.jsonl", "facts.md", "persona.md", "preferences.md", "events.md"} <= set(one)
    assert "lessons.md" in one
    assert "memory/2026-03-04.md" in one
    assert "memory/2026-03-05.md" in one
    facts = one["facts.md"].decode()
    assert "My sister is called Ada <!-- 2026-03-04 #" in facts
    assert "pinned -->" in facts
    # The current version only; the forgotten item is in the record, not in the files.
    assert "I live in Lyon now" in one["persona.md"].decode()
    preferences = one["preferences.md"].decode()
    assert "colour is green" in preferences
    assert "blue" not in preferences
    assert "green tea" not in preferences
    assert "2026-03-12: dentist appointment on 12 March <!-- #" in one["events.md"].decode()
    lessons = one["lessons.md"].decode()
    assert "Call me Sam, never Samuel." in lessons
    assert "No emojis. (everyone)" in lessons
    # Times shown in the person's own zone (Paris, UTC+1 in March).
    assert "- 10:00 Sam: I moved to Lyon" in one["memory/2026-03-04.md"].decode()

    second = make_config(tmp_path / "b", memory={"embedder": "minilm"})
    async with Store(second.database_url) as store:
        report = await run_import(
            store,
            tmp_path / "out1",
            person_id=None,
            max_bytes=second.memory.import_max_bytes,
            service=no_service,
        )
        assert report.format == "agentgw"
        assert report.rows_added["memory_items"] == len(
            [line for line in one["agentgw.jsonl"].splitlines() if b'"memory_items"' in line]
        )
        again = await run_import(
            store,
            exported.folder / "agentgw.jsonl",
            person_id=None,
            max_bytes=second.memory.import_max_bytes,
            service=no_service,
        )
        assert again.rows_added == {}, "importing twice adds nothing"
        assert again.rows_known == report.rows_known + sum(report.rows_added.values())
        round_trip = await export_person(store, person_id, tmp_path / "out2", second.zone)
        # The imported items are recalled: the index catches up with rows it lacks.
        service = await MemoryService.start(store, second, embedder=embedder)
        try:
            pack = await service.build_pack(
                PackRequest(person_id=person_id, text="Which market on Sunday?", at=T0)
            )
        finally:
            await service.aclose()
        assert "Croix-Rousse" in pack.text
    two = files_under(round_trip.folder)
    assert two.keys() == one.keys()
    for name in one:
        assert two[name] == one[name], name


async def test_a_bad_export_line_changes_nothing(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    folder = tmp_path / "export"
    folder.mkdir()
    header = '{"format": "agentgw-memory", "person_id": 1, "version": 1}\n'
    person = (
        '{"row": {"created_at": "2026-01-01T00:00:00+00:00", "display_name": "Sam", '
        '"id": 1, "timezone": ""}, "table": "people"}\n'
    )
    (folder / "agentgw.jsonl").write_text(header + person + '{"row": {"id": 3, "con', "utf-8")
    async with Store(config.database_url) as store:
        with pytest.raises(PortingError, match=r"agentgw.jsonl: line 3 column \d+: not JSON"):
            await run_import(store, folder, person_id=None, max_bytes=10**6, service=no_service)
        async with store.reader() as s:
            assert await s.scalar(select(func.count()).select_from(Person)) == 0


def test_a_long_file_is_split_under_the_line_limit() -> None:
    items = [
        {
            "id": n,
            "type": ItemType.FACT,
            "content": f"fact number {n}",
            "status": ItemStatus.ACTIVE,
            "pinned": False,
            "occurred_at": datetime(2025 + n % 2, 1, 1, tzinfo=UTC) + timedelta(minutes=n),
            "refers_start": None,
        }
        for n in range(1200)
    ]
    files = markdown.render("Sam", items, [], UTC)
    facts = {k: v for k, v in files.items() if k.startswith("facts")}
    assert set(facts) == {
        "facts-2025-1.md",
        "facts-2025-2.md",
        "facts-2026-1.md",
        "facts-2026-2.md",
    }
    assert all(v.count("\n") < markdown.MAX_LINES for v in facts.values())
    assert sum(v.count("- fact number") for v in facts.values()) == 1200


async def memory_cli(config: Path, *argv: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "memory",
        *argv,
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    out, err = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_search_and_show_from_the_shell(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    path = tmp_path / "agentgw.toml"
    path.write_text(
        f'[store]\ndata_dir = "{tmp_path / "data"}"\n[agent]\ntimezone = "UTC"\n',
        encoding="utf-8",
    )
    config = make_config(tmp_path, memory={"embedder": "minilm"})
    async with Store(config.database_url) as store:
        await populate(store, config, embedder)
    # The gateway's index folder as a gateway that has not saved yet leaves it: a
    # search that opened its indexes there would write their files.
    index_dir = tmp_path / "data" / "memory-index"
    shutil.rmtree(index_dir)
    index_dir.mkdir()
    # The one person: --person left out.
    code, out, err = await memory_cli(
        path, "search", "What do I do every Sunday morning?", "--json"
    )
    assert code == 0, err
    found = json.loads(out)
    top = found["results"][0]
    assert "Croix-Rousse" in top["text"]
    assert set(top) >= {"id", "text", "score", "date"}
    assert top["date"] == "2026-03-05T09:00:00+00:00"
    assert found["results"] == sorted(found["results"], key=lambda r: -r["score"])
    # No trace stored by a search, and the gateway's index folder untouched.
    async with Store(config.database_url) as store, store.reader() as s:
        assert await s.scalar(select(func.count()).select_from(MemoryTrace)) == 1
    assert files_under(index_dir) == {}

    code, out, _ = await memory_cli(path, "search", "Where do I live?", "--index")
    assert code == 0
    assert out.splitlines()[0].startswith("#")

    code, out, _ = await memory_cli(path, "search", "my favourite colour", "--json")
    colour = next(r for r in json.loads(out)["results"] if r["text"].endswith("is green"))
    code, out, _ = await memory_cli(path, "show", str(colour["id"]), "--json")
    assert code == 0
    shown = json.loads(out)
    assert [v["text"] for v in shown["versions"]] == [
        "my favourite colour is blue",
        "my favourite colour is green",
    ]
    assert shown["versions"][0]["status"] == "superseded"
    code, out, _ = await memory_cli(path, "show", str(top["id"]), "--json")
    source = json.loads(out)["sources"][0]
    assert source["text"] == "The one at Croix-Rousse, every Sunday morning."
    code, _, err = await memory_cli(path, "show", "999999")
    assert code == 2
    assert "no memory item 999999" in err
    assert "Traceback" not in err


async def test_import_beside_another_person_maps_every_reference(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = make_config(tmp_path / "a", memory={"embedder": "minilm"})
    async with Store(first.database_url) as store:
        await populate(store, first, embedder)
        await export_person(store, 1, tmp_path / "out", first.zone)
    second = make_config(tmp_path / "b", memory={"embedder": "minilm"})
    async with Store(second.database_url) as store:
        # Someone else holds the ids the export's rows had.
        await populate(store, second, embedder)
        async with store.session() as s:
            await s.execute(update(Person).values(display_name="Other"))
            await s.execute(update(MemoryItem).values(content=MemoryItem.content + " (other)"))
            await s.execute(update(Message).values(text=Message.text + " (other)"))
            await s.execute(update(Identity).values(external_id="other-1"))
        report = await run_import(
            store, tmp_path / "out", person_id=None, max_bytes=10**9, service=no_service
        )
        assert report.person_id == 2
        async with store.reader() as s:
            items = {
                i.content: i
                for i in (
                    await s.scalars(select(MemoryItem).where(MemoryItem.person_id == 2))
                ).all()
            }
            messages = {
                m.id: m
                for m in (await s.scalars(select(Message).where(Message.person_id == 2))).all()
            }
            trace = await s.scalar(select(MemoryTrace).where(MemoryTrace.person_id == 2))
            turn = await s.scalar(
                select(Turn).join(Conversation).where(Conversation.person_id == 2)
            )
        blue, green = items["my favourite colour is blue"], items["my favourite colour is green"]
        assert blue.superseded_by_id == green.id
        sunday = items["The one at Croix-Rousse, every Sunday morning."]
        (source,) = sunday.source_message_ids
        assert messages[source].text == sunday.content
        assert trace is not None
        assert turn is not None
        assert trace.turn_id == turn.id
        assert messages[turn.inbound_message_id].text.startswith("I moved to Lyon")
        assert set(trace.kept_ids) <= {i.id for i in items.values()}
        assert trace.kept_ids


async def test_reads_run_beside_a_running_gateway_and_import_waits_for_it(
    tmp_path: Path, brain: ScriptedBrain
) -> None:
    path = tmp_path / "agentgw.toml"
    path.write_text(
        f'[store]\ndata_dir = "{tmp_path / "data"}"\n[memory]\nembedder = "none"\n'
        '[agent]\ntimezone = "UTC"\n',
        encoding="utf-8",
    )
    server, client = await start_gateway(load_config(path, env={}), brain)
    running = RunningGateway(server, client)
    try:
        ws = await session(running, "porter-person")
        brain.script = ["Noted: the markets of Croix-Rousse."]
        await say(ws, "I shop at the Croix-Rousse market every Sunday.", "p1")
        assert await running.gateway.router.drain(30)
        code, out, err = await memory_cli(path, "search", "Croix-Rousse market", "--json")
        assert code == 0, err
        texts = [r["text"] for r in json.loads(out)["results"]]
        assert "I shop at the Croix-Rousse market every Sunday." in texts
        code, out, err = await memory_cli(path, "export", "--out", str(tmp_path / "out"))
        assert code == 0, err
        (folder,) = (tmp_path / "out").iterdir()
        day = next((folder / "memory").iterdir()).read_text("utf-8")
        assert "I shop at the Croix-Rousse market every Sunday." in day
        code, _, err = await memory_cli(path, "import", str(folder))
        assert code == 2
        assert "in use by another agentgw" in err
        assert "stop the gateway first" in err
        assert "Traceback" not in err
    finally:
        await client.close()
        await server.close()


@pytest.mark.skipif(not PG_BINARIES, reason="Debian postgresql is not installed")
async def test_round_trip_through_postgresql(
    tmp_path: Path,
    pg_store: Store,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    config = make_config(tmp_path, memory={"embedder": "minilm"})
    async with Store(config.database_url) as store:
        person_id = await populate(store, config, embedder)
        one = await export_person(store, person_id, tmp_path / "out1", config.zone)
    await run_import(
        pg_store, tmp_path / "out1", person_id=None, max_bytes=10**9, service=no_service
    )
    two = await export_person(pg_store, person_id, tmp_path / "out2", config.zone)
    assert files_under(two.folder) == files_under(one.folder)
    # The ids written back moved the sequences on: the next rows get new ids.
    service = MemoryService(pg_store, config.memory, tmp_path / "index", embedder)
    try:
        added = await service.remember(person_id, "I now work at a bookshop", at=T0)
        async with pg_store.session() as s:
            s.add(Person(display_name="Next"))
    finally:
        await service.aclose()
    async with pg_store.reader() as s:
        top = await s.scalar(select(func.max(MemoryItem.id)).where(MemoryItem.id != added.item_id))
    assert top is not None
    assert added.item_id > top


async def test_import_into_a_named_person(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = make_config(tmp_path / "a", memory={"embedder": "minilm"})
    async with Store(first.database_url) as store:
        await populate(store, first, embedder)
        await export_person(store, 1, tmp_path / "out", first.zone)
    second = make_config(tmp_path / "b", memory={"embedder": "none"})
    async with Store(second.database_url) as store:
        async with store.session() as s:
            s.add_all([Person(display_name="Someone"), Person(display_name="Sam again")])
        with pytest.raises(PortingError, match="no person 7 in the store"):
            await run_import(
                store, tmp_path / "out", person_id=7, max_bytes=10**9, service=no_service
            )
        report = await run_import(
            store, tmp_path / "out", person_id=2, max_bytes=10**9, service=no_service
        )
        assert report.person_id == 2
        assert "people" not in report.rows_added
        async with store.reader() as s:
            assert await s.scalar(select(func.count()).select_from(Person)) == 2
            owners = set((await s.scalars(select(MemoryItem.person_id))).all())
            lessons = set((await s.scalars(select(Lesson.person_id))).all())
        assert owners == {2}
        assert lessons == {2, None}

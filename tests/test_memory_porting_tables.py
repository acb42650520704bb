"""The record holds everything memory holds: observations, persona versions and rules,
triggers, working memory, decisions, handoffs, profiles, category summaries, merges,
promotions and the memory tree round-trip byte-identically, and every table of the
store is either carried or named as left out (with a reason)."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

import gateway.store.cost_models  # noqa: F401
import memory.jobs.models  # noqa: F401
import persona.models  # noqa: F401  (every table joins the metadata)
from gateway.config import ContinuityConfig
from gateway.store import Store
from gateway.store.models import Base, Identity, Message, Person
from memory.continuity.handoff_models import Handoff, Profile
from memory.continuity.models import Decision, FocusAction, FocusEntry, Origin
from memory.continuity.profile import ProfileBook
from memory.embed import SentenceEmbedder
from memory.models import MemoryItem, MemoryMerge, MemoryPromotion, MemorySummary
from memory.porting import persona_tables, records
from memory.porting.export import export_person
from memory.porting.importer import run_import
from memory.service import MemoryService
from memory.tree.models import TreeNode
from memory.triggers.models import Trigger
from memory.types import ItemStatus
from persona.models import ObservationRow, ObserveCursor, PersonaRule, PersonaVersion
from tests.conftest import make_config
from tests.test_memory_models import embedder  # noqa: F401 (the session's model, a fixture)
from tests.test_memory_porting import T0, files_under, no_service, populate

pytestmark = pytest.mark.slow

NEW_TABLES = (
    "observations",
    "observe_cursors",
    "persona_versions",
    "persona_rules",
    "triggers",
    "focus_entries",
    "decisions",
    "handoffs",
    "memory_summaries",
    "profiles",
    "memory_merges",
    "memory_promotions",
    "memory_tree_nodes",
    "memory_tree_versions",
)


def test_every_table_is_carried_or_named_as_left_out() -> None:
    carried = {t.name for t in records.tables()}
    store_tables = set(Base.metadata.tables)
    assert not carried & set(records.NOT_MEMORY)
    assert store_tables - carried - set(records.NOT_MEMORY) == set(), "a table nobody placed"
    # The persona loop's tables, declared in memory/ (the layer rule), column for column.
    for declared in (
        persona_tables.LESSONS,
        persona_tables.OBSERVATIONS,
        persona_tables.OBSERVE_CURSORS,
        persona_tables.PERSONA_VERSIONS,
        persona_tables.PERSONA_RULES,
    ):
        real = Base.metadata.tables[declared.name]
        assert [c.name for c in declared.columns] == [c.name for c in real.columns], declared.name


async def add_the_rest(store: Store, config_tree: MemoryService, person_id: int) -> None:
    """A row in each table the record gained, the way each part writes it."""
    async with store.session() as s:
        conv_id = await s.scalar(select(Message.conversation_id).limit(1))
        message_ids = list((await s.scalars(select(Message.id).order_by(Message.id))).all())
        items = list(
            (
                await s.scalars(
                    select(MemoryItem)
                    .where(MemoryItem.status == ItemStatus.ACTIVE)
                    .order_by(MemoryItem.id)
                )
            ).all()
        )
        first, second = items[-1].id, items[-2].id
        s.add(PersonaVersion(version=1, state={"name": "Ava", "tone": ["warm"]}, source="init"))
        s.add(PersonaRule(text="Never swear.", person_id=person_id, proposed_at=T0))
        obs = ObservationRow(
            person_id=person_id,
            conversation_id=conv_id,
            text="Sam moved to Lyon and loves its markets.",
            priority="high",
            category="facts",
            observed_at=T0,
            referred_on=date(2026, 2, 1),
            source_message_ids=message_ids[:1],
            author="rules",
            memory_item_id=first,
            created_at=T0,
        )
        s.add(obs)
        await s.flush()
        await s.execute(
            MemoryItem.__table__.update()
            .where(MemoryItem.id == first)
            .values(observation_id=obs.id)
        )
        s.add(ObserveCursor(conversation_id=conv_id, observed_through_message_id=message_ids[-1]))
        s.add(
            Trigger(
                person_id=person_id,
                conversation_id=conv_id,
                channel="webchat",
                message_id=message_ids[0],
                trigger_date=date(2026, 3, 12),
                phrase="on 12 March",
                context="dentist appointment on 12 March",
                memory_ids=[first, second],
                created_at=T0,
            )
        )
        s.add(
            FocusEntry(
                person_id=person_id,
                action=FocusAction.SET,
                text="the move",
                origin=Origin.CHAT,
                created_at=T0,
            )
        )
        earlier = Decision(
            person_id=person_id,
            text="Rent in Croix-Rousse",
            tags=["home"],
            origin=Origin.CHAT,
            created_at=T0,
        )
        s.add(earlier)
        await s.flush()
        s.add(
            Decision(
                person_id=person_id,
                text="Buy instead",
                origin=Origin.CLI,
                reverses_id=earlier.id,
                created_at=T0 + timedelta(days=1),
            )
        )
        s.add(
            Handoff(
                person_id=person_id,
                conversation_id=conv_id,
                text="Talked about markets.",
                method="extractive",
                through_message_id=message_ids[-1],
                created_at=T0,
            )
        )
        s.add(
            MemorySummary(
                person_id=person_id,
                category="facts",
                version=1,
                text="- “My sister is called Ada” (2026-03-04)",
                item_ids=[first],
                items=1,
                created_at=T0,
            )
        )
        s.add(
            MemoryMerge(
                person_id=person_id,
                survivor_id=first,
                merged_ids=[second],
                similarities=[0.97],
                before={"strength": 0.0},
                added={"access_count": 1},
                created_at=T0,
            )
        )
        s.add(MemoryPromotion(item_id=first, promoted_on=date(2026, 3, 4)))
    # The profile and the tree as their own code builds them.
    assert await ProfileBook(store, ContinuityConfig()).rebuild(person_id, at=T0)
    assert await config_tree.tree.rebuild(person_id) > 0


async def test_round_trip_with_every_table(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = make_config(tmp_path / "a", memory={"embedder": "minilm", "tree": True})
    async with Store(first.database_url) as store:
        person_id = await populate(store, first, embedder)
        service = await MemoryService.start(store, first, embedder=embedder)
        try:
            await add_the_rest(store, service, person_id)
        finally:
            await service.aclose()
        exported = await export_person(store, person_id, tmp_path / "out1", first.zone)
    one = files_under(exported.folder)
    held = {json.loads(line)["table"] for line in one["agentgw.jsonl"].splitlines()[1:]}
    assert set(NEW_TABLES) <= held, set(NEW_TABLES) - held
    memory_md = one["MEMORY.md"].decode()
    assert "# MEMORY: Sam" in memory_md
    assert "- Sam moved to Lyon and loves its markets. <!-- observation:" in memory_md
    tree_md = one["tree.md"].decode()
    assert "## Root root (" in tree_md
    assert "### Topic t:" in tree_md or "### Cluster c:" in tree_md
    assert "My sister is called Ada" in tree_md
    assert " <!-- item:" in tree_md
    assert all(v.count(b"\n") < 500 for k, v in one.items() if k.endswith(".md"))

    second = make_config(tmp_path / "b", memory={"embedder": "minilm", "tree": True})
    async with Store(second.database_url) as store:
        report = await run_import(
            store,
            tmp_path / "out1",
            person_id=None,
            max_bytes=second.memory.import_max_bytes,
            service=no_service,
        )
        assert set(NEW_TABLES) <= set(report.rows_added)
        again = await run_import(
            store,
            exported.folder,
            person_id=None,
            max_bytes=second.memory.import_max_bytes,
            service=no_service,
        )
        assert again.rows_added == {}, "importing twice adds nothing"
        round_trip = await export_person(store, person_id, tmp_path / "out2", second.zone)
    two = files_under(round_trip.folder)
    assert two.keys() == one.keys()
    for name in one:
        assert two[name] == one[name], name


async def test_into_a_store_with_someone_else_every_id_follows(
    tmp_path: Path,
    embedder: SentenceEmbedder,  # noqa: F811
) -> None:
    """Ids taken by another person's rows: tree keys, quotes, profile sources, soft
    references and id lists name the imported rows' new ids."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = make_config(tmp_path / "a", memory={"embedder": "minilm", "tree": True})
    async with Store(first.database_url) as store:
        person_id = await populate(store, first, embedder)
        service = await MemoryService.start(store, first, embedder=embedder)
        try:
            await add_the_rest(store, service, person_id)
        finally:
            await service.aclose()
        await export_person(store, person_id, tmp_path / "out1", first.zone)
    second = make_config(tmp_path / "b", memory={"embedder": "minilm", "tree": True})
    async with Store(second.database_url) as store:
        other = await populate(store, second, embedder)  # takes the same ids first
        async with store.session() as s:
            s.add(PersonaVersion(version=1, state={"name": "Other"}, source="init"))
            await s.execute(update(Person).values(display_name="Other"))
            await s.execute(update(MemoryItem).values(content=MemoryItem.content + " (other)"))
            await s.execute(update(Message).values(text=Message.text + " (other)"))
            await s.execute(update(Identity).values(external_id="other-1"))
        report = await run_import(
            store,
            tmp_path / "out1",
            person_id=None,
            max_bytes=second.memory.import_max_bytes,
            service=no_service,
        )
        new_person = report.person_id
        assert new_person != other
        async with store.reader() as s:
            mine = {
                i.id: i
                for i in (
                    await s.scalars(select(MemoryItem).where(MemoryItem.person_id == new_person))
                ).all()
            }
            nodes = (
                await s.scalars(select(TreeNode).where(TreeNode.person_id == new_person))
            ).all()
            leaf_keys = [n.key for n in nodes if n.key.startswith("item:")]
            assert leaf_keys
            for key in leaf_keys:
                assert int(key.split(":")[1]) in mine, key
            for node in nodes:
                assert set(node.item_ids) <= set(mine), node.key
                assert all(q[3] in mine for q in node.quotes), node.key
            obs = await s.scalar(
                select(ObservationRow).where(ObservationRow.person_id == new_person)
            )
            assert obs is not None
            assert obs.memory_item_id in mine
            assert mine[obs.memory_item_id].observation_id == obs.id
            trigger = await s.scalar(select(Trigger).where(Trigger.person_id == new_person))
            assert trigger is not None
            assert set(trigger.memory_ids) <= set(mine)
            profile = await s.scalar(select(Profile).where(Profile.person_id == new_person))
            assert profile is not None
            assert f"observation:{obs.id}" in profile.lines[0]["sources"]
            # The persona history was this store's own: not replaced by the import's.
            assert "persona_versions" not in report.rows_added
            states = (await s.scalars(select(PersonaVersion.state))).all()
            assert states == [{"name": "Other"}]

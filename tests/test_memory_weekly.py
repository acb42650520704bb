"""The weekly and monthly upkeep job bodies with the real store and the real MiniLM model:
categories, versioned category summaries, domain TTLs and resurrection, insights,
re-embedding drift, the full re-index, the cold tier and the health report.

The bodies are called directly with a ``JobContext`` (the calendar is another module).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select, update

from gateway.config import Config
from gateway.store import Store
from gateway.store.repo import Address, resolve_address
from gateway.testing.postgres import PG_BINARIES
from memory import repo
from memory.categories import Category, CategoryPrototypes, categorise
from memory.categories_labelled import LABELLED
from memory.embed import SentenceEmbedder, to_blob
from memory.jobs import queries
from memory.jobs.base import JobContext
from memory.jobs.health import render_health_svg
from memory.jobs.monthly import monthly
from memory.jobs.weekly import weekly
from memory.models import MemoryItem
from memory.service import MemoryService, PackRequest
from memory.types import ItemStatus, ItemType, Tier
from tests.conftest import make_config

# The throwaway PostgreSQL server and database of tests/test_memory_postgres.py.
from tests.test_memory_postgres import pg_store, postgres  # noqa: F401

pytestmark = pytest.mark.slow

NOW = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder.load()


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path, memory={"embedder": "minilm"})


@pytest.fixture
async def store(config: Config) -> AsyncIterator[Store]:
    async with Store(config.database_url) as opened:
        yield opened


@pytest.fixture
async def address(store: Store) -> Address:
    return await resolve_address(store, "webchat", "session-a", display_name="Sam")


@pytest.fixture
async def service(
    store: Store, config: Config, embedder: SentenceEmbedder
) -> AsyncIterator[MemoryService]:
    made = MemoryService(
        store, config.memory, config.data_dir / "memory-index", embedder, jobs=config.upkeep_jobs
    )
    yield made
    await made.aclose()


def ctx_for(service: MemoryService, now: datetime = NOW, **kw: object) -> JobContext:
    return JobContext(service=service, now=now, **kw)  # type: ignore[arg-type]


async def add(
    service: MemoryService,
    person_id: int,
    text: str,
    *,
    days_ago: float,
    item_type: ItemType = ItemType.FACT,
) -> int:
    (item_id,) = await service.add_items(
        [repo.NewItem(person_id, item_type, text, NOW - timedelta(days=days_ago))]
    )
    return item_id


async def item(store: Store, item_id: int) -> MemoryItem:
    (row,) = await repo.get_items(store, [item_id])
    return row


# -- categories ---------------------------------------------------------------------


def test_the_categoriser_without_a_model_on_the_labelled_set(embedder: SentenceEmbedder) -> None:
    pairs = CategoryPrototypes.texts()
    prototypes = CategoryPrototypes(
        embedder.embed([t for _, t in pairs]), tuple(c for c, _ in pairs), embedder.model_name
    )
    types = [t for t, _, _ in LABELLED]
    texts = [x for _, x, _ in LABELLED]
    gold = [c for _, _, c in LABELLED]
    assert len(LABELLED) == 96
    with_prototypes = categorise(types, texts, embedder.embed(texts), prototypes, 0.2)
    rules_only = categorise(types, texts, None, None, 0.2)

    def accuracy(found: Sequence[Category]) -> float:
        return sum(a == b for a, b in zip(found, gold, strict=True)) / len(gold)

    # Measured: 0.73 with prototypes, 0.55 on rules and types alone (docs/DESIGN.md).
    assert accuracy(with_prototypes) >= 0.7
    assert accuracy(with_prototypes) > accuracy(rules_only) + 0.1


async def test_items_are_categorised_when_written_and_the_weekly_job_backfills_the_rest(
    service: MemoryService, store: Store, address: Address
) -> None:
    doctor = await add(service, address.person_id, "I see my doctor about my migraines", days_ago=1)
    boss = await add(service, address.person_id, "My boss moved the deadline", days_ago=1)
    assert (await item(store, doctor)).category == "health"
    assert (await item(store, boss)).category == "work"
    async with store.session() as session:
        await session.execute(update(MemoryItem).values(category=""))
    dry = ctx_for(service, dry_run=True)
    counts = await weekly(dry)
    assert counts["categorised"] == 2
    assert f"categorise item {doctor} as health" in dry.plan
    assert (await item(store, doctor)).category == ""  # a dry run changes nothing
    counts = await weekly(ctx_for(service))
    assert counts["categorised"] == 2
    assert (await item(store, doctor)).category == "health"
    assert (await item(store, boss)).category == "work"
    assert (await weekly(ctx_for(service)))["categorised"] == 0


# -- summaries ------------------------------------------------------------------------


async def test_category_summaries_come_from_active_items_and_keep_their_versions(
    service: MemoryService, store: Store, address: Address
) -> None:
    person = address.person_id
    job_texts = [
        "I work as a nurse on the night shift",
        "My manager approved my holiday request at work",
        "Work has been stressful because of staff shortages",
    ]
    ids = [await add(service, person, t, days_ago=3) for t in job_texts]
    counts = await weekly(ctx_for(service))
    assert counts["summaries"] >= 1
    found = await queries.summaries(store, person)
    (first,) = found["work"]
    assert first.version == 1
    assert first.method == "extractive"
    assert "“I work as a nurse on the night shift”" in first.text
    assert (NOW - timedelta(days=3)).strftime("%Y-%m-%d") in first.text
    # Nothing changed: no new version.
    assert (await weekly(ctx_for(service)))["summaries"] == 0
    # An item stops being active: rebuilt without it, as a new version; the old one stays.
    await service.retire(ids[0], ItemStatus.FORGOTTEN)
    await weekly(ctx_for(service))
    found = await queries.summaries(store, person)
    assert [v.version for v in found["work"]] == [1, 2]
    assert "night shift" in found["work"][0].text
    assert "night shift" not in found["work"][1].text
    assert ids[0] not in found["work"][1].item_ids


# -- domain TTLs, pinning, resurrection ------------------------------------------------


async def test_domain_ttls_archive_but_never_pinned_and_a_query_brings_one_back(
    service: MemoryService, store: Store, address: Address
) -> None:
    person = address.person_id
    hobby = await add(service, person, "I play the guitar in a small band", days_ago=61)
    pinned_hobby = await add(service, person, "I go climbing at the bouldering gym", days_ago=61)
    preference = await add(
        service, person, "I prefer tea to coffee", days_ago=61, item_type=ItemType.PREFERENCE
    )
    health = await add(service, person, "I am allergic to penicillin", days_ago=200)
    persona = await add(service, person, "Sam is a nurse", days_ago=400, item_type=ItemType.PERSONA)
    async with store.session() as session:
        await session.execute(
            update(MemoryItem).where(MemoryItem.id == pinned_hobby).values(pinned=True)
        )
    assert (await item(store, hobby)).category == "hobbies"
    index = await service.index(person)
    assert index is not None
    assert hobby in index._live

    counts = await weekly(ctx_for(service))
    assert counts["archived"] == 1
    tiers = {
        i: (await item(store, i)).tier for i in (hobby, pinned_hobby, preference, health, persona)
    }
    assert tiers == {
        hobby: Tier.ARCHIVED,
        pinned_hobby: Tier.ACTIVE,
        preference: Tier.ACTIVE,
        health: Tier.ACTIVE,
        persona: Tier.ACTIVE,
    }
    assert hobby not in index._live
    # The hourly decay sweep does not undo it (retention alone would call it warm).
    await service.sweep(NOW)
    assert (await item(store, hobby)).tier is Tier.ARCHIVED
    # A message that needs it finds it in full text; referring to it brings it back.
    question = "Do I still play the guitar in that band?"
    pack = await service.build_pack(PackRequest(person, question, NOW))
    assert hobby in pack.kept
    result = await service.reinforce_items(pack.kept, person, question, "You do.", NOW)
    assert hobby in result.resurrected
    assert (await item(store, hobby)).tier is Tier.ACTIVE
    assert hobby in index._live


async def test_episodes_are_the_record_never_archived_by_age_only_demoted(
    service: MemoryService, store: Store, address: Address
) -> None:
    """A message a year old stays in dense search through the weekly TTL and the hourly
    sweep (demoted to cold at most); a fact as old is archived as before."""
    person = address.person_id
    episode = await add(
        service,
        person,
        "I play the guitar in a small band",
        days_ago=400,
        item_type=ItemType.EPISODE,
    )
    fact = await add(service, person, "I go climbing at the bouldering gym", days_ago=400)
    index = await service.index(person)
    assert index is not None
    assert {episode, fact} <= index._live

    counts = await weekly(ctx_for(service))
    assert counts["archived"] == 1
    assert (await item(store, fact)).tier is Tier.ARCHIVED
    assert (await item(store, episode)).tier is Tier.ACTIVE
    # Decay alone would archive a message this old (retention far below tier_cold).
    (row,) = await repo.get_items(store, [episode])
    assert service.decay.tier(float(service.decay.retention_at([row], NOW)[0])) is Tier.ARCHIVED
    stats = await service.sweep(NOW)
    assert stats.archived == 0
    assert (await item(store, episode)).tier is Tier.COLD
    assert episode in index._live
    assert fact not in index._live
    # Dense search still reaches it: a question sharing no content word with it.
    pack = await service.build_pack(PackRequest(person, "Which instrument do I perform?", NOW))
    assert episode in pack.kept


# -- insights ---------------------------------------------------------------------------


async def test_archived_items_cluster_into_insights_linked_to_their_sources(
    service: MemoryService, store: Store, address: Address
) -> None:
    person = address.person_id
    running = [
        "I ran ten kilometres along the river this morning",
        "My long run today was twelve kilometres by the river",
        "I went for an early morning run by the river again",
        "Ran eight kilometres by the river before breakfast",
    ]
    others = ["The boiler in the flat was replaced", "My passport expires in 2027"]
    run_ids = [await add(service, person, t, days_ago=120) for t in running]
    other_ids = [await add(service, person, t, days_ago=120) for t in others]
    dry = ctx_for(service, dry_run=True)
    assert (await weekly(dry))["insights"] == 0  # dry: nothing archived yet, so none
    counts = await weekly(ctx_for(service))
    assert counts["archived"] == len(running) + len(others)
    assert counts["insights"] == 1
    async with store.reader() as session:
        (insight,) = (
            await session.scalars(select(MemoryItem).where(MemoryItem.type == ItemType.INSIGHT))
        ).all()
    assert sorted(insight.source_item_ids) == sorted(run_ids)
    assert not set(other_ids) & set(insight.source_item_ids)
    assert "river" in insight.content
    assert insight.tier is Tier.ACTIVE
    assert insight.author == "upkeep"
    # Its sources are summed up: the next run makes no second insight of them.
    assert (await weekly(ctx_for(service)))["insights"] == 0


# -- the utility model --------------------------------------------------------------


class ScriptedUtility:
    """A utility model that answers by instruction and records the calls."""

    name = "scripted-utility"

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def complete(self, instructions: str, text: str, max_tokens: int) -> str:
        self.calls.append(instructions)
        if "categories" in instructions:
            lines = text.splitlines()
            return json.dumps({str(n): "hobbies" for n in range(1, len(lines) + 1)})
        return "Sam spends weekends on hobbies."


async def test_with_a_utility_model_categories_and_summaries_are_its_own(
    service: MemoryService, store: Store, address: Address
) -> None:
    utility = ScriptedUtility()
    service.utility = utility
    fact = await add(service, address.person_id, "My boss moved the deadline", days_ago=1)
    assert (await item(store, fact)).category == ""  # left to the weekly job and the model
    await weekly(ctx_for(service))
    assert (await item(store, fact)).category == "hobbies"
    found = await queries.summaries(store, address.person_id)
    assert found["hobbies"][0].method == "scripted-utility"
    assert found["hobbies"][0].text == "Sam spends weekends on hobbies."
    assert (await weekly(ctx_for(service)))["summaries"] == 0  # same items: no new version


# -- monthly ------------------------------------------------------------------------


async def test_monthly_drift_reindex_cold_tier_and_health_report(
    service: MemoryService, store: Store, address: Address, config: Config
) -> None:
    person = address.person_id
    old = await add(service, person, "I keep my bike in the basement", days_ago=200)
    fresh = await add(service, person, "My flat has a small balcony", days_ago=2)
    gone = [
        await add(service, person, f"Shopping list item number {n}", days_ago=2) for n in range(5)
    ]
    for item_id in gone:
        await service.retire(item_id, ItemStatus.FORGOTTEN)
    index = await service.index(person)
    assert index is not None
    assert index.deleted_slots == 5
    # One stored vector no longer matches its text: the drift check sees it.
    async with store.session() as session:
        await session.execute(
            update(MemoryItem)
            .where(MemoryItem.id == fresh)
            .values(embedding=to_blob(np.eye(1, 384, 7, dtype=np.float32)[0]))
        )
    # The full-text table lost its rows (as after a crash mid-write): the rebuild restores it.
    await store.write(
        lambda c: c.exec_driver_sql("INSERT INTO memory_fts(memory_fts) VALUES ('delete-all')")
    )
    assert await repo.fts_match(store, person, repo.fts_query("bike basement"), 5) == []

    dry = ctx_for(service, dry_run=True)
    counts = await monthly(dry)
    assert counts["cold"] == 1
    assert f"rebuild the ANN index of person {person}" in dry.plan
    assert (await item(store, old)).tier is Tier.ACTIVE

    run = ctx_for(service)
    counts = await monthly(run)
    assert counts["drift_checked"] == 2 + 5
    assert counts["drift_max"] > 0.5
    assert counts["fts_rebuilt"] == 1
    assert [
        h for h, _ in await repo.fts_match(store, person, repo.fts_query("bike basement"), 5)
    ] == [old]
    assert counts["indexes_rebuilt"] == 1
    assert counts["slots_dropped"] == 5
    rebuilt = await service.index(person)
    assert rebuilt is not None
    assert rebuilt.deleted_slots == 0
    assert rebuilt.count == 2
    # Cold, and still found by vector.
    assert counts["cold"] == 1
    assert (await item(store, old)).tier is Tier.COLD
    query = service.embedder.embed(["where is my bicycle kept?"])[0]  # type: ignore[union-attr]
    assert rebuilt.search(query, 1)[0][0] == old
    report = run.report
    assert report["items"]["cold"] == 1  # type: ignore[index]
    assert report["items"]["forgotten"] == 5  # type: ignore[index]
    assert report["by_category"]  # every item has one
    assert report["drift"]["checked"] == 7  # type: ignore[index]
    json.dumps(report)  # JSON values only
    svg = render_health_svg(report)
    assert svg.count("<svg") == 6
    assert "Items by category" in svg
    assert "http" not in svg.replace("http://www.w3.org/2000/svg", "")  # nothing fetched


def test_memory_health_prints_the_report(tmp_path: Path) -> None:
    config_file = tmp_path / "agentgw.toml"
    config_file.write_text(f'[store]\ndata_dir = "{tmp_path / "data"}"\n', encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "memory",
            "health",
            "--json",
            "--config",
            str(config_file),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["items"]["total"] == 0
    assert report["last_access_age"][0]["bucket"] == "< 1 d"


# -- PostgreSQL ---------------------------------------------------------------------


@pytest.mark.skipif(not PG_BINARIES, reason="Debian postgresql is not installed")
async def test_weekly_and_monthly_on_postgresql(
    pg_store: Store,  # noqa: F811 (the fixture imported above)
    config: Config,
    embedder: SentenceEmbedder,
) -> None:
    pg = pg_store
    service = MemoryService(
        pg, config.memory, config.data_dir / "pg-index", embedder, jobs=config.upkeep_jobs
    )
    try:
        sam = await resolve_address(pg, "webchat", "pg-sam", display_name="Sam")
        hobby = await add(service, sam.person_id, "I play the guitar in a small band", days_ago=61)
        old = await add(service, sam.person_id, "I keep my bike in the basement", days_ago=200)
        runs = [
            await add(service, sam.person_id, t, days_ago=100)
            for t in (
                "I ran ten kilometres along the river this morning",
                "My long run today was twelve kilometres by the river",
                "I went for an early morning run by the river again",
            )
        ]
        counts = await weekly(ctx_for(service))
        assert counts["archived"] == 2 + len(runs)  # the bike: facts, 90 days
        assert counts["insights"] == 1
        assert (await item(pg, hobby)).tier is Tier.ARCHIVED
        run = ctx_for(service)
        counts = await monthly(run)
        assert counts["fts_rebuilt"] == 0
        assert str(run.report["reindex"]["fts"]).startswith("not applicable")  # type: ignore[index]
        assert counts["indexes_rebuilt"] == 1
        assert counts["drift_checked"] == 6
        assert (await item(pg, old)).tier is Tier.ARCHIVED  # archived stays archived, not cold
        assert run.report["items"]["archived"] == 5  # type: ignore[index]
    finally:
        await service.aclose()


async def test_a_weekly_run_stopped_mid_way_is_finished_by_the_next(
    service: MemoryService, store: Store, address: Address, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [f"My colleague number {n} joined the project meeting" for n in range(7)]
    ids = [await add(service, address.person_id, t, days_ago=1) for t in texts]
    async with store.session() as session:
        await session.execute(update(MemoryItem).values(category=""))
    real = queries.set_categories
    calls = 0

    async def dies_on_the_third_batch(store: Store, categories: dict[int, str]) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("killed")
        await real(store, categories)

    monkeypatch.setattr(queries, "set_categories", dies_on_the_third_batch)
    with pytest.raises(RuntimeError, match="killed"):
        await weekly(ctx_for(service, batch=2))
    done = [i for i in ids if (await item(store, i)).category]
    assert len(done) == 4  # two batches committed
    monkeypatch.setattr(queries, "set_categories", real)
    counts = await weekly(ctx_for(service, batch=2))
    assert counts["categorised"] == 3  # the rest, nothing twice
    assert {(await item(store, i)).category for i in ids} == {"work"}


async def test_the_weekly_job_rebuilds_the_profile_from_its_summaries(
    service: MemoryService, store: Store, address: Address
) -> None:
    from gateway.config import ContinuityConfig
    from memory.continuity.profile import ProfileBook

    person = address.person_id
    ids = [
        await add(service, person, t, days_ago=3)
        for t in ("I work as a nurse on the night shift", "My manager approved my holiday")
    ]
    counts = await weekly(ctx_for(service), ContinuityConfig(profile_budget_tokens=120))
    assert counts["profiles"] == 1
    profile = await ProfileBook(store, ContinuityConfig()).latest(person)
    assert profile is not None
    assert profile.tokens <= 120
    nurse = next(line for line in profile.lines if "nurse" in line.text)
    assert nurse.sources[0].startswith("summary:")
    assert f"item:{ids[0]}" in nurse.sources
    # Nothing changed: no new version.
    assert (await weekly(ctx_for(service), ContinuityConfig(profile_budget_tokens=120)))[
        "profiles"
    ] == 0

"""The memory tree (issue 23) on a real store with the real MiniLM model: incremental
placement and splits lose no member, a rebuild neither, every summary is kept as a
version (a correction outlives a rebuild), a broad question packs the tree's topics
and a specific one the leaves, and the nightly job rebalances."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sqlalchemy import select
from sqlalchemy.engine import Connection

from gateway.config import Config
from gateway.store import Store
from gateway.store.repo import Address, resolve_address
from memory import recall as recall_module
from memory import repo
from memory.embed import SentenceEmbedder
from memory.jobs.base import JobContext
from memory.jobs.nightly import nightly
from memory.jobs.offload import CpuWork
from memory.porting.lookup import show
from memory.repo import NewItem
from memory.service import Episode, MemoryService, PackRequest
from memory.tree import build as tb
from memory.tree import rows
from memory.tree import service as tree_service
from memory.tree.models import TreeNode
from memory.tree.pack import classify
from memory.tree.service import members_of
from memory.tree.view import NodeView
from memory.types import ItemStatus, ItemType
from tests.conftest import make_config

pytestmark = pytest.mark.slow

START = datetime(2024, 3, 1, 18, 0, tzinfo=UTC)
# One line a day, four themes, so the tree has several clusters and topics.
DAYS = [
    "I baked a sourdough loaf this morning and the crust came out really crisp.",
    "I ran ten kilometres along the river before work and my knee felt fine.",
    "I practised the new chord progression on my guitar for an hour tonight.",
    "My manager asked me to lead the quarterly planning meeting next week.",
    "I tried a new lasagne recipe with spinach and ricotta for dinner tonight.",
    "I signed up for the city half marathon in October and started a training plan.",
    "I learned the opening riff of a blues song on the guitar this evening.",
    "The planning meeting went well and the team agreed on the new roadmap.",
    "I made fresh pasta from scratch for the first time with my sister.",
    "My long run on Sunday was eighteen kilometres and I kept a steady pace.",
    "I recorded myself playing guitar and the timing was better than last month.",
    "I finished the budget spreadsheet for the project at work late today.",
    "I roasted vegetables with rosemary and garlic for a dinner with friends.",
    "I bought new running shoes because my old pair had worn through the soles.",
    "My guitar teacher said my fingerpicking has improved a lot this spring.",
    "A colleague and I presented the roadmap to the directors this afternoon.",
]


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder.load()


@pytest.fixture
def memory_config(tmp_path: Path) -> Config:
    return make_config(
        tmp_path,
        memory={
            "embedder": "minilm",
            "tree": True,
            "tree_cluster_max": 4,
            "tree_topic_max": 2,
        },
    )


@pytest.fixture
async def store(memory_config: Config) -> AsyncIterator[Store]:
    async with Store(memory_config.database_url) as opened:
        yield opened


@pytest.fixture
async def address(store: Store) -> Address:
    return await resolve_address(store, "webchat", "session-a", display_name="Sam")


@pytest.fixture
async def service(
    store: Store, memory_config: Config, embedder: SentenceEmbedder
) -> AsyncIterator[MemoryService]:
    started = MemoryService(
        store, memory_config.memory, memory_config.data_dir / "memory-index", embedder
    )
    yield started
    await started.aclose()


async def say(
    service: MemoryService, address: Address, day: int, text: str = "", hours: int = 0
) -> list[int]:
    """Sam's line of ``day`` (or ``text``, ``hours`` later that day)."""
    return await service.ingest(
        [
            Episode(
                person_id=address.person_id,
                text=text or DAYS[day],
                at=START + timedelta(days=day, hours=hours),
                role="user",
                speaker="Sam",
                conversation_id=address.conversation_id,
            )
        ]
    )


def check_whole(nodes: dict[str, NodeView], ids: set[int]) -> None:
    """Every leaf is in a cluster, every cluster in a topic, and the root holds every item
    (through its topics: it keeps no list of every item)."""
    leaves = {k for k, n in nodes.items() if n.level == 0}
    clustered = {c for n in nodes.values() if n.level == 1 for c in n.child_keys}
    assert leaves == clustered
    clusters = {k for k, n in nodes.items() if n.level == 1}
    assert clusters == {c for n in nodes.values() if n.level == 2 for c in n.child_keys}
    assert set(members_of(nodes, "root")) == ids
    assert nodes["root"].item_ids == []
    assert set(nodes["root"].child_keys) == {k for k, n in nodes.items() if n.level == 2}


async def test_incremental_updates_and_splits_lose_no_member(
    service: MemoryService, address: Address
) -> None:
    ids: set[int] = set()
    for day in range(6):
        ids.update(await say(service, address, day))
    await service.tree.idle()
    first = await service.tree.nodes(address.person_id)
    check_whole(first, ids)
    clusters_before = {k for k, n in first.items() if n.level == 1}
    # One at a time, as turns come: each joins its nearest cluster(s); a full one splits.
    for day in range(6, len(DAYS)):
        ids.update(await say(service, address, day))
        await service.tree.idle()
        check_whole(await service.tree.nodes(address.person_id), ids)
    after = await service.tree.nodes(address.person_id)
    assert len([n for n in after.values() if n.level == 1]) > len(clusters_before)
    assert all(len(n.child_keys) <= 4 for n in after.values() if n.level == 1)
    await service.tree.rebuild(address.person_id)
    check_whole(await service.tree.nodes(address.person_id), ids)


async def test_a_rebuild_is_planned_in_the_jobs_process_and_builds_the_same_tree(
    service: MemoryService, address: Address, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids: set[int] = set()
    for day in range(len(DAYS)):
        ids.update(await say(service, address, day))
    await service.tree.idle()
    await service.tree.rebuild(address.person_id)
    in_process = await service.tree.nodes(address.person_id)
    async with CpuWork("process") as cpu:
        await service.tree.rebuild(address.person_id, cpu)
        # The whole plan (reading the leaves from the file, clustering, ranking lines,
        # summarising) went to the job's process in one step; only the write stays.
        assert cpu.calls == 1
        assert cpu.pid is not None
        assert cpu.pid != os.getpid()
    # The rebuild leaves the whole tree it wrote in the cache: no read of it follows.
    reads: list[int] = []
    read_nodes = rows.read_nodes

    def counted(connection: Connection, person_id: int) -> Any:
        reads.append(person_id)
        return read_nodes(connection, person_id)

    monkeypatch.setattr(rows, "read_nodes", counted)
    offloaded = await service.tree.nodes(address.person_id)
    assert reads == []
    check_whole(offloaded, ids)

    def shape(nodes: dict[str, NodeView]) -> dict[str, tuple[Any, ...]]:
        return {
            k: (
                n.level,
                sorted(n.child_keys),
                sorted(n.item_ids),
                sorted(n.parent_keys),
                n.summary,
                sorted(n.speakers),
                [q.text for q in n.quotes],
            )
            for k, n in nodes.items()
        }

    # The same functions, seeded the same: the very tree the serving process built.
    assert shape(offloaded) == shape(in_process)
    assert any(n.level == 1 for n in offloaded.values())
    # And the cached tree is the stored one.
    service.tree._cache.clear()
    assert shape(await service.tree.nodes(address.person_id)) == shape(offloaded)
    assert reads == [address.person_id]


async def test_versions_are_kept_and_a_correction_survives_a_rebuild(
    service: MemoryService, address: Address
) -> None:
    for day in range(8):
        await say(service, address, day)
    await service.tree.idle()
    before = dict(await service.tree.nodes(address.person_id))
    new = await say(service, address, 8)
    await service.tree.idle()
    after = await service.tree.nodes(address.person_id)
    # A cluster the new item joined (one that was there before: a split keeps its key).
    key = next(
        k for k, n in after.items() if n.level == 1 and set(new) <= set(n.item_ids) and k in before
    )
    history = await service.tree.versions(address.person_id, key)
    assert len(history) >= 2
    # The summary before the update is still there, word for word, with who wrote it.
    assert history[-2]["summary"] == before[key].summary
    assert history[-2]["version"] == before[key].version
    # The new version records the new member, and the leaves it was made of.
    assert set(new) <= set(history[-1]["item_ids"])
    assert not set(new) & set(history[-2]["item_ids"])
    assert sorted(history[-1]["child_keys"]) == sorted(after[key].child_keys)
    assert [h["version"] for h in history] == list(range(1, len(history) + 1))
    assert history[-2]["model"] == "extractive"
    assert history[-1]["reason"] == "update"
    # The root's versions record its topics (its members), no list of every item.
    roots = await service.tree.versions(address.person_id, "root")
    assert sorted(roots[-1]["child_keys"]) == sorted(after["root"].child_keys)
    assert roots[-1]["summary"] == after["root"].summary
    assert all(h["item_ids"] == [] for h in roots)
    version = await service.tree.correct(address.person_id, "root", "Sam cooks, runs and plays.")
    await say(service, address, 9)
    await service.tree.idle()
    await service.tree.rebuild(address.person_id)
    nodes = await service.tree.nodes(address.person_id)
    assert nodes["root"].summary == "Sam cooks, runs and plays."
    history = await service.tree.versions(address.person_id, "root")
    assert [h["reason"] for h in history if h["version"] == version] == ["correction"]


async def test_the_root_keeps_its_topics_not_every_item(
    service: MemoryService, address: Address, store: Store
) -> None:
    """An update rewrites no list of every item: the root's stored members are its topics,
    and a root version is written only when its summary or its topics change."""
    ids: set[int] = set()
    for day in range(len(DAYS)):
        ids.update(await say(service, address, day))
        await service.tree.idle()
    async with store.reader() as session:
        row = await session.scalar(
            select(TreeNode).where(TreeNode.person_id == address.person_id, TreeNode.key == "root")
        )
        assert row is not None
        assert row.item_ids == []
    nodes = await service.tree.nodes(address.person_id)
    assert set(members_of(nodes, "root")) == ids
    roots = await service.tree.versions(address.person_id, "root")
    # One update a day, but a version only for a change of the summary or the topics.
    for older, newer in itertools.pairwise(roots):
        assert (older["summary"], sorted(older["child_keys"])) != (
            newer["summary"],
            sorted(newer["child_keys"]),
        )
    # The newest version is the summary the root shows (never overwritten silently).
    assert roots[-1]["summary"] == nodes["root"].summary


async def test_show_gives_an_items_paths_in_the_tree(
    service: MemoryService, address: Address, store: Store
) -> None:
    ids: list[int] = []
    for day in range(8):
        ids.extend(await say(service, address, day))
    await service.tree.idle()
    nodes = await service.tree.nodes(address.person_id)
    shown = await show(store, ids[3])
    assert shown["tree"]
    for path in shown["tree"]:
        # root > topic > cluster > leaf, each a child of the one before.
        assert [nodes[k].level for k in path] == [3, 2, 1, 0]
        assert ids[3] in nodes[path[-1]].item_ids
        for parent, child in itertools.pairwise(path):
            assert child in nodes[parent].child_keys
    # A leaf in two clusters (soft assignment) has a path through each.
    leaf = shown["tree"][0][-1]
    assert len(shown["tree"]) == len(nodes[leaf].parent_keys)


async def test_the_versions_of_every_group_are_one_read(
    service: MemoryService, address: Address, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The panel's page shows the versions of every node above the leaves: one read for
    all of them, the same as one node at a time."""
    for day in range(10):
        await say(service, address, day)
        await service.tree.idle()
    nodes = await service.tree.nodes(address.person_id)
    groups = [k for k, n in nodes.items() if n.level > 0]
    one_by_one = {k: await service.tree.versions(address.person_id, k) for k in groups}
    reads: list[int] = []
    real = rows.read_versions

    def counted(connection: Connection, person_id: int, keys: Sequence[str]) -> list[object]:
        reads.append(len(keys))
        return real(connection, person_id, keys)

    monkeypatch.setattr(rows, "read_versions", counted)
    assert await service.tree.versions_of(address.person_id, groups) == one_by_one
    assert reads == [len(groups)]
    assert all(one_by_one[k] for k in groups)


def test_the_summaries_word_analysis_is_tfidfs_own() -> None:
    """``build._words`` (a callable, to skip sklearn's stop-word check at every fit) gives
    the very matrix of ``stop_words="english"``."""
    texts = [*DAYS, "It's the THE and of", "Über-fast café runs, 10km!"]
    ours = TfidfVectorizer(analyzer=tb._words).fit_transform(texts)
    theirs = TfidfVectorizer(stop_words="english").fit_transform(texts)
    assert ours.shape == theirs.shape
    assert abs(ours - theirs).max() < 1e-12


def test_the_query_decides_the_level() -> None:
    names = {"Sam", "Caroline"}
    assert classify("What has Caroline been up to?", names).name == "broad"
    assert classify("What do you know about Sam?", names).name == "broad"
    assert classify("Sam?", names).name == "broad"
    assert classify("When did Sam run the half marathon in October?", names).name == "specific"
    assert classify("What kinds of food does Sam cook?", names).name == "thematic"
    assert classify("What types of music does Caroline listen to?", names).name == "thematic"
    assert classify("What hobbies does Sam have?", names).name == "thematic"
    # The singular asks the kind of one thing: a specific question, the flat pack.
    assert classify("What kind of cake did Sam bake for the party?", names).name == "specific"
    assert classify("What sort of car does Caroline drive?", names).name == "specific"
    # A broad cue with a flat similarity spread is broad even with more content words.
    flat = [0.41, 0.40, 0.40, 0.39, 0.39]
    assert classify("What is Sam up to with cooking, running and music?", names, flat).name == (
        "broad"
    )


async def test_a_broad_question_packs_topics_and_a_specific_one_leaves(
    service: MemoryService, address: Address, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = START + timedelta(days=30)
    # No tree yet (a person's first minutes): the broad question gets the flat pack.
    await say(service, address, 0)
    selected: list[str] = []
    real = recall_module.select

    def counted(*args: Any, **kwargs: Any) -> Any:
        selected.append(kwargs["query"])
        return real(*args, **kwargs)

    monkeypatch.setattr(recall_module, "select", counted)
    early = await service.build_pack(PackRequest(address.person_id, "What has Sam been up to?", at))
    assert DAYS[0] in early.text
    assert selected == ["What has Sam been up to?"]
    for day in range(1, len(DAYS)):
        await say(service, address, day)
    await service.tree.idle()
    selected.clear()
    broad = await service.build_pack(PackRequest(address.person_id, "What has Sam been up to?", at))
    assert "[topic " in broad.text
    # One line per day (leaf) within the budget: each theme is there.
    for words in ("sourdough", "kilometres", "guitar", "roadmap"):
        assert words in broad.text
    # The tree's pack replaces the flat one whole: no candidate is scored for it.
    assert selected == []
    assert set(broad.kept) <= set(members_of(await service.tree.nodes(address.person_id), "root"))
    specific = await service.build_pack(
        PackRequest(address.person_id, "Which shoes did Sam buy for running?", at)
    )
    assert "[topic " not in specific.text
    assert DAYS[13] in specific.text
    assert selected == ["Which shoes did Sam buy for running?"]


async def test_the_nightly_job_rebalances_the_tree(
    service: MemoryService, address: Address
) -> None:
    for day in range(6):
        await say(service, address, day)
    await service.tree.idle()
    ctx = JobContext(service, START + timedelta(days=7))
    counts = await nightly(ctx)
    assert counts["tree_rebalanced"] == 1
    assert "root" in await service.tree.nodes(address.person_id)


async def test_an_update_reads_only_the_persons_current_items(
    service: MemoryService, address: Address, store: Store
) -> None:
    """The items are looked up by id alone (with the person in the WHERE clause SQLite
    read every item of the person); another person's, a retired one and, for the
    vectors' read, an unembedded one are still left out."""
    mine = await say(service, address, 0) + await say(service, address, 1)
    other = await resolve_address(store, "webchat", "session-b", display_name="Ada")
    theirs = await say(service, other, 2)
    await service.retire(mine[1], ItemStatus.FORGOTTEN)
    unembedded = await repo.insert_items(
        store, [NewItem(address.person_id, ItemType.EPISODE, "No vector here.", START)]
    )
    ids = [*mine, *theirs, *unembedded]
    tree = service.tree
    assert [r[0] for r in await tree._rows(address.person_id, ids)] == [
        mine[0],
        *unembedded,
    ]
    with_vectors = await tree._rows(address.person_id, ids, with_vectors=True)
    assert [r[0] for r in with_vectors] == [mine[0]]
    assert all(len(r) == 7 and r[6] is not None for r in with_vectors)
    every = await tree._rows(address.person_id, ids, active_only=False)
    assert {r[0] for r in every} == {*mine, *unembedded}


async def test_a_large_person_without_a_tree_is_built_at_night(
    service: MemoryService, address: Address, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree turned on over a store that holds a large person: an update does not
    build their whole tree (a minute of CPU at 100k items); the nightly rebuild does,
    and the updates after it are incremental."""
    monkeypatch.setattr(tree_service, "FIRST_BUILD_MAX_ITEMS", 4)
    ids: set[int] = set()
    for day in range(6):
        ids.update(await say(service, address, day))
    await service.tree.idle()
    assert await service.tree.nodes(address.person_id) == {}
    counts = await nightly(JobContext(service, START + timedelta(days=7)))
    assert counts["tree_rebalanced"] == 1
    check_whole(await service.tree.nodes(address.person_id), ids)
    ids.update(await say(service, address, 6))
    await service.tree.idle()
    check_whole(await service.tree.nodes(address.person_id), ids)


async def test_an_update_reads_only_the_new_items_and_the_touched_branch(
    service: MemoryService, address: Address, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids: set[int] = set()
    for day in range(12):
        ids.update(await say(service, address, day))
    await service.tree.idle()
    before = await service.tree.nodes(address.person_id)
    check_whole(before, ids)
    tree = service.tree

    async def whole_read(person_id: int) -> list[object]:
        raise AssertionError("an incremental update read every leaf")

    read: list[int] = []
    rows = tree._rows

    async def counted(person_id: int, wanted: Sequence[int], **kw: bool) -> list[object]:
        read.extend(wanted)
        return await rows(person_id, wanted, **kw)

    monkeypatch.setattr(tree, "leaves", whole_read)
    monkeypatch.setattr(tree, "_rows", counted)
    new = await say(service, address, 12)
    ids.update(new)
    await tree.idle()
    after = await tree.nodes(address.person_id)
    check_whole(after, ids)
    # The new item only: the cluster(s) it joined are summarised from their leaves'
    # stored lines, so their other members are not read again.
    assert set(read) == set(new)
    joined = {p for n in after.values() if set(new) & set(n.item_ids) for p in n.parent_keys}
    lines = {q.item_id for k in after[next(iter(joined))].child_keys for q in after[k].quotes}
    assert {q.item_id for q in after[next(iter(joined))].quotes} <= lines
    # The clusters it did not join kept their summaries (no new version).
    untouched = [k for k, n in before.items() if n.level == 1 and k not in joined]
    assert untouched
    assert all(after[k].version == before[k].version for k in untouched if k in after)
    # A note that grows (a later turn the same day) is ranked again from its own items.
    read.clear()
    later = await say(
        service,
        address,
        12,
        "Later that evening I sketched the slides for the roadmap review.",
        hours=2,
    )
    await tree.idle()
    grown = await tree.nodes(address.person_id)
    note = next(n for n in grown.values() if n.level == 0 and set(later) <= set(n.item_ids))
    assert set(read) == set(note.item_ids) == set(new) | set(later)


async def test_a_grown_note_whose_lines_stay_is_ranked_once(
    service: MemoryService, address: Address, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later turn the same day that is not one of the note's best lines (under 8
    words) changes no summary above it: the update ranks the note's sentences once and
    keeps its cluster's, topic's and root's quotes, which are what ranking them again
    would give."""
    ids: set[int] = set()
    for day in range(8):
        ids.update(await say(service, address, day))
    await service.tree.idle()
    before = dict(await service.tree.nodes(address.person_id))
    calls: list[int] = []
    real = tb.central

    def counted(quotes: Sequence[tb.Quote], k: int, *, per_item: int = 1) -> list[tb.Quote]:
        calls.append(k)
        return real(quotes, k, per_item=per_item)

    monkeypatch.setattr(tb, "central", counted)
    ids.update(await say(service, address, 7, "Nice.", hours=1))
    await service.tree.idle()
    assert calls == [tb.LEAF_LINES]
    after = await service.tree.nodes(address.person_id)
    check_whole(after, ids)
    assert {k: n.summary for k, n in after.items() if n.level > 0} == {
        k: n.summary for k, n in before.items() if n.level > 0
    }
    # Each kept summary is what ranking its children's lines again gives.
    for node in after.values():
        if node.level in (1, 2):
            below = [q for c in node.child_keys for q in after[c].quotes]
            assert node.quotes == real(below, 3)
    root = after["root"]
    below = [q for t in root.child_keys for q in after[t].quotes]
    assert root.quotes == real(below, min(5, max(2, len(root.child_keys))))


async def test_a_burst_of_turns_is_one_update(service: MemoryService, address: Address) -> None:
    tree = service.tree
    tree.config = replace(tree.config, tree_update_window_s=3600.0, tree_update_max_pending=100)
    ids: set[int] = set()
    for day in range(6):
        ids.update(await say(service, address, day))
    for _ in range(20):
        await asyncio.sleep(0)
    # Within the window nothing has run: the turns wait in the person's queue.
    assert list(tree.update_items) == []
    assert await tree.nodes(address.person_id) == {}
    await tree.idle()
    # ``idle`` runs the queue now, as one update for the whole burst.
    assert list(tree.update_items) == [len(ids)]
    check_whole(await tree.nodes(address.person_id), ids)
    # A full queue does not wait for the window.
    tree.config = replace(tree.config, tree_update_max_pending=2)
    for day in (6, 7):
        ids.update(await say(service, address, day))
    for _ in range(600):
        if len(tree.update_items) == 2:
            break
        await asyncio.sleep(0.05)
    assert list(tree.update_items) == [6, 2]
    check_whole(await tree.nodes(address.person_id), ids)


async def test_a_thematic_question_packs_clusters_under_their_topics(
    service: MemoryService, address: Address
) -> None:
    for day in range(len(DAYS)):
        await say(service, address, day)
    await service.tree.idle()
    nodes = await service.tree.nodes(address.person_id)
    at = START + timedelta(days=30)
    question = "What kinds of food does Sam usually cook?"
    assert classify(question, {"Sam"}).name == "thematic"
    pack = await service.build_pack(PackRequest(address.person_id, question, at))
    headings = re.findall(r"\[theme ([^\]]+)\]", pack.text)
    assert headings
    keys = [k.strip() for h in headings for k in h.split(">")]
    # Level 2 (the topic) over level 1 (the cluster), not leaves, not the root.
    assert {nodes[k].level for k in keys} == {1, 2}
    themed = pack.text.split("[theme ", 1)[1]
    assert any(w in themed for w in ("sourdough", "lasagne", "pasta", "roasted"))
    # The flat pack still fills the rest, within the budget, and quotes no turn again.
    assert pack.tokens <= service.settings.budget_tokens
    assert all(pack.text.count(day) <= 1 for day in DAYS)
    specific = await service.build_pack(
        PackRequest(address.person_id, "Which shoes did Sam buy for running?", at)
    )
    assert "[theme " not in specific.text


async def test_a_large_write_pauses_between_chunks_in_one_transaction(
    store: Store, address: Address
) -> None:
    count = 2 * rows.WRITE_CHUNK + 100
    nodes = [
        rows.NodeWrite(
            f"item:{i}",
            0,
            [],
            [i],
            [["2024-01-01T00:00:00+00:00", "Sam", f"line {i}", i]],
            f"line {i}",
            tree_service.EXTRACTIVE,
            None,
            None,
            None,
            [],
        )
        for i in range(count)
    ]
    paused: list[int] = []

    def write(connection: Connection) -> tuple[int, list[NodeView]]:
        return rows.write_nodes(
            connection,
            address.person_id,
            nodes,
            reason="rebuild",
            replace_all=True,
            now=datetime(2024, 1, 2, tzinfo=UTC),
            pause=lambda: paused.append(1),
        )

    written, stored = await store.write(write)
    assert len(paused) == 2
    # Every chunk's versions are counted, and every node is stored.
    assert written == len(stored) == count
    stored_keys = await store.read(lambda c: [r.key for r in rows.read_nodes(c, address.person_id)])
    assert sorted(stored_keys) == sorted(n.key for n in nodes)

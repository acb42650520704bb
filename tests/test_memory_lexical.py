"""The in-memory full-text index: FTS5's ranking, kept in step with the store.

It must rank as the store's FTS5 ``bm25()`` does (same stems, same scores)
when the person's items are the whole store, follow every change of what is
recallable (new, superseded, forgotten, archived, restored, deleted), and
stand in for FTS5 in the pack once built, FTS5 answering until then.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from gateway.config import Config
from gateway.store import Store
from gateway.store.repo import Address, resolve_address
from memory import repo
from memory.curate import MemoryCurator
from memory.lexical import Fts5Tokenizer, LexicalIndex
from memory.repo import NewItem
from memory.service import Episode, MemoryService, PackRequest
from memory.types import ItemStatus, ItemType

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SAID = [
    ("I went hiking near Lisbon with Ana", "Sam"),
    ("Hiking again! The hills near Lisbon are steep", "Sam"),
    ("Ana runs a pottery studio in Kyoto", "Ada"),
    ("We were running late for the pottery class", "Sam"),
    ("Kyoto in May: temples, tea and too many photos", "Ada"),
    ("My cat Miso hikes nowhere, he sleeps", "Sam"),
    ("Lisbon, Lisbon, Lisbon: I can't stop talking about it", "Ada"),
    ("Ana asked about Sam's trip", "Ana"),
]


@pytest.fixture
async def service(store: Store, config: Config) -> AsyncIterator[MemoryService]:
    made = MemoryService(store, config.memory, config.data_dir / "memory-index", None)
    yield made
    await made.aclose()


async def person(store: Store, name: str) -> Address:
    return await resolve_address(store, "webchat", f"session-{name}", display_name=name)


async def say(service: MemoryService, who: Address, lines: list[tuple[str, str]]) -> list[int]:
    return await service.ingest(
        [
            Episode(
                person_id=who.person_id,
                text=text,
                at=T0 + timedelta(minutes=n),
                role="user" if speaker == "Sam" else "assistant",
                speaker=speaker,
                conversation_id=who.conversation_id,
            )
            for n, (text, speaker) in enumerate(lines)
        ]
    )


def test_stems_are_the_stores_stems() -> None:
    tokenizer = Fts5Tokenizer()
    assert tokenizer.stems(["hiking", "hikes", "Running", "café"]) == [
        "hike",
        "hike",
        "run",
        "cafe",
    ]
    assert tokenizer.stems([]) == []


def test_a_stem_asked_twice_counts_twice_and_ties_go_to_the_lower_id() -> None:
    index = LexicalIndex(Fts5Tokenizer())
    index.add([(7, "hiking in the hills", ""), (3, "hiking in the hills", ""), (5, "tea", "")])
    once = index.search(["hiking"], 10)
    twice = index.search(["hiking", "hikes"], 10)
    assert [i for i, _ in once] == [3, 7]
    assert twice[0][1] == pytest.approx(2 * once[0][1])
    assert index.search(["hiking"], 1) == once[:1]
    assert index.search(["nothing"], 10) == []


async def test_ranks_exactly_as_fts5(store: Store, service: MemoryService) -> None:
    sam = await person(store, "Sam")
    await say(service, sam, SAID * 3)
    index = await service.lexical(sam.person_id, wait=True)
    assert index is not None
    assert index.count == len(SAID) * 3
    for message in (
        "hiking near Lisbon",
        "What did Ana say about pottery in Kyoto?",
        "running runs ran",
        "Sam",
        "Miso the cat",
    ):
        expected = await repo.fts_search(store, sam.person_id, message, 10)
        found = index.search(repo.content_terms(message), 10)
        assert [i for i, _ in found] == [i for i, _ in expected], message
        assert [s for _, s in found] == pytest.approx([s for _, s in expected], rel=1e-5)


async def test_the_index_follows_what_is_recallable(
    store: Store, service: MemoryService, config: Config
) -> None:
    sam = await person(store, "Sam")
    first = await say(service, sam, SAID)
    index = await service.lexical(sam.person_id, wait=True)
    assert index is not None

    def found(message: str) -> set[int]:
        assert index is not None
        return {i for i, _ in index.search(repo.content_terms(message), 20)}

    # Stored after the build: found at once.
    (teapot,) = await say(service, sam, [("The blue teapot cracked", "Sam")])
    assert found("teapot") == {teapot}
    # Forgotten: gone; restored from the panel: back.
    forgotten = await service.forget(sam.person_id, "blue teapot", at=T0)
    assert [i for i, _ in forgotten.items] == [teapot]
    assert found("teapot") == set()
    curator = MemoryCurator(service)
    await curator.restore(teapot)
    assert found("teapot") == {teapot}
    # Archived: out of the ANN index, still found by its words.
    await curator.archive(first[5])
    assert first[5] in found("Miso")
    # Edited: the new text is found, the old one no longer.
    edited = await curator.edit(first[2], content="Ana runs a ceramics studio in Osaka")
    assert found("Osaka") == {edited.id}
    assert first[2] not in found("pottery studio Kyoto")
    # Deleted: gone.
    await curator.delete(teapot)
    assert found("teapot") == set()
    # A remembered fact that supersedes an older one.
    (old,) = await service.add_items(
        [
            NewItem(
                person_id=sam.person_id,
                type=ItemType.PREFERENCE,
                content="Sam likes green tea",
                occurred_at=T0,
            )
        ]
    )
    await service.retire(old, ItemStatus.SUPERSEDED)
    assert old not in found("green tea")


async def test_fts5_answers_until_the_index_is_built(store: Store, service: MemoryService) -> None:
    sam, other = await person(store, "Sam"), await person(store, "Other")
    await say(service, sam, SAID)
    await say(service, other, [("Lisbon is far from here", "Other")] * 5)
    request = PackRequest(sam.person_id, "hiking near Lisbon", T0 + timedelta(days=1))
    # The first pack starts the build and does not wait for it.
    before = await service.build_pack(request)
    built = await service.lexical(sam.person_id, wait=True)
    assert built is not None
    after = await service.build_pack(request)
    # Both searches find the same of Sam's items (scores differ: FTS5 counts
    # everyone's items in its statistics, the index only Sam's).
    assert set(before.kept) == set(after.kept)
    assert before.kept
    other_ids = {i for i, _ in await repo.fts_search(store, other.person_id, "Lisbon", 10)}
    assert not other_ids & set(after.kept)
    # Another person's index is their own.
    theirs = await service.lexical(other.person_id, wait=True)
    assert theirs is not None
    assert {i for i, _ in theirs.search(["lisbon"], 10)} == other_ids


def test_tokenising_thousands_of_documents_leaves_nothing_behind() -> None:
    # FTS5 keeps deleted rows in its segments until a merge, and its vocabulary reads
    # them all: after a 100k-item build the stems of one message took 35 ms.
    tokenizer = Fts5Tokenizer()
    for batch in range(10):
        rows = [
            (n, f"On day {n} I hiked near lake {n * 7} with friend {n % 97} (note {n}).", "Sam")
            for n in range(batch * 2000 + 1, (batch + 1) * 2000 + 1)
        ]
        counts, lengths = tokenizer.documents(rows)
        assert len(lengths) == 2000
        assert "hike" in {stem for _, stem, _, _ in counts}
        # FTS5's own merges clean up now and then: 46, 92, 2, 48 ... pages without ours.
        assert tokenizer.pages()[0] <= 4
    assert tokenizer.stems(["hiked", "lakes", "friends"]) == ["hike", "lake", "friend"]
    assert tokenizer.pages()[1] <= 4


async def test_a_built_index_is_out_of_the_cyclic_collectors_reach(
    store: Store, service: MemoryService
) -> None:
    # A full collection walks every tracked object with the GIL held: at 100k items
    # the index's ~200,000 objects made one take a third of a second.
    ada = await person(store, "Ada")
    await say(service, ada, SAID)
    index = await service.lexical(ada.person_id, wait=True)
    assert index is not None
    tracked = {id(found) for found in gc.get_objects()}  # the frozen ones are not listed
    assert id(index) not in tracked
    assert id(index._postings) not in tracked
    assert index.search(["lisbon"], 3)  # and it works as before

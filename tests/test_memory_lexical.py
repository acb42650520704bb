"""The in-memory full-text index: FTS5's ranking, kept in step with the store.

It must rank as the store's FTS5 ``bm25()`` does (same stems, same scores)
when the person's items are the whole store, follow every change of what is
recallable (new, superseded, forgotten, archived, restored, deleted), and
stand in for FTS5 in the pack once built, FTS5 answering until then.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from gateway.config import Config
from gateway.errors import StoreError
from gateway.store import Store
from gateway.store.repo import Address, resolve_address
from memory import repo
from memory.curate import MemoryCurator
from memory.lexical import (
    Fts5Tokenizer,
    LexicalIndex,
    LexicalRow,
    LexicalUnreadable,
    _postings_below,
)
from memory.repo import NewItem
from memory.service import Episode, MemoryService, PackRequest
from memory.types import ItemStatus, ItemType

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
DB = "0123456789abcdef0123456789abcdef"  # a Store.identity
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


async def test_every_word_matches_as_fts5s_and(store: Store, service: MemoryService) -> None:
    # What forget and "before the trip" search with when the store has no FTS5.
    sam = await person(store, "Sam")
    await say(service, sam, SAID * 2)
    index = await service.lexical(sam.person_id, wait=True)
    assert index is not None
    for message in ("hiking Lisbon", "pottery Kyoto Ana", "Lisbon Lisbon", "Miso teapot", "cat"):
        terms = repo.content_terms(message)
        expression = " AND ".join(f'"{t}"' for t in terms)
        expected = await repo.fts_match(store, sam.person_id, expression, 10)
        found = index.search(terms, 10, every=True)
        assert [i for i, _ in found] == [i for i, _ in expected], message
        assert [s for _, s in found] == pytest.approx([s for _, s in expected], rel=1e-5)
    assert index.search(["miso", "teapot"], 10, every=True) == []
    assert len(index.search(["lisbon"], 10, every=True)) == 6  # three lines, said twice


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


def pause_the_build_after_its_first_read(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[asyncio.Event, asyncio.Event]:
    """(read, resume): a full-text build sets ``read`` once it has read some of the
    store, then waits for ``resume``."""
    read, resume = asyncio.Event(), asyncio.Event()
    rows_of = repo.lexical_rows

    async def read_then_wait(*args: Any) -> list[LexicalRow]:
        rows = await rows_of(*args)
        if rows and not read.is_set():
            read.set()
            await resume.wait()
        return rows

    monkeypatch.setattr(repo, "lexical_rows", read_then_wait)
    return read, resume


async def test_what_changes_while_the_index_is_built_reaches_it(
    store: Store, service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    sam = await person(store, "Sam")
    said = await say(service, sam, SAID)
    forgotten = await service.forget(sam.person_id, "cat Miso", at=T0)
    assert [i for i, _ in forgotten.items] == [said[5]]
    # The build reads the store, then waits: meanwhile an item it read is deleted
    # and one it did not read (forgotten) is restored.
    read, resume = pause_the_build_after_its_first_read(monkeypatch)
    assert await service.lexical(sam.person_id) is None  # the build starts
    await read.wait()
    curator = MemoryCurator(service)
    await curator.delete(said[0])
    await curator.restore(said[5])
    resume.set()
    index = await service.lexical(sam.person_id, wait=True)
    assert index is not None
    assert said[0] not in index.live_ids()
    assert said[5] in index.live_ids()
    assert index.search(["miso"], 5)[0][0] == said[5]
    # Once built, changes go straight to it.
    await curator.delete(said[1])
    assert said[1] not in index.live_ids()


async def test_a_build_that_fails_after_registering_leaves_no_index_missing_changes(
    store: Store, service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    sam = await person(store, "Sam")
    said = await say(service, sam, SAID)
    change = service._change_lexical

    async def store_down(*args: Any, **kwargs: Any) -> None:
        raise StoreError("the store went away")

    read, resume = pause_the_build_after_its_first_read(monkeypatch)
    assert await service.lexical(sam.person_id) is None  # the build starts
    await read.wait()
    # Deleted mid-build: queued; then applying the queue fails.
    await MemoryCurator(service).delete(said[0])
    monkeypatch.setattr(service, "_change_lexical", store_down)
    resume.set()
    with pytest.raises(StoreError):
        await service.lexical(sam.person_id, wait=True)
    # No half-updated index stays to answer with the deleted item; the next build
    # reads the store as it is.
    assert sam.person_id not in service._lexical
    monkeypatch.setattr(service, "_change_lexical", change)
    index = await service.lexical(sam.person_id, wait=True)
    assert index is not None
    assert said[0] not in index.live_ids()
    assert said[1] in index.live_ids()


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


def test_an_id_added_again_is_tokenised_anew() -> None:
    # SQLite gives the highest id to the next item once its item is deleted: the
    # new item must not be found by the old one's words.
    index = LexicalIndex(Fts5Tokenizer())
    index.add([(1, "tea in Kyoto", ""), (2, "a cracked blue teapot", "")])
    index.discard([2])
    index.add([(2, "hiking near Lisbon", "")])
    assert index.search(["teapot"], 10) == []
    assert [i for i, _ in index.search(["Lisbon"], 10)] == [2]
    assert index.count == 2
    index.add([(2, "hiking near Lisbon", "")])  # held already: nothing changes
    assert index.count == 2


def test_a_saved_index_loads_as_it_was(tmp_path: Path) -> None:
    tokenizer = Fts5Tokenizer()
    index = LexicalIndex(tokenizer)
    index.add([(n + 1, text, speaker) for n, (text, speaker) in enumerate(SAID)])
    index.discard([3])
    index.add([(3, "Kyoto temples at dawn", "Ada")])  # a second slot for id 3
    index.discard([5])
    path = tmp_path / "person-1.lexical.npz"
    index.save(path, DB)
    assert index.dirty == 0
    loaded = LexicalIndex.load(path, tokenizer, DB)
    assert loaded.count == index.count == len(SAID) - 1
    assert loaded.live_ids() == index.live_ids()
    for message in ("hiking near Lisbon", "pottery studio in Kyoto", "Ana", "temples", "tea"):
        words = repo.content_terms(message)
        assert loaded.search(words, 10) == index.search(words, 10), message
    # What changes after loading works as before.
    loaded.add([(20, "Lisbon trams", "Sam")])
    assert loaded.search(["trams"], 10)[0][0] == 20


def test_a_save_leaves_out_what_was_added_after_its_copy() -> None:
    # save copies the flags and the stem list under the lock, and reads the
    # postings after: an add in between must not reach the file.
    index = LexicalIndex(Fts5Tokenizer())
    index.add([(1, "tea in Kyoto", ""), (2, "green tea", "")])
    held, size = list(index._postings.items()), index._size
    before = {stem: p.arrays()[0].tolist() for stem, p in held}
    index.add([(3, "tea and Lisbon trams", "")])  # tea gets slot 2; trams is new
    stems, slots, _ = _postings_below(held, size)
    assert {stem: part.tolist() for stem, part in zip(stems, slots, strict=True)} == before
    assert "tram" not in stems


def test_a_damaged_or_foreign_saved_index_is_refused(tmp_path: Path) -> None:
    tokenizer = Fts5Tokenizer()
    index = LexicalIndex(tokenizer)
    index.add([(1, "tea in Kyoto", "")])
    path = tmp_path / "person-1.lexical.npz"
    with pytest.raises(LexicalUnreadable):
        LexicalIndex.load(path, tokenizer, DB)  # missing
    index.save(path, DB)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(LexicalUnreadable):
        LexicalIndex.load(path, tokenizer, DB)
    other = tmp_path / "other.lexical.npz"
    index.save(other, DB)
    with np.load(other) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["header"] = np.frombuffer(b'{"format": 0}', np.uint8)
    with other.open("wb") as file:
        np.savez(file, **arrays)
    with pytest.raises(LexicalUnreadable, match="another tokenizer or format"):
        LexicalIndex.load(other, tokenizer, DB)
    index.save(other, DB)
    with np.load(other) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["live"] = arrays["live"].astype(np.int8)  # would index, not mask
    with other.open("wb") as file:
        np.savez(file, **arrays)
    with pytest.raises(LexicalUnreadable, match="do not agree"):
        LexicalIndex.load(other, tokenizer, DB)


def test_a_saved_index_of_another_database_is_refused(tmp_path: Path) -> None:
    tokenizer = Fts5Tokenizer()
    index = LexicalIndex(tokenizer)
    index.add([(1, "tea in Kyoto", "")])
    path = tmp_path / "person-1.lexical.npz"
    index.save(path, DB)
    with pytest.raises(LexicalUnreadable, match="another database"):
        LexicalIndex.load(path, tokenizer, "f" * 32)
    # A file saved before databases had names is taken to be this one's.
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    header = json.loads(arrays["header"].tobytes())
    del header["store"]
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    with path.open("wb") as file:
        np.savez(file, **arrays)
    assert LexicalIndex.load(path, tokenizer, "f" * 32).live_ids() == {1}


async def test_a_restart_loads_the_index_and_catches_up_with_the_store(
    store: Store, config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    folder = config.data_dir / "memory-index"
    first = MemoryService(store, config.memory, folder, None)
    sam = await person(store, "Sam")
    said = await say(first, sam, SAID)
    assert await first.lexical(sam.person_id, wait=True) is not None
    await first.aclose()
    assert (folder / f"person-{sam.person_id}.lexical.npz").is_file()

    # While it is down: items stored, one forgotten, and two deleted: one the file
    # holds, and the newest, whose id is not given to the next item (migration 0009).
    (teapot,) = await repo.insert_items(store, [episode(sam, "The blue teapot cracked")])
    await repo.set_status(store, [said[0]], ItemStatus.FORGOTTEN, T0)
    delete = text("DELETE FROM memory_items WHERE id IN (:held, :newest)")
    await store.write(lambda c: c.execute(delete, {"held": said[5], "newest": teapot}))
    (kettle,) = await repo.insert_items(store, [episode(sam, "A whistling kettle from Ana")])
    assert kettle == teapot + 1

    second = MemoryService(store, config.memory, folder, None)
    with caplog.at_level(logging.INFO, logger="memory.service"):
        loaded = await second.lexical(sam.person_id, wait=True)
    assert loaded is not None
    assert "loaded" in caplog.text
    built = LexicalIndex(Fts5Tokenizer())
    built.add(await repo.lexical_rows(store, sam.person_id, 0, 1000))
    assert loaded.live_ids() == built.live_ids()
    for message in ("hiking near Lisbon", "teapot", "kettle", "Ana", "pottery in Kyoto", "Miso"):
        words = repo.content_terms(message)
        found, expected = loaded.search(words, 10), built.search(words, 10)
        assert [i for i, _ in found] == [i for i, _ in expected], message
        assert [s for _, s in found] == pytest.approx([s for _, s in expected]), message
    assert loaded.search(["teapot"], 10) == []
    assert loaded.search(["miso"], 10) == []
    await second.aclose()


def episode(who: Address, content: str) -> NewItem:
    return NewItem(
        person_id=who.person_id,
        type=ItemType.EPISODE,
        content=content,
        occurred_at=T0 + timedelta(days=1),
        speaker="Sam",
        conversation_id=who.conversation_id,
    )

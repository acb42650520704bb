"""The Memory Pack's fast paths give the answers of the plain queries they replace.

Full text without the join (and its fallback for a person with a small share
of the store), the time window from two indexed halves, and the trace stored
after the pack but before reinforcement reads it.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import text

from gateway.config import Config
from gateway.store import Store
from gateway.store.repo import Address, resolve_address, store_inbound
from memory import repo
from memory.repo import NewItem
from memory.service import MemoryService, PackRequest
from memory.types import ItemStatus, ItemType

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


async def person(store: Store, name: str) -> Address:
    return await resolve_address(store, "webchat", f"session-{name}", display_name=name)


def episode(who: Address, content: str, at: datetime, **extra: object) -> NewItem:
    return NewItem(
        person_id=who.person_id,
        type=ItemType.EPISODE,
        content=content,
        occurred_at=at,
        conversation_id=who.conversation_id,
        **extra,  # type: ignore[arg-type]
    )


async def joined(store: Store, person_id: int, message: str, limit: int) -> list[tuple[int, float]]:
    """The reference: BM25 over every match, joined to the person's active items."""
    params = {"query": repo.fts_query(message), "person": person_id, "limit": limit}
    return await store.read(
        lambda connection: [(int(r[0]), float(r[1])) for r in connection.execute(repo._FTS, params)]
    )


async def test_full_text_of_a_person_with_a_small_share_of_the_store(store: Store) -> None:
    big, small = await person(store, "Big"), await person(store, "Small")
    await repo.insert_items(
        store,
        [
            episode(big, f"Lisbon trip number {n} was sunny", T0 + timedelta(hours=n))
            for n in range(60)
        ],
    )
    mine = await repo.insert_items(
        store,
        [
            episode(small, "I moved to Lisbon in May", T0),
            episode(small, "Lisbon has steep hills and trams", T0 + timedelta(days=1)),
        ],
    )
    forgotten = await repo.insert_items(
        store, [episode(small, "Lisbon again", T0, status=ItemStatus.FORGOTTEN)]
    )
    # Few of the best hits are Small's: the unjoined search falls back to the joined one.
    hits = await repo.fts_search(store, small.person_id, "tell me about Lisbon", 2)
    assert {i for i, _ in hits} == set(mine)
    assert hits == await joined(store, small.person_id, "tell me about Lisbon", 2)
    assert not set(forgotten) & {i for i, _ in hits}
    # Big owns nearly every hit: unjoined, and the same answer.
    assert await repo.fts_search(store, big.person_id, "Lisbon trip", 10) == await joined(
        store, big.person_id, "Lisbon trip", 10
    )
    sources = await repo.pack_sources(
        store,
        repo.SourceQuery(small.person_id, "Lisbon", 2, 8, T0, 10, None, 30),
    )
    assert not sources.lexical_first
    assert {i for i, _ in sources.lexical} == set(mine)


async def test_full_text_ranks_every_match_as_the_joined_query_does(store: Store) -> None:
    sam = await person(store, "Sam")
    await repo.insert_items(
        store, [episode(sam, "pottery in Kyoto with Hana", T0 - timedelta(days=900))]
    )
    await repo.insert_items(
        store, [episode(sam, f"pottery class {n}", T0 - timedelta(days=n)) for n in range(30)]
    )
    await repo.insert_items(
        store, [episode(sam, f"Kyoto photo {n}", T0 + timedelta(days=n)) for n in range(5)]
    )
    message = "pottery in Kyoto"
    exact = await joined(store, sam.person_id, message, 50)
    assert await repo.fts_search(store, sam.person_id, message, 50) == exact


async def test_time_window_from_both_halves_newest_first(store: Store) -> None:
    sam = await person(store, "Sam")
    may = (date(2025, 5, 1), date(2025, 5, 31))
    start, end = datetime(2025, 5, 1, tzinfo=UTC), datetime(2025, 6, 1, tzinfo=UTC)
    ids = await repo.insert_items(
        store,
        [
            episode(sam, "said in May", datetime(2025, 5, 10, tzinfo=UTC)),
            episode(sam, "said in June", datetime(2025, 6, 10, tzinfo=UTC)),
            episode(
                sam,
                "said in June about May",
                datetime(2025, 6, 12, tzinfo=UTC),
                refers_start=date(2025, 5, 20),
            ),
            episode(
                sam,
                "said in April about a span into May",
                datetime(2025, 4, 2, tzinfo=UTC),
                refers_start=date(2025, 4, 28),
                refers_end=date(2025, 5, 2),
            ),
            episode(
                sam,
                "said in May about April",
                datetime(2025, 5, 3, tzinfo=UTC),
                refers_start=date(2025, 4, 1),
            ),
            episode(
                sam,
                "said in May, forgotten",
                datetime(2025, 5, 4, tzinfo=UTC),
                status=ItemStatus.FORGOTTEN,
            ),
        ],
    )
    may_said, _, june_about_may, april_span, may_about_april, _ = ids
    found = await repo.window_ids(store, sam.person_id, start, end, may, 30)
    assert found == [june_about_may, may_said, may_about_april, april_span]
    assert await repo.window_ids(store, sam.person_id, start, end, may, 2) == found[:2]
    # The indexes the halves rely on exist.
    names = await store.read(
        lambda connection: set(
            connection.execute(
                text("SELECT name FROM sqlite_master WHERE type = 'index'")
            ).scalars()
        )
    )
    assert {"ix_memory_items_person_occurred", "ix_memory_items_person_refers"} <= names


async def test_the_trace_is_stored_in_time_for_reinforcement(store: Store, config: Config) -> None:
    sam = await person(store, "Sam")
    await repo.insert_items(store, [episode(sam, "My cat Miso likes tuna", T0)])
    inbound = await store_inbound(store, sam, "what does Miso like?", T0, None)
    service = MemoryService(store, config.memory, config.data_dir / "memory-index", None)
    pack = await service.build_pack(
        PackRequest(sam.person_id, "what does Miso like?", T0, turn_id=inbound.turn_id)
    )
    assert pack.kept
    # Straight after the pack, before any wait: reinforcement finds the trace.
    result = await service.reinforce(
        inbound.turn_id, sam.person_id, "what does Miso like?", "Miso likes tuna.", T0
    )
    assert set(result.referred) | set(result.used) == set(pack.kept)
    trace = await repo.trace_for_turn(store, inbound.turn_id)
    assert trace is not None
    assert trace.kept_ids == list(pack.kept)
    assert trace.candidates
    assert trace.notes["timings_ms"]
    await service.aclose()


async def test_a_traces_candidates_are_stored_compressed_and_old_ones_still_read(
    store: Store, config: Config
) -> None:
    sam = await person(store, "Sam")
    await repo.insert_items(
        store,
        [episode(sam, f"On day {n} Miso the cat ate tuna by the window", T0) for n in range(60)],
    )
    inbound = await store_inbound(store, sam, "what does Miso eat?", T0, None)
    service = MemoryService(store, config.memory, config.data_dir / "memory-index", None)
    pack = await service.build_pack(
        PackRequest(sam.person_id, "what does Miso eat?", T0, turn_id=inbound.turn_id)
    )
    await service.traces_saved()
    await service.aclose()
    plain = json.dumps(list(pack.result.trace), separators=(",", ":")).encode()
    select_raw = text("SELECT id, candidates FROM memory_traces WHERE turn_id = :turn")
    (trace_id, stored) = await store.read(
        lambda c: c.execute(select_raw, {"turn": inbound.turn_id}).one()
    )
    assert isinstance(stored, bytes)
    assert len(stored) * 4 < len(plain)
    trace = await repo.trace_for_turn(store, inbound.turn_id)
    assert trace is not None
    assert trace.candidates == list(pack.result.trace)
    # A trace stored as plain JSON before 0010 reads as it was.
    older = [{"id": 1, "decision": "kept", "signals": {"similarity": 0.5}}]
    await store.write(
        lambda c: c.execute(
            text("UPDATE memory_traces SET candidates = :json WHERE id = :id"),
            {"json": json.dumps(older), "id": trace_id},
        )
    )
    trace = await repo.trace_for_turn(store, inbound.turn_id)
    assert trace is not None
    assert trace.candidates == older


async def test_a_pack_read_through_sqlalchemy_is_the_pack_read_by_sqlites_driver(
    store: Store, config: Config
) -> None:
    # A store in memory has no reader threads: its reads go through aiosqlite and
    # SQLAlchemy's statement, the path every driver but SQLite's own takes.
    packs = []
    async with Store("sqlite+aiosqlite:///:memory:") as in_memory:
        for each in (store, in_memory):
            sam = await person(each, "Sam")
            ada = await person(each, "Ada")
            await repo.insert_items(
                each,
                [
                    episode(sam, "We adopted a cat called Miso", T0),
                    episode(sam, "Miso likes tuna and naps on the radiator", T0 + timedelta(1)),
                    episode(sam, "Is Miso still afraid of the hoover?", T0 + timedelta(2)),
                    episode(sam, "Less so; Miso sits on it now", T0 + timedelta(2, 60)),
                    episode(ada, "Ada's Miso soup recipe", T0),
                    NewItem(
                        person_id=sam.person_id,
                        type=ItemType.PREFERENCE,
                        content="Sam prefers short answers about Miso",
                        occurred_at=T0,
                        source_message_ids=(3, 4),
                        refers_start=date(2025, 2, 27),
                    ),
                ],
            )
            service = MemoryService(each, config.memory, config.data_dir / "unused-index", None)
            asked = PackRequest(sam.person_id, "How is Miso?", T0 + timedelta(days=3))
            packs.append(await service.build_pack(asked))
            await service.aclose()
    on_driver, through_core = packs
    assert on_driver.kept == through_core.kept
    assert on_driver.text == through_core.text
    assert on_driver.result.trace == through_core.result.trace
    assert "Miso sits on it now" in on_driver.text
    assert "short answers about Miso" in on_driver.text  # ids and dates converted alike
    assert "soup" not in on_driver.text  # another person's memory

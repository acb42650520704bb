"""The migrations build the schema the models describe (an index added to a model
without its migration would exist in no real store), and migrate old stores
without losing what they hold."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from sqlalchemy import Connection, create_engine, text

import memory.models
import persona.models
from gateway.store import Store
from gateway.store.db import alembic_config
from gateway.store.models import Base
from gateway.store.repo import resolve_address
from memory import repo
from memory.models import MemoryTrace
from memory.repo import NewItem
from memory.types import ItemType
from tests.conftest import database_at

Indexes = dict[str, dict[str, tuple[str | None, ...]]]

# Imported for their tables: Base.metadata holds every model's.
MODEL_MODULES = (memory.models, persona.models)
T0 = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)


def _declared() -> Indexes:
    return {
        name: {
            str(index.name): tuple(getattr(c, "name", None) for c in index.expressions)
            for index in table.indexes
        }
        for name, table in Base.metadata.tables.items()
    }


def _migrated(connection: Connection) -> Indexes:
    # SQLite's own catalogue: SQLAlchemy's reflection skips expression indexes.
    def columns(index: str) -> tuple[str | None, ...]:
        rows = connection.exec_driver_sql(f"PRAGMA index_info('{index}')").all()
        return tuple(row[2] for row in sorted(rows))

    return {
        table: {
            row[1]: columns(row[1])
            for row in connection.exec_driver_sql(f"PRAGMA index_list('{table}')")
            # Indexes SQLite makes for primary keys and unique constraints: not the models'.
            if row[3] == "c"
        }
        for table in Base.metadata.tables
    }


async def test_every_models_index_is_made_by_a_migration(store: Store) -> None:
    declared, migrated = _declared(), await store.read(_migrated)
    assert declared["memory_items"]["ix_memory_items_episode_links"] == (
        "conversation_id",
        "type",
        "status",
        "id",
    )
    assert migrated == declared


ITEM_COLUMNS = (
    "INSERT INTO memory_items (id, person_id, type, content, speaker, role, author, channel, "
    "source_message_ids, source_ref, priority, confidence, status, tier, strength, "
    "access_count, created_at, occurred_at, embedding_model, superseded_by_id) VALUES "
    "(:id, 1, 'fact', :content, '', 'user', 'user', 'webchat', '[]', '', 0.5, 1.0, :status, "
    "'active', 0, 0, '2024-01-01 00:00:00', '2024-01-01 00:00:00', '', :by)"
)


async def test_migration_0009_keeps_every_item_its_links_and_its_full_text(
    tmp_path: Path,
) -> None:
    with database_at(tmp_path / "old.db", "0008") as connection:
        for item_id, content, status, by in (
            (1, "Sam lives in Porto", "superseded", 2),
            (2, "Sam lives in Lisbon", "active", None),
            (3, "Sam's cat is called Miso", "active", None),
        ):
            connection.execute(
                text(ITEM_COLUMNS),
                {"id": item_id, "content": content, "status": status, "by": by},
            )
        # The newest item deleted before the upgrade: its id would be given again.
        connection.execute(text("DELETE FROM memory_items WHERE id = 3"))

    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'old.db'}") as store:
        identity = store.identity
        items = {item.id: item for item in await repo.get_items(store, [1, 2])}
        # A self-reference the rebuild could have set to NULL.
        assert items[1].superseded_by_id == 2
        assert items[1].status.value == "superseded"
        assert [i for i, _ in await repo.fts_search(store, 1, "Lisbon", 10)] == [2]
        (new,) = await repo.insert_items(
            store, [NewItem(1, ItemType.FACT, "Sam plays the cello", T0)]
        )
        assert new == 3  # the highest id then, as the table held no more than 2
        await store.write(lambda c: c.execute(text("DELETE FROM memory_items WHERE id = 3")))
        (newer,) = await repo.insert_items(
            store, [NewItem(1, ItemType.FACT, "Sam plays the viola", T0)]
        )
        assert newer == 4  # never 3 again
        # The triggers came back: the full text follows inserts and deletes.
        assert [i for i, _ in await repo.fts_search(store, 1, "viola", 10)] == [4]
        assert await repo.fts_search(store, 1, "cello", 10) == []
        # FTS5 raises if its index and the items disagree.
        await store.write(
            lambda c: c.exec_driver_sql(
                "INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')"
            )
        )
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'old.db'}") as store:
        assert store.identity == identity  # named once, kept


async def test_a_deleted_items_id_is_never_given_again_and_stores_have_their_own_names(
    store: Store, tmp_path: Path
) -> None:
    made = [NewItem(1, ItemType.FACT, f"fact {n}", T0) for n in range(3)]
    await resolve_address(store, "webchat", "s", display_name="Sam")
    ids = await repo.insert_items(store, made)
    delete = text("DELETE FROM memory_items WHERE id = :id")
    await store.write(lambda c: c.execute(delete, {"id": ids[-1]}))
    (again,) = await repo.insert_items(store, made[:1])
    assert again == ids[-1] + 1
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'other.db'}") as other:
        assert len(other.identity) == 32
        assert other.identity != store.identity


async def test_migration_0010_undone_gives_older_code_its_json_back(tmp_path: Path) -> None:
    database = tmp_path / "agentgw.db"
    candidates = [{"id": 5, "decision": "kept", "signals": {"similarity": 0.25}}] * 40
    async with Store(f"sqlite+aiosqlite:///{database}") as store:
        sam = await resolve_address(store, "webchat", "s", display_name="Sam")
        await repo.save_trace(
            store, MemoryTrace(person_id=sam.person_id, query="q", candidates=candidates)
        )
    engine = create_engine(f"sqlite:///{database}")
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0009")
        kind, stored = connection.execute(
            text("SELECT typeof(candidates), candidates FROM memory_traces")
        ).one()
    engine.dispose()
    assert kind == "text"
    assert json.loads(stored) == candidates


async def test_migration_0012_takes_the_offline_notices_out_of_memory(tmp_path: Path) -> None:
    notice = (
        "No language model is configured, so I can't write a real reply yet.\n"
        "What I remember that bears on your message: Sam lives in Lisbon"
    )
    with database_at(tmp_path / "old.db", "0011") as connection:
        for item_id, content, role in (
            (1, "Sam lives in Lisbon", "user"),
            (2, notice, "assistant"),
            (3, "Lisbon is lovely in May, Sam.", "assistant"),
            # A person may quote it: their own words stay.
            (4, notice, "user"),
        ):
            connection.execute(
                text(
                    ITEM_COLUMNS.replace("'fact'", "'episode'").replace(
                        "'', 'user', 'user'", "'', :role, 'user'"
                    )
                ),
                {"id": item_id, "content": content, "status": "active", "by": None, "role": role},
            )
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'old.db'}") as store:
        assert [i.id for i in await repo.get_items(store, [1, 2, 3, 4])] == [1, 3, 4]
        assert [i for i, _ in await repo.fts_search(store, 1, "language model", 10)] == [4]
        await store.write(
            lambda c: c.exec_driver_sql(
                "INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')"
            )
        )


async def test_migration_0029_brings_archived_episodes_back_to_the_cold_tier(
    tmp_path: Path,
) -> None:
    """Episodes the old decay sweep archived (out of the ANN index) are cold after the
    upgrade, so their index takes them back; archived facts stay archived."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    async with Store(url) as store:
        address = await resolve_address(store, "webchat", "s-1", display_name="Sam")
        episode, fact = await repo.insert_items(
            store,
            [
                NewItem(address.person_id, ItemType.EPISODE, "I play the guitar", T0),
                NewItem(address.person_id, ItemType.FACT, "Sam plays the guitar", T0),
            ],
        )
        await store.write(lambda c: c.execute(text("UPDATE memory_items SET tier = 'archived'")))
    engine = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    try:
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0027")
            tiers = dict(connection.execute(text("SELECT id, tier FROM memory_items")).all())
            assert tiers == {episode: "archived", fact: "archived"}
    finally:
        engine.dispose()
    async with Store(url) as store:
        items = {i.id: i.tier.value for i in await repo.get_items(store, [episode, fact])}
        assert items == {episode: "cold", fact: "archived"}


async def test_migration_0035_empties_the_roots_item_list_and_keeps_its_history(
    tmp_path: Path,
) -> None:
    """The root keeps its topics, not every item id, from 0035 on; the versions written
    before keep the lists they were written with, and gain empty child keys."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    async with Store(url) as store:
        address = await resolve_address(store, "webchat", "s-1", display_name="Sam")
    engine = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    person, now = address.person_id, T0.isoformat()
    try:
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "0029")
            for key, level, items in (("root", 3, "[1, 2, 3]"), ("t:0", 2, "[1, 2, 3]")):
                connection.execute(
                    text(
                        "INSERT INTO memory_tree_nodes (person_id, key, level, parent_keys,"
                        " item_ids, child_keys, summary, quotes, model, version, corrected,"
                        " updated_at) VALUES (:p, :k, :l, '[]', :i, '[]', 's', '[]',"
                        " 'extractive', 1, 0, :t)"
                    ),
                    {"p": person, "k": key, "l": level, "i": items, "t": now},
                )
            connection.execute(
                text(
                    "INSERT INTO memory_tree_versions (person_id, key, version, summary,"
                    " item_ids, model, reason, written_at) VALUES (:p, 'root', 1, 's',"
                    " '[1, 2, 3]', 'extractive', 'build', :t)"
                ),
                {"p": person, "t": now},
            )
    finally:
        engine.dispose()
    async with Store(url) as store:
        rows = await store.read(
            lambda c: c.execute(text("SELECT key, item_ids FROM memory_tree_nodes")).all()
        )
        assert {k: json.loads(i) for k, i in rows} == {"root": [], "t:0": [1, 2, 3]}
        versions = await store.read(
            lambda c: c.execute(text("SELECT item_ids, child_keys FROM memory_tree_versions")).all()
        )
        assert [(json.loads(i), json.loads(c)) for i, c in versions] == [([1, 2, 3], [])]

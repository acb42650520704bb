"""The migrations build the schema the models describe: an index added to a model
without its migration would exist in no real store."""

from __future__ import annotations

from sqlalchemy import Connection

import memory.models
import persona.models
from gateway.store import Store
from gateway.store.models import Base

Indexes = dict[str, dict[str, tuple[str | None, ...]]]

# Imported for their tables: Base.metadata holds every model's.
MODEL_MODULES = (memory.models, persona.models)


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

"""Alembic environment: runs on the connection the Store hands over."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

import memory.jobs.models  # the upkeep calendar's tables
import memory.models
import memory.tree.models  # noqa: F401  (the memory tree's tables)
import persona.models  # noqa: F401  (persona tables on the same metadata)
from gateway.store import cluster_models as _cluster  # noqa: F401  (members, leases: issue 25)
from gateway.store import cost_models as _costs  # noqa: F401  (turn costs, issue 22)
from gateway.store.models import Base
from memory.continuity import handoff_models as _handoffs  # noqa: F401  (handoff, profile: issue 24)
from memory.continuity import models as _continuity  # noqa: F401  (focus, decisions: issue 24)
from memory.triggers import models as _triggers  # noqa: F401  (forward triggers, issue 22)

# Later issues add their tables to the same metadata by importing their models here.


target_metadata = Base.metadata


def _include_name(name: str | None, type_: str, parent_names: object) -> bool:
    # memory_fts (FTS5) and its shadow tables are made by raw SQL in 0002, not by models.
    return not (type_ == "table" and name is not None and name.startswith("memory_fts"))


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_name=_include_name,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    # Developer use: `agentgw db revision` points the URL here.
    url = context.config.get_main_option("sqlalchemy.url") or "sqlite:///data/agentgw.db"
    with create_engine(url).connect() as conn:
        run(conn)
        conn.commit()

"""Alembic environment: runs on the connection the Store hands over."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from gateway.store.models import Base

# Later issues add their tables to the same metadata by importing their models here.


target_metadata = Base.metadata


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
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

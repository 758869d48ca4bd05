"""Alembic's environment: runs the revisions on the connection
``reachstore_server/storage/schema.py``
hands over (already holding the migration lock, inside its transaction)."""

from __future__ import annotations

from alembic import context

from reachstore_server.storage import audit_models, reach_models  # noqa: F401 - registers their tables
from reachstore_server.storage.models import Base
from reachstore_server.storage.schema import server_default_differs

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("migrations run through reachstore_server.storage.schema, with a connection")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite alters most things by copying the table: batch mode does that for a revision.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
    compare_server_default=server_default_differs,
    transactional_ddl=True,
)
context.run_migrations()

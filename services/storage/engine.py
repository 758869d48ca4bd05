"""Engine construction for SQLite (the embedded default) and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import DefaultClause, Engine, String, create_engine, event, inspect, text
from sqlalchemy.orm import Session, sessionmaker

from services.storage import audit_models, reach_models  # noqa: F401 - registers their tables
from services.storage.models import Base


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets the query service read while the ingest service writes; busy_timeout makes a
    # writer wait for the other process's write lock instead of failing at once.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite files get WAL and their folder is created."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)


def init_schema(engine: Engine) -> None:
    """Creates missing tables and adds columns that newer code expects (idempotent).

    Added columns must have a server default (or be nullable) so existing rows get a
    value. The other change made in place is widening a text column on PostgreSQL
    (SQLite does not enforce lengths); anything else would need a real migration.
    """
    Base.metadata.create_all(engine)
    _add_missing_columns(engine)
    _widen_columns(engine)


def _add_missing_columns(engine: Engine) -> None:
    present = inspect(engine)
    with engine.begin() as conn:
        for table in Base.metadata.sorted_tables:
            have = {c["name"] for c in present.get_columns(table.name)}
            for column in table.columns:
                if column.name in have:
                    continue
                kind = column.type.compile(dialect=engine.dialect)
                default = column.server_default
                clause = ""
                if isinstance(default, DefaultClause) and isinstance(default.arg, str):
                    clause = " DEFAULT '" + default.arg.replace("'", "''") + "'"
                conn.execute(
                    text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}{clause}')
                )


def _widen_columns(engine: Engine) -> None:
    """VARCHAR columns the models now declare longer (e.g. ``audit_checkpoints.signature``
    for Ed25519 signatures) are widened: no stored value changes."""
    if engine.dialect.name != "postgresql":
        return
    present = inspect(engine)
    with engine.begin() as conn:
        for table in Base.metadata.sorted_tables:
            have = {c["name"]: c["type"] for c in present.get_columns(table.name)}
            for column in table.columns:
                want = column.type
                found = have.get(column.name)
                if not isinstance(want, String) or not isinstance(found, String):
                    continue
                if want.length and found.length and found.length < want.length:
                    conn.execute(
                        text(
                            f'ALTER TABLE {table.name} ALTER COLUMN "{column.name}" '
                            f"TYPE VARCHAR({want.length})"
                        )
                    )


def make_sessions(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)

"""Schema migrations from the outside: `reachstore migrate` as real processes, the schema read
back from the database's own catalogue, services refusing a schema not at head."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, exc, text

from services.storage.engine import make_engine
from services.storage.models import Base
from services.storage.schema import COMPARE, head_revision, migrate_to_head
from tests.conftest import PG_ADMIN_URL

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = Path(__file__).with_name("previous_release")
COMPONENTS = ("query", "ingest", "reach", "audit")


def _migrate(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "migrate", "--database-url", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _load_previous_release(url: str, *, without_triggers: bool = False) -> None:
    """The schema the release before migrations made, from its committed dump."""
    if url.startswith("sqlite"):
        script = (PREVIOUS / "sqlite_schema.sql").read_text(encoding="utf-8")
        if without_triggers:
            script = re.sub(r"CREATE TRIGGER[^;]*;[^;]*;", "", script)
        with sqlite3.connect(url.split("///", 1)[1]) as conn:
            conn.executescript(script)
        return
    script = (PREVIOUS / "postgresql_schema.sql").read_text(encoding="utf-8")
    if without_triggers:
        script = re.sub(r"CREATE TRIGGER[^;]*;", "", script)
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        conn.execute(script.encode())  # type: ignore[call-overload]


def _schema(url: str) -> list[str]:
    """Every table, index, constraint, sequence, function and trigger, as the database's
    catalogue states them, in a stable order."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("///", 1)[1]) as conn:
            rows = conn.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master "
                "WHERE name NOT IN ('sqlite_sequence') ORDER BY type, name"
            ).fetchall()
        return [" ".join(" ".join(str(part) for part in row).split()) for row in rows]
    database = urlparse(url).path.lstrip("/")
    dump = subprocess.run(
        ["pg_dump", "-h", "127.0.0.1", "-U", "postgres", "--schema-only", "--no-owner", database],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = []
    for line in dump.splitlines():
        # Comments, session settings and pg_dump's per-run \restrict token are not schema.
        if not line.strip() or line.startswith(("--", "SET ", "\\")) or "set_config" in line:
            continue
        lines.append(line.rstrip())
    return lines


@pytest.fixture
def other(database_url: str, tmp_path: Path) -> Iterator[str]:
    """A second empty database on the same engine as ``database_url``."""
    if database_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'other.db'}"
        return
    name = urlparse(database_url).path.lstrip("/") + "_other"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    try:
        yield database_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


def test_a_previous_release_database_and_an_empty_one_end_identical(
    database_url: str, other: str
) -> None:
    _load_previous_release(database_url)
    adopted = _migrate(database_url)
    assert adopted.returncode == 0, adopted.stderr
    assert "release before migrations" in adopted.stdout and head_revision() in adopted.stdout
    fresh = _migrate(other)
    assert fresh.returncode == 0, fresh.stderr
    assert f"empty database -> revision {head_revision()}" in fresh.stdout
    assert _schema(database_url) == _schema(other)
    assert any("TRIGGER" in line.upper() for line in _schema(other))


def test_adoption_adds_the_append_only_triggers_an_old_database_lacks(database_url: str) -> None:
    """create_all made the triggers only with their table: a database whose audit tables
    are older than the triggers has none, and adopting it must add them."""
    _load_previous_release(database_url, without_triggers=True)
    assert _migrate(database_url).returncode == 0
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO audit_checkpoints (tenant, seq, head_hash, signed_at, key_id, "
                    "signature) VALUES ('t', 1, 'h', 's', 'k', 'sig')"
                )
            )
        for statement in (
            "UPDATE audit_checkpoints SET signature = 'forged'",
            "DELETE FROM audit_checkpoints",
        ):
            with pytest.raises(exc.DatabaseError, match="append-only"):
                with engine.begin() as conn:
                    conn.execute(text(statement))
    finally:
        engine.dispose()


def test_a_database_at_head_is_what_the_models_declare(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        migrate_to_head(engine)
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts=COMPARE)
            assert compare_metadata(context, Base.metadata) == []
            # The same comparison sees a model change that has no revision.
            changed = MetaData()
            for table in Base.metadata.sorted_tables:
                table.to_metadata(changed)
            changed.tables["api_keys"].append_column(Column("added", Integer, nullable=True))
            [difference] = compare_metadata(context, changed)
            assert difference[0] == "add_column" and difference[3].name == "added"
    finally:
        engine.dispose()

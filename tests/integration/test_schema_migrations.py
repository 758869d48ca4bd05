"""Schema migrations from the outside: `reachstore migrate` as real processes, the schema read
back from the database's own catalogue, services refusing a schema not at head."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, exc, text

from reachstore_server.storage.engine import make_engine
from reachstore_server.storage.models import Base
from reachstore_server.storage.schema import COMPARE, LOCK_KEY, head_revision, migrate_to_head
from tests.conftest import PG_ADMIN_URL
from tests.e2e.system import start_service_once

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = Path(__file__).with_name("previous_release")
COMPONENTS = ("query", "ingest", "reach", "audit")


def _migrate(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reachstore_server.cli", "migrate", "--database-url", url],
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


def _migrations_at_once(url: str, count: int) -> list[subprocess.Popen[str]]:
    command = [sys.executable, "-m", "reachstore_server.cli", "migrate", "--database-url", url]
    return [
        subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]


def _outcomes(processes: list[subprocess.Popen[str]]) -> list[str]:
    outcomes = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert "Traceback" not in err
        outcomes.append(out.strip())
    return outcomes


def _check_once_at_head(url: str, outcomes: list[str]) -> None:
    head = head_revision()
    assert sorted(outcomes) == [f"schema already at revision {head}"] * (len(outcomes) - 1) + [
        f"schema migrated: empty database -> revision {head}"
    ]
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).all() == [(head,)]
            assert (
                compare_metadata(MigrationContext.configure(conn, opts=COMPARE), Base.metadata)
                == []
            )
    finally:
        engine.dispose()


def test_migrations_started_at_once_on_postgresql_take_turns(pg_database: str) -> None:
    """Six `reachstore migrate` processes on one fresh database, released together: the
    test holds the migration lock until every one of them waits for it."""
    count = 6
    with psycopg.connect(_libpq(pg_database), autocommit=True) as gate:
        gate.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        processes = _migrations_at_once(pg_database, count)
        deadline = time.monotonic() + 60
        while True:
            [(waiting,)] = gate.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchall()
            if waiting == count:
                break
            assert time.monotonic() < deadline, f"only {waiting} of {count} wait for the lock"
            assert all(p.poll() is None for p in processes), "a migration did not wait"
            time.sleep(0.1)
        gate.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    _check_once_at_head(pg_database, _outcomes(processes))


def test_migrations_started_at_once_on_sqlite_take_turns(tmp_path: Path) -> None:
    """Six processes on one fresh SQLite file, held behind the test's own write
    transaction until they have all started."""
    path = tmp_path / "reachstore.db"
    url = f"sqlite:///{path}"
    gate = sqlite3.connect(path, isolation_level=None)
    gate.execute("PRAGMA journal_mode=WAL")
    gate.execute("BEGIN IMMEDIATE")
    processes = _migrations_at_once(url, 6)
    time.sleep(4)  # their start-up; each then waits for the write lock
    assert all(p.poll() is None for p in processes), "a migration did not wait"
    gate.execute("COMMIT")
    gate.close()
    _check_once_at_head(url, _outcomes(processes))


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_service_refuses_an_empty_database(component: str, tmp_path: Path) -> None:
    started = start_service_once(component, tmp_path)
    assert started.returncode == 2, started.stderr
    assert "Traceback" not in started.stderr
    assert f"reachstore {component}: refusing to start: the database has no reachstore " in (
        started.stderr
    )
    assert "Run `reachstore migrate`" in started.stderr


@pytest.mark.parametrize("component", ["ingest", "audit"])
def test_a_service_refuses_a_previous_release_database(component: str, tmp_path: Path) -> None:
    _load_previous_release(f"sqlite:///{tmp_path / 'reachstore.db'}")
    started = start_service_once(component, tmp_path)
    assert started.returncode == 2, started.stderr
    assert "Traceback" not in started.stderr
    assert "was made by a release before migrations" in started.stderr
    assert "Run `reachstore migrate`" in started.stderr


def test_a_service_refuses_a_database_a_newer_release_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'reachstore.db'}"
    assert _migrate(url).returncode == 0
    with sqlite3.connect(tmp_path / "reachstore.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    started = start_service_once("query", tmp_path)
    assert started.returncode == 2, started.stderr
    assert "Traceback" not in started.stderr
    assert "revision 9999, which this reachstore does not know" in started.stderr


def test_migrate_and_keys_refuse_a_database_a_newer_release_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'reachstore.db'}"
    assert _migrate(url).returncode == 0
    with sqlite3.connect(tmp_path / "reachstore.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    for command in (
        ["migrate", "--database-url", url],
        ["keys", "list", "--data-dir", str(tmp_path)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "reachstore_server.cli", *command],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert "revision 9999, which this reachstore does not know" in done.stderr

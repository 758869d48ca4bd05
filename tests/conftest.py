"""Fixtures shared by every test layer: databases on both engines."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """Checks that PostgreSQL answers; CI starts it, so a failure here is a real failure."""
    try:
        psycopg.connect(PG_ADMIN_URL, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is required on 127.0.0.1:5432 and did not answer: {exc}")
    yield PG_ADMIN_URL


@pytest.fixture
def pg_database(pg_server: str) -> Iterator[str]:
    """A fresh database for one test, dropped afterwards: CI reuses the server."""
    name = f"reachstore_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:  # type: ignore[no-untyped-def]
    """The same test on SQLite (WAL file) and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'reachstore.db'}"
    return request.getfixturevalue("pg_database")

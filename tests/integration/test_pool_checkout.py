"""A pooled PostgreSQL connection whose server side has gone (the server restarted, an
administrator terminated the backend) is replaced at checkout, so the first call after
the database returns does not fail — without a round trip to the server on every
checkout (``reachstore_server/storage/engine.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import text

from reachstore_server.storage.engine import make_engine


@pytest.fixture
def engine(pg_database: str) -> Iterator[sqlalchemy.Engine]:
    made = make_engine(pg_database)
    yield made
    made.dispose()


def _backend_pid(engine: sqlalchemy.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(engine: sqlalchemy.Engine, pid: int) -> None:
    # From a connection of its own, outside the pool under test.
    url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        # pg_terminate_backend only signals; wait until the backend has gone.
        for _ in range(200):
            row = admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
            if row.fetchone() is None:
                break
            admin.execute("SELECT pg_sleep(0.01)")


def test_a_terminated_backend_is_replaced_at_checkout(engine: sqlalchemy.Engine) -> None:
    first = _backend_pid(engine)  # the pool now holds this connection, idle
    _terminate(engine, first)
    # The next transaction gets a working connection: no error reaches the caller.
    with engine.begin() as conn:
        assert conn.execute(text("SELECT 41 + 1")).scalar_one() == 42
    assert _backend_pid(engine) != first


def test_every_pooled_connection_of_a_restart_is_replaced(engine: sqlalchemy.Engine) -> None:
    # Several idle connections, all cut at once (as a restart does): none fails a caller.
    held = [engine.connect() for _ in range(4)]
    pids = [int(c.execute(text("SELECT pg_backend_pid()")).scalar_one()) for c in held]
    for conn in held:
        conn.close()
    for pid in pids:
        _terminate(engine, pid)
    for _ in range(8):
        with engine.begin() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1


def test_a_healthy_checkout_costs_no_statement(engine: sqlalchemy.Engine) -> None:
    # What the server saw last of the pooled connection's backend, before and right after
    # the pool handed the connection out again: a liveness query would show there.
    pid = _backend_pid(engine)
    url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as observer:

        def last_query() -> str:
            row = observer.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,))
            found = row.fetchone()
            assert found is not None, "the pooled backend has gone"
            return str(found[0])

        before = last_query()
        with engine.connect() as conn:
            assert last_query() == before
            assert int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one()) == pid
            conn.execute(text("SELECT 2")).scalar_one()
            assert last_query() == "SELECT 2"

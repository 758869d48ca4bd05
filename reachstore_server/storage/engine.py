"""Engine construction for SQLite (the embedded default) and PostgreSQL."""

from __future__ import annotations

import select
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.common import otel
from reachstore_server.storage import audit_models, reach_models  # noqa: F401 - registers their tables


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
    else:
        engine = create_engine(url, pool_size=10, max_overflow=10)
        event.listen(engine, "checkout", _replace_if_gone)
    otel.instrument_engine(engine)
    return engine


def _replace_if_gone(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Refuses a pooled PostgreSQL connection whose server side has gone, so that the pool
    opens a new one (SQLAlchemy retries the checkout on ``DisconnectionError``) and the
    first call after a restart does not fail.

    SQLAlchemy's ``pool_pre_ping`` asks the server on every checkout: a round trip per
    transaction, and several transactions make one reach action. An idle connection has
    nothing to read unless the server wrote to it, and a server that ends a session (a
    restart, ``pg_terminate_backend``, an idle timeout) writes an error and closes the
    socket. So a readable socket, or one libpq already knows is bad, is the sign; only
    then does the check go to the server. A peer that vanished without closing (a cut
    network) is found by the statement's own error, as a ping would have been.
    """
    if dbapi_connection.broken or dbapi_connection.closed:
        raise exc.DisconnectionError("the connection was lost")
    poller = select.poll()  # not select(): a busy process may hold descriptors past 1024
    poller.register(dbapi_connection.fileno(), select.POLLIN)
    if not poller.poll(0):
        return
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute(";")
        dbapi_connection.rollback()
    except Exception as error:  # any failure here means: not this connection
        raise exc.DisconnectionError(f"the server ended the connection: {error}") from error


def make_sessions(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def single_statement_reads(engine: Engine) -> Engine:
    """The engine to run a read of one statement on: on PostgreSQL in autocommit, which
    saves the BEGIN and ROLLBACK round trips around it (SQLite begins no transaction for a
    read anyway). Same pool, same connections."""
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine

"""Fixtures of the integration tests: ``engine`` is a fresh database of each kind with the
schema, ``store`` the reach store on one (a test module with another kind of store
defines its own ``store``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from reachstore_server.reach.store import ReachStore
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head


@pytest.fixture
def store(database_url: str) -> Iterator[ReachStore]:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    yield ReachStore(make_sessions(engine))
    engine.dispose()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    made = make_engine(database_url)
    migrate_to_head(made)
    yield made
    made.dispose()

"""A real in-process gRPC server with the fake query and ingest services, and a client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sdk_support import FakeIngestService, FakeQueryService, Served, serve

from reachstore import Client


@pytest.fixture
def served() -> Iterator[Served]:
    query = FakeQueryService(documents=[f"doc-{i}" for i in range(5)])
    ingest = FakeIngestService()
    server, port = serve(query, ingest)
    assert port, "could not bind the test gRPC server"
    try:
        yield Served(query, ingest, port)
    finally:
        # Frees handlers that deadline tests left blocked.
        query.release.set()
        ingest.release.set()
        server.stop(None)


@pytest.fixture
def client(served: Served) -> Iterator[Client]:
    target = f"127.0.0.1:{served.port}"
    with Client(target, target, timeout=5.0) as c:
        yield c

"""A real in-process gRPC server with the fake query, ingest and reach services, and a
client that reaches it over gRPC or over the real REST bridge (``transport`` parameter).

The server and the bridge run for the whole session; each test gets fresh fakes behind
them (``served``), so nothing a test scripts or records leaks into the next one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from sdk_bridge import LoopThread, start_bridge, stop_bridge
from sdk_support import FakeIngestService, FakeQueryService, FakeReachService, Served, serve

from reachstore import Client


class _Current:
    """Stands in for a servicer and forwards each RPC to the fake of the running test."""

    def __init__(self) -> None:
        self.fake: Any = None

    def __getattr__(self, name: str) -> Callable[[Any, grpc.ServicerContext], Any]:
        def forward(request: Any, context: grpc.ServicerContext) -> Any:
            return getattr(self.fake, name)(request, context)

        return forward


@dataclasses.dataclass
class _Session:
    port: int
    query: _Current
    ingest: _Current
    reach: _Current


@pytest.fixture(scope="session")
def _server() -> Iterator[_Session]:
    query, ingest, reach = _Current(), _Current(), _Current()
    server, port = serve(query, ingest, reach=reach)  # type: ignore[arg-type]
    assert port, "could not bind the test gRPC server"
    yield _Session(port, query, ingest, reach)
    server.stop(None)


@pytest.fixture
def served(_server: _Session) -> Iterator[Served]:
    query = FakeQueryService(documents=[f"doc-{i}" for i in range(5)])
    ingest = FakeIngestService()
    reach = FakeReachService()
    _server.query.fake, _server.ingest.fake, _server.reach.fake = query, ingest, reach
    try:
        yield Served(query, ingest, _server.port, reach)
    finally:
        # Frees handlers that deadline tests left blocked.
        query.release.set()
        ingest.release.set()


@pytest.fixture(scope="session")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="session")
def _bridge_url(_server: _Session, loop: LoopThread) -> Iterator[str]:
    bridge = start_bridge(loop, _server.port)
    yield bridge.url
    stop_bridge(loop, bridge)


@pytest.fixture
def rest_url(served: Served, _bridge_url: str) -> str:
    """The URL of the REST bridge in front of ``served``."""
    return _bridge_url


@pytest.fixture(params=["grpc", "rest"])
def transport(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def client(served: Served, transport: str, request: pytest.FixtureRequest) -> Iterator[Client]:
    """A client without retries, so each test sees exactly one call's behaviour (retries
    have their own tests)."""
    if transport == "rest":
        url: str = request.getfixturevalue("rest_url")
        sdk = Client.rest(url, timeout=5.0, retries=None)
    else:
        target = f"127.0.0.1:{served.port}"
        sdk = Client(
            target, target, reach_target=target, audit_target=target, timeout=5.0, retries=None
        )
    with sdk:
        yield sdk

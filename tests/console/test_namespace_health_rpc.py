"""ListNamespaceHealth on the query servicer in-process, on a real SQLite store with the
real embedder: document counts, the index state of this replica, and coverage counted
from the answers this replica gave, by category and error code; and its bad inputs."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore_server.common import errors
from reachstore_server.common.auth import LOCAL_CALLER, Caller
from reachstore_server.common.identity import reset_caller, set_caller
from reachstore_server.embedding import UsemEmbedder
from reachstore_server.ingest.worker import IngestWorker
from reachstore_server.query.api.servicer import QueryServicer
from reachstore_server.query.coverage import CoverageLog
from reachstore_server.query.indexes import IndexManager
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.repository import SemanticStore
from reachstore_server.storage.schema import migrate_to_head
from reachstore_server.storage.tasks import NewTask, TaskStore

TENANT = LOCAL_CALLER.tenant
# The servicer reads the caller from the call's context variable, never from the context.
NO_CONTEXT: Any = None


@pytest.fixture(scope="module")
def embedder() -> UsemEmbedder:
    return UsemEmbedder(threads=1)


@pytest.fixture
def servicer(tmp_path: Path, embedder: UsemEmbedder) -> Iterator[QueryServicer]:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    migrate_to_head(engine)
    sessions = make_sessions(engine)
    store, tasks = SemanticStore(sessions), TaskStore(sessions)
    for name in ("fast", "slow", "idle"):
        store.create_namespace(TENANT, name, embedder.model_id, embedder.dimension)
    tasks.enqueue(
        TENANT,
        [
            NewTask("fast", "f1", "Rivers flow into the sea.", {}, "error"),
            NewTask("fast", "f2", "Glaciers carve valleys.", {}, "error"),
            NewTask("slow", "s1", "Lakes fill in spring.", {}, "error"),
        ],
    )
    IngestWorker(store, tasks, embedder, batch_chunks=8).run_once()
    pool = concurrent.futures.ThreadPoolExecutor(4)
    yield QueryServicer(
        store,
        IndexManager(store, tmp_path / "indexes"),
        embedder,
        pool,
        default_timeout_ms=2000,
        cap_timeout_ms=10000,
        max_namespaces=8,
        fault_delay_ms={"slow": 3000},
    )
    pool.shutdown()
    engine.dispose()


def run(call: Any, who: Caller = LOCAL_CALLER) -> Any:
    token = set_caller(who)
    try:
        return asyncio.run(call)
    finally:
        reset_caller(token)


def query(servicer: QueryServicer, *namespaces: str, timeout_ms: int = 400) -> pb.QueryResponse:
    request = pb.QueryRequest(namespaces=list(namespaces), query="rivers", timeout_ms=timeout_ms)
    return run(servicer.Query(request, NO_CONTEXT))


def test_coverage_counts_what_this_replica_answered(servicer: QueryServicer) -> None:
    before = run(servicer.ListNamespaceHealth(pb.ListNamespaceHealthRequest(), NO_CONTEXT))
    assert [n.name for n in before.namespaces] == ["fast", "idle", "slow"]
    assert {n.name: n.index_state for n in before.namespaces} == {
        "fast": "not_loaded",
        "idle": "not_loaded",
        "slow": "not_loaded",
    }
    assert all(n.queries == 0 and n.coverage_ratio == 1.0 for n in before.namespaces)

    query(servicer, "fast", timeout_ms=5000)  # loads the index
    for _ in range(2):
        assert query(servicer, "fast", "slow", "nope").meta.coverage_ratio == pytest.approx(1 / 3)

    reply = run(servicer.ListNamespaceHealth(pb.ListNamespaceHealthRequest(), NO_CONTEXT))
    by_name = {n.name: n for n in reply.namespaces}
    assert reply.window_s == 3600 and reply.replica
    fast, slow, idle = by_name["fast"], by_name["slow"], by_name["idle"]
    assert (fast.document_count, fast.chunk_count, fast.index_state) == (2, 2, "ready")
    assert (fast.queries, fast.missing, fast.coverage_ratio) == (3, 0, 1.0)
    assert (slow.queries, slow.missing, slow.coverage_ratio) == (2, 2, 0.0)
    [reason] = slow.missing_by
    assert (reason.category, reason.error_code, reason.count) == (
        pf_pb2.CATEGORY_TIMEOUT,
        "NAMESPACE_TIMEOUT",
        2,
    )
    assert slow.last_missing_at.endswith("Z")
    assert (idle.queries, idle.index_state, idle.last_missing_at) == (0, "not_loaded", "")
    # A name that does not exist is not counted (and not listed).
    assert "nope" not in by_name

    # Keys see only the namespaces they are granted; paging by name.
    narrow = Caller(TENANT, "k1", frozenset({"operator"}), namespaces=("f*",))
    granted = run(servicer.ListNamespaceHealth(pb.ListNamespaceHealthRequest(), NO_CONTEXT), narrow)
    assert [n.name for n in granted.namespaces] == ["fast"]
    first = run(
        servicer.ListNamespaceHealth(pb.ListNamespaceHealthRequest(page_size=2), NO_CONTEXT)
    )
    assert [n.name for n in first.namespaces] == ["fast", "idle"] and first.next_page_token
    rest = run(
        servicer.ListNamespaceHealth(
            pb.ListNamespaceHealthRequest(page_size=2, page_token=first.next_page_token),
            NO_CONTEXT,
        )
    )
    assert [n.name for n in rest.namespaces] == ["slow"] and not rest.next_page_token


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"window_s": 59}, "window_s"),
        ({"window_s": 86401}, "window_s"),
        ({"window_s": -1}, "window_s"),
        ({"page_size": 101}, "page_size"),
        ({"page_size": -1}, "page_size"),
        ({"page_token": "garbage!"}, "page_token"),
    ],
)
def test_a_bad_request_names_its_field(
    servicer: QueryServicer, request_fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(errors.ReachstoreError) as caught:
        run(
            servicer.ListNamespaceHealth(
                pb.ListNamespaceHealthRequest(**request_fields), NO_CONTEXT
            )
        )
    assert (caught.value.code, caught.value.field) == ("INVALID_ARGUMENT", field)


def test_the_coverage_log_forgets_what_is_outside_the_window() -> None:
    now = [1_000_000.0]
    log = CoverageLog(clock=lambda: now[0])
    log.record("t", ["a"], [])
    log.record("t", [], [("a", pf_pb2.CATEGORY_TIMEOUT, "NAMESPACE_TIMEOUT")])
    log.record("u", [], [("a", pf_pb2.CATEGORY_PERMANENT, "X")])  # another tenant
    seen = log.coverage("t", "a", 3600)
    assert (seen.queries, seen.missing, seen.ratio) == (2, 1, 0.5)
    assert seen.by_reason == [(pf_pb2.CATEGORY_TIMEOUT, "NAMESPACE_TIMEOUT", 1)]
    now[0] += 2 * 3600
    log.record("t", ["a"], [])
    later = log.coverage("t", "a", 3600)
    assert (later.queries, later.missing, later.last_missing_at) == (1, 0, 0.0)
    # A day later the old minutes are gone from memory, not only from the window.
    now[0] += 25 * 3600
    log.record("t", ["a"], [])
    assert log.coverage("t", "a", 86400).queries == 1
    assert len(log._minutes[("t", "a")]) == 1

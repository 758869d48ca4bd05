"""The query servicer in-process on a real store, for cases a running system cannot set up."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import pytest

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore_server.embedding import UsemEmbedder
from reachstore_server.ingest.worker import IngestWorker
from reachstore_server.query.api.servicer import QueryServicer
from reachstore_server.query.indexes import IndexManager
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.repository import SemanticStore
from reachstore_server.storage.schema import migrate_to_head
from reachstore_server.storage.tasks import NewTask, TaskStore

TENANT = "default"


@pytest.fixture(scope="module")
def embedder() -> UsemEmbedder:
    return UsemEmbedder(threads=1)


@pytest.fixture
def parts(
    tmp_path: Path, embedder: UsemEmbedder
) -> Iterator[tuple[SemanticStore, TaskStore, QueryServicer]]:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    migrate_to_head(engine)
    sessions = make_sessions(engine)
    store, tasks = SemanticStore(sessions), TaskStore(sessions)
    pool = concurrent.futures.ThreadPoolExecutor(4)
    servicer = QueryServicer(
        store,
        IndexManager(store, tmp_path / "indexes"),
        embedder,
        pool,
        default_timeout_ms=2000,
        cap_timeout_ms=10000,
        max_namespaces=8,
    )
    yield store, tasks, servicer
    pool.shutdown()
    engine.dispose()


def _query(servicer: QueryServicer, *namespaces: str) -> pb.QueryResponse:
    request = pb.QueryRequest(namespaces=list(namespaces), query="glaciers", top_k=3)
    return asyncio.run(servicer.Query(request, None))  # type: ignore[arg-type]


def test_a_namespace_built_with_another_model_is_a_permanent_failure(parts, embedder) -> None:  # type: ignore[no-untyped-def]
    store, tasks, servicer = parts
    store.create_namespace(TENANT, "current", embedder.model_id, embedder.dimension)
    store.create_namespace(TENANT, "legacy", "some-older-model/1", 384)
    tasks.enqueue(
        TENANT,
        [
            NewTask("current", "g", "Glaciers carve valleys.", {}, "error"),
            NewTask("legacy", "g", "Glaciers carve valleys.", {}, "error"),
        ],
    )
    IngestWorker(store, tasks, embedder, batch_chunks=8).run_once()

    response = _query(servicer, "current", "legacy")
    assert response.meta.coverage_ratio == 0.5
    [failed] = response.meta.namespaces_failed
    assert (failed.namespace, failed.error_code, failed.retryable) == (
        "legacy",
        "EMBEDDING_MODEL_MISMATCH",
        False,
    )
    assert failed.structured_data["namespace_model"] == "some-older-model/1"
    assert [r.document_id for r in response.results] == ["g"]
    # The ingest side refused to mix models too: nothing was stored in the legacy namespace.
    assert store.get_namespace(TENANT, "legacy").document_count == 0

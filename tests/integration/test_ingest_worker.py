"""The ingest worker with the real embedder on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import update

from reachstore_server.embedding import UsemEmbedder
from reachstore_server.ingest.worker import IngestWorker
from reachstore_server.storage import tasks as states
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.models import TaskRow
from reachstore_server.storage.repository import SemanticStore
from reachstore_server.storage.schema import migrate_to_head
from reachstore_server.storage.tasks import NewTask, TaskStore, db_now

TENANT = "t"
HOLDER = "ingest-test"


@pytest.fixture(scope="module")
def embedder() -> UsemEmbedder:
    return UsemEmbedder(threads=1)


@pytest.fixture
def parts(
    database_url: str, embedder: UsemEmbedder
) -> Iterator[tuple[SemanticStore, TaskStore, IngestWorker]]:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    sessions = make_sessions(engine)
    store, tasks = SemanticStore(sessions), TaskStore(sessions, HOLDER)
    store.create_namespace(TENANT, "docs", embedder.model_id, embedder.dimension)
    yield store, tasks, IngestWorker(store, tasks, embedder, batch_chunks=16)
    engine.dispose()


def _submit(
    tasks: TaskStore, doc: str, text: str, on_duplicate: str = "error", namespace: str = "docs"
) -> str:
    return tasks.enqueue(TENANT, [NewTask(namespace, doc, text, {"src": doc}, on_duplicate)])[
        0
    ].task_id


def test_a_task_goes_from_queued_to_completed_with_embedded_chunks(parts) -> None:  # type: ignore[no-untyped-def]
    store, tasks, worker = parts
    text = "Semantic storage keeps durable context close to agents. " * 30
    task_id = _submit(tasks, "d1", text)
    assert tasks.get(TENANT, task_id).state == states.QUEUED
    assert worker.run_once() == 1
    task = tasks.get(TENANT, task_id)
    assert (task.state, task.percent) == (states.COMPLETED, 100)
    ns = store.get_namespace(TENANT, "docs")
    chunks = list(store.chunks(TENANT, ns.id))
    assert len(chunks) > 1 and {c.document_id for c in chunks} == {"d1"}
    vector = np.frombuffer(chunks[0].embedding, dtype=np.float32)
    assert vector.shape == (512,) and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3


def test_on_duplicate_error_fails_skip_keeps_and_overwrite_replaces(parts) -> None:  # type: ignore[no-untyped-def]
    store, tasks, worker = parts
    _submit(tasks, "d1", "first version")
    worker.run_once()
    err, skip = _submit(tasks, "d1", "second", "error"), _submit(tasks, "d1", "third", "skip")
    worker.run_once()
    assert tasks.get(TENANT, err).error_code == "DOCUMENT_EXISTS"
    assert tasks.get(TENANT, skip).state == states.COMPLETED
    assert store.get_document(TENANT, "docs", "d1").text == "first version"
    _submit(tasks, "d1", "fourth", "overwrite")
    worker.run_once()
    assert store.get_document(TENANT, "docs", "d1").text == "fourth"


def test_an_unknown_namespace_fails_the_task_with_the_anti_enumeration_code(parts) -> None:  # type: ignore[no-untyped-def]
    _store, tasks, worker = parts
    task_id = _submit(tasks, "d1", "text", namespace="nope")
    worker.run_once()
    task = tasks.get(TENANT, task_id)
    assert (task.state, task.error_code) == (states.FAILED, "NAMESPACE_UNAVAILABLE")
    assert task.error_data == {"namespace": "nope", "index_state": "unavailable"}


def test_cancelling_a_queued_task_stops_it_before_anything_is_stored(parts) -> None:  # type: ignore[no-untyped-def]
    store, tasks, worker = parts
    task_id = _submit(tasks, "d1", "text")
    assert tasks.request_cancel(TENANT, task_id).state == states.CANCELLED
    assert worker.run_once() == 0
    assert store.get_document(TENANT, "docs", "d1") is None


def test_a_cancel_that_arrives_while_processing_wins_at_the_commit(parts) -> None:  # type: ignore[no-untyped-def]
    store, tasks, worker = parts
    task_id = _submit(tasks, "d1", "text")
    claimed = tasks.claim(1)
    assert tasks.request_cancel(TENANT, task_id).state == states.CANCELLING
    worker.process(claimed)
    assert tasks.get(TENANT, task_id).state == states.CANCELLED
    assert store.get_document(TENANT, "docs", "d1") is None


def _restarted(tasks: TaskStore) -> TaskStore:
    """The task store of the same process started again: same name, a new run."""
    return TaskStore(tasks._sessions, HOLDER)


def test_a_pending_cancel_takes_effect_after_a_restart(parts) -> None:  # type: ignore[no-untyped-def]
    _store, tasks, _worker = parts
    task_id = _submit(tasks, "d1", "text")
    tasks.claim(1)
    tasks.request_cancel(TENANT, task_id)
    assert _restarted(tasks).recover() == 0
    assert tasks.get(TENANT, task_id).state == states.CANCELLED


def test_tasks_in_flight_at_a_crash_are_resumed(parts) -> None:  # type: ignore[no-untyped-def]
    store, tasks, worker = parts
    ids = [_submit(tasks, f"d{i}", f"document {i}") for i in range(3)]
    tasks.claim(3)  # a worker took them, then the process died
    assert _restarted(tasks).recover() == 3
    assert worker.run_once() == 3
    assert all(tasks.get(TENANT, i).state == states.COMPLETED for i in ids)
    assert store.get_namespace(TENANT, "docs").document_count == 3


def test_a_task_is_invisible_to_another_tenant(parts) -> None:  # type: ignore[no-untyped-def]
    _store, tasks, _worker = parts
    task_id = _submit(tasks, "d1", "text")
    assert tasks.get("other", task_id) is None
    assert tasks.request_cancel("other", task_id) is None


class _BrokenEmbedder:
    """An embedder whose model fails: the worker's own error handling is under test."""

    def __init__(self, real: UsemEmbedder) -> None:
        self.model_id, self.dimension = real.model_id, real.dimension

    def embed(self, texts):  # type: ignore[no-untyped-def]
        raise RuntimeError("model crashed")


def test_a_batch_that_breaks_fails_its_tasks_instead_of_leaving_them_stuck(parts, embedder) -> None:  # type: ignore[no-untyped-def]
    store, tasks, _worker = parts
    broken = IngestWorker(store, tasks, _BrokenEmbedder(embedder), batch_chunks=16)
    ids = [_submit(tasks, f"d{i}", f"document {i}") for i in range(2)]
    assert broken.run_once() == 2
    for task_id in ids:
        task = tasks.get(TENANT, task_id)
        assert (task.state, task.error_code) == (states.FAILED, "INTERNAL")
    assert store.get_namespace(TENANT, "docs").document_count == 0


class _HookedEmbedder:
    """The real embedder, running ``hook`` before its first call: what another process
    does while this worker embeds."""

    def __init__(self, real: UsemEmbedder, hook) -> None:  # type: ignore[no-untyped-def]
        self.model_id, self.dimension = real.model_id, real.dimension
        self._real, self._hook = real, hook

    def embed(self, texts):  # type: ignore[no-untyped-def]
        if self._hook is not None:
            hook, self._hook = self._hook, None
            hook()
        return self._real.embed(texts)


def test_a_worker_that_lost_its_lease_while_embedding_stores_nothing_of_it(parts, embedder) -> None:  # type: ignore[no-untyped-def]
    store, tasks, _worker = parts
    other = TaskStore(tasks._sessions, "ingest-other")
    ids = [_submit(tasks, f"d{i}", f"document {i}", "overwrite") for i in range(2)]
    taken: list = []

    def stall_past_the_lease() -> None:
        with tasks._sessions.begin() as session:
            session.execute(update(TaskRow).values(lease_until=db_now(session, -60.0)))
        taken.extend(other.claim(5))

    slow = IngestWorker(store, tasks, _HookedEmbedder(embedder, stall_past_the_lease), 16)
    assert slow.run_once() == 2
    assert sorted(t.task_id for t in taken) == sorted(ids)
    assert all(tasks.get(TENANT, i).state == states.PROCESSING for i in ids)
    assert store.get_namespace(TENANT, "docs").document_count == 0  # nothing stored by it
    IngestWorker(store, other, embedder, batch_chunks=16).process(taken)
    assert all(tasks.get(TENANT, i).state == states.COMPLETED for i in ids)
    ns = store.get_namespace(TENANT, "docs")
    assert store.changed_documents(TENANT, ns.id, 0, 10) == {"d0", "d1"}
    assert ns.change_seq == 2  # each document committed once


def test_renewals_keep_a_claim_that_outlasts_its_lease(parts, embedder) -> None:  # type: ignore[no-untyped-def]
    store, _tasks, _worker = parts
    short = TaskStore(_tasks._sessions, HOLDER, lease_s=1.0)
    other = TaskStore(_tasks._sessions, "ingest-other")
    task_id = _submit(short, "d1", "text")
    seen_by_other: list = []

    def embed_for_three_leases() -> None:
        time.sleep(3.0)
        seen_by_other.extend(other.claim(5))

    worker = IngestWorker(
        store, short, _HookedEmbedder(embedder, embed_for_three_leases), 16, heartbeat_s=0.2
    )
    assert worker.run_once() == 1
    assert seen_by_other == []
    assert short.get(TENANT, task_id).state == states.COMPLETED

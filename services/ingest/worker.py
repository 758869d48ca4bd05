"""The ingest worker: claims queued tasks and takes each through chunking, embedding and
indexing. Runs in a thread of the ingest process.

Several tasks are processed together so the embedder sees large batches (one call for many
short documents is several times faster than one call each). Each document is committed in
its own transaction, after a last check for a cancel, so a document becomes searchable
whole or not at all, and a crash anywhere before the commit leaves the task to be re-run.

A claim is held under a lease (``services/storage/tasks.py``) that a thread of its own
renews while the claim is chunked, embedded and committed, since embedding a large claim
takes longer than a lease. The commit only stores the tasks still held under the lease.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading

import numpy as np
from google.protobuf import json_format
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from services.common import errors
from services.embedding import Embedder
from services.ingest.domain.chunking import chunk_text
from services.storage import tasks as states
from services.storage.records import NamespaceInfo
from services.storage.repository import ChunkData, SemanticStore
from services.storage.tasks import ClaimedTask, TaskStore

log = logging.getLogger(__name__)

# How long an idle worker waits before looking for tasks queued by another process (or
# left by one whose lease ran out). A submit in this process wakes it at once.
IDLE_POLL_SECONDS = 0.5
DEFAULT_HEARTBEAT_S = 10.0


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class _Verdict:
    """Why a task cannot be stored (``refusal``), or where it goes and whether its id exists."""

    refusal: errors.ReachstoreError | None
    namespace_id: int | None = None
    exists: bool = False


@dataclasses.dataclass
class _Work:
    task: ClaimedTask
    chunks: list[str] = dataclasses.field(default_factory=list)
    vectors: np.ndarray | None = None


class _Heartbeat:
    """Renews one claim's lease every ``interval`` seconds while the claim is worked on.

    A renewal that fails (the database is away) is tried again at the next beat; should the
    lease run out meanwhile, another process may take the tasks, and the commit's fence
    keeps this one from storing them. A renewal that finds tasks gone is logged: they are
    not committed here."""

    def __init__(self, tasks: TaskStore, lease: str, task_ids: list[str], interval: float):
        self._tasks, self._lease, self._interval = tasks, lease, interval
        self._expected = set(task_ids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ingest-lease", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                still_ours = self._tasks.renew(self._lease)
            except Exception:  # noqa: BLE001 - the database is away; the next beat tries again
                log.warning("renewing lease %s failed", self._lease, exc_info=True)
                continue
            lost = self._expected - still_ours
            if lost:
                log.warning(
                    "lease %s no longer holds %d task(s) (taken over after it ran out, or "
                    "deleted); they will not be committed here: %s",
                    self._lease,
                    len(lost),
                    ", ".join(sorted(lost)),
                )
                self._expected -= lost


class IngestWorker:
    def __init__(
        self,
        store: SemanticStore,
        tasks: TaskStore,
        embedder: Embedder,
        batch_chunks: int,
        max_tasks_per_claim: int = 32,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
    ) -> None:
        self._store = store
        self._tasks = tasks
        self._embedder = embedder
        self._batch_chunks = batch_chunks
        self._max_tasks = max_tasks_per_claim
        self._heartbeat_s = heartbeat_s
        self._wake = threading.Event()
        self._stop = threading.Event()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def run(self) -> None:
        try:
            requeued = self._tasks.recover()
        except Exception:  # noqa: BLE001 - the store is unreachable; leases run out instead
            log.exception("taking back this process's earlier tasks failed")
            requeued = 0
        if requeued:
            log.info("resuming %d task(s) that were in flight at the last stop", requeued)
        while not self._stop.is_set():
            try:
                worked = self.run_once()
            except Exception:  # noqa: BLE001 - the store is unreachable; try again soon
                log.exception("claiming ingest tasks failed")
                worked = 0
            if not worked:
                self._wake.wait(IDLE_POLL_SECONDS)
                self._wake.clear()

    def run_once(self) -> int:
        """Processes one claim of tasks; returns how many it claimed."""
        claimed = self._tasks.claim(self._max_tasks)
        if claimed:
            self.process(claimed)
        return len(claimed)

    def process(self, claimed: list[ClaimedTask]) -> None:
        """Works on tasks this worker has claimed (one claim: they share one lease) while
        renewing their lease; a claim that breaks fails its unfinished tasks."""
        ids = [t.task_id for t in claimed]
        lease = claimed[0].lease
        with _Heartbeat(self._tasks, lease, ids, self._heartbeat_s):
            try:
                self._process(claimed)
            except Exception as exc:  # noqa: BLE001 - a broken batch must not kill the worker
                # Failed, not re-queued: a document that breaks the pipeline would otherwise
                # break it again on every retry. The error is retryable for the caller.
                log.exception("ingest batch of %d task(s) failed", len(claimed))
                self._tasks.fail_unfinished(
                    lease,
                    ids,
                    errors.INTERNAL.code,
                    f"processing failed unexpectedly ({type(exc).__name__}); it was logged",
                )

    def _process(self, claimed: list[ClaimedTask]) -> None:
        """Chunks, embeds and commits one claim."""
        lease = claimed[0].lease
        with self._store.begin() as session:
            # Fail early what cannot succeed, before paying for embeddings.
            work = []
            for task in claimed:
                verdict = self._judge(session, task)
                if verdict.refusal is None:
                    work.append(_Work(task))
                else:
                    self._fail(session, task, verdict.refusal)
        if not work:
            return
        for item in work:
            item.chunks = chunk_text(item.task.text)
        ids = [w.task.task_id for w in work]
        self._tasks.set_phase(lease, ids, "embedding", 40)
        self._embed(work)
        self._tasks.set_phase(lease, ids, "indexing", 80)
        self._commit_all(work)

    def _fail(self, session: Session, task: ClaimedTask, error: errors.ReachstoreError) -> None:
        """Ends a task as failed with ``error``, inside the caller's transaction."""
        data = json_format.MessageToDict(error.failure.structured_data)
        self._tasks.finish(
            session,
            task.lease,
            task.task_id,
            states.FAILED,
            error_code=error.code,
            error_message=error.failure.message,
            error_data=data,
        )

    def _judge(
        self,
        session: Session,
        task: ClaimedTask,
        namespaces: dict[tuple[str, str], NamespaceInfo | None] | None = None,
    ) -> _Verdict:
        """Whether the task can be stored as asked, on the state in ``session``.
        ``namespaces`` keeps the namespace rows already read in this transaction (a claim's
        documents mostly share one); only the row's id and model are used, and a namespace
        deleted meanwhile fails the transaction at its change seq, which is then retried
        document by document."""
        if task.refusal is not None:
            code, message, data = task.refusal
            return _Verdict(
                errors.ReachstoreError(errors.lookup(code), message, structured_data=data)
            )
        key = (task.tenant, task.namespace)
        if namespaces is not None and key in namespaces:
            namespace = namespaces[key]
        else:
            namespace = self._store.namespace_in(session, task.tenant, task.namespace)
            if namespaces is not None:
                namespaces[key] = namespace
        if namespace is None:
            return _Verdict(errors.namespace_unavailable(task.namespace))
        if namespace.embedding_model != self._embedder.model_id:
            return _Verdict(
                errors.ReachstoreError(
                    errors.EMBEDDING_MODEL_MISMATCH,
                    f"namespace {task.namespace!r} holds vectors of another model",
                    structured_data={
                        "namespace_model": namespace.embedding_model,
                        "server_model": self._embedder.model_id,
                    },
                )
            )
        exists = self._store.document_exists(session, task.tenant, namespace.id, task.document_id)
        if exists and task.on_duplicate == "error":
            return _Verdict(
                errors.ReachstoreError(
                    errors.DOCUMENT_EXISTS,
                    f"document {task.document_id!r} already exists",
                    structured_data={"document_id": task.document_id, "on_duplicate": "error"},
                )
            )
        return _Verdict(None, namespace.id, exists)

    def _embed(self, work: list[_Work]) -> None:
        texts = [c for w in work for c in w.chunks]
        parts = [
            self._embedder.embed(texts[i : i + self._batch_chunks])
            for i in range(0, len(texts), self._batch_chunks)
        ]
        vectors = (
            np.concatenate(parts) if parts else np.zeros((0, self._embedder.dimension), np.float32)
        )
        start = 0
        for item in work:
            item.vectors = vectors[start : start + len(item.chunks)]
            start += len(item.chunks)

    def _commit_all(self, work: list[_Work]) -> None:
        """Commits a claim's documents in one transaction (one commit is most of the cost of
        a small document); if that fails, one by one, so one bad document cannot hold back
        the others."""
        try:
            with self._store.begin() as session:
                self._commit(session, work)
        except SQLAlchemyError:
            log.exception("committing %d documents together failed; retrying one by one", len(work))
            for item in work:
                try:
                    with self._store.begin() as session:
                        self._commit(session, [item])
                except SQLAlchemyError as exc:
                    log.exception("committing task %s failed", item.task.task_id)
                    with self._store.begin() as session:
                        self._fail(
                            session,
                            item.task,
                            errors.ReachstoreError(
                                errors.INTERNAL,
                                f"storing the document failed: {type(exc).__name__}",
                            ),
                        )

    def _commit(self, session: Session, work: list[_Work]) -> None:
        """Makes each document searchable, or records why not. The refusal checks run again
        because the state may have changed while embedding; a cancel that arrived wins. Only
        tasks still held under the claim's lease are touched: one missing from the locked
        states was taken over by another process, which will store it itself."""
        lease = work[0].task.lease
        states_now = self._tasks.lock_states(session, lease, [w.task.task_id for w in work])
        completed = []
        namespaces: dict[tuple[str, str], NamespaceInfo | None] = {}
        for item in work:
            task = item.task
            if states_now.get(task.task_id) != states.PROCESSING:
                if states_now.get(task.task_id) == states.CANCELLING:
                    self._tasks.finish(session, lease, task.task_id, states.CANCELLED)
                continue  # cancelled, deleted with its namespace, or taken over meanwhile
            verdict = self._judge(session, task, namespaces)
            if verdict.refusal is not None:
                self._fail(session, task, verdict.refusal)
                continue
            assert verdict.namespace_id is not None and item.vectors is not None
            if not (verdict.exists and task.on_duplicate == "skip"):
                chunks = [
                    ChunkData(text, sha256(text), vector.tobytes())
                    for text, vector in zip(item.chunks, item.vectors, strict=True)
                ]
                self._store.commit_document(
                    session,
                    task.tenant,
                    verdict.namespace_id,
                    task.document_id,
                    task.text,
                    task.metadata,
                    sha256(task.text),
                    chunks,
                    known_new=not verdict.exists,
                )
            completed.append(task.task_id)
        self._tasks.finish(session, lease, completed, states.COMPLETED)

"""The ingest worker: claims queued tasks and takes each through chunking, embedding and
indexing. Runs in a thread of the ingest process.

Several tasks are processed together so the embedder sees large batches (one call for many
short documents is several times faster than one call each). A claim's documents are
committed in one transaction (one by one if it fails), after a last check for a cancel, so
a document becomes searchable whole or not at all, and a crash anywhere before the commit
leaves the task to be re-run. Two claims are on their way at once, so the embedder's
copies embed one while this thread commits the other (``IngestWorker.run``).

A claim is held under a lease (``reachstore_server/storage/tasks.py``) that a thread of its own
renews while the claim is chunked, embedded and committed, since embedding a large claim
takes longer than a lease. The commit only stores the tasks still held under the lease.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import threading
from collections.abc import Sequence

import numpy as np
from google.protobuf import json_format
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from reachstore_server.common import errors
from reachstore_server.embedding import Embedder
from reachstore_server.embedding.forked import Pending, submit
from reachstore_server.ingest.domain.chunking import chunk_text
from reachstore_server.storage import tasks as states
from reachstore_server.storage.records import DocumentVersion, NamespaceInfo
from reachstore_server.storage.repository import ChunkData, SemanticStore
from reachstore_server.storage.tasks import ClaimedTask, TaskStore

log = logging.getLogger(__name__)

# How long an idle worker waits before looking for tasks queued by another process (or
# left by one whose lease ran out). A submit in this process wakes it at once.
IDLE_POLL_SECONDS = 0.5
DEFAULT_HEARTBEAT_S = 10.0
# Claims held at once by the worker loop: one being committed while the next is embedded,
# so the embedder's copies always have work queued while this process uses the store.
CLAIMS_IN_FLIGHT = 2


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class _Verdict:
    """Why a task cannot be stored (``refusal``), or where it goes and which stored row it
    would replace (``row_id``; None when the namespace does not hold its id)."""

    refusal: errors.ReachstoreError | None
    namespace_id: int | None = None
    row_id: int | None = None

    @property
    def exists(self) -> bool:
        return self.row_id is not None


@dataclasses.dataclass
class _Work:
    task: ClaimedTask
    chunks: list[str] = dataclasses.field(default_factory=list)
    vectors: np.ndarray | None = None


@dataclasses.dataclass
class _Claim:
    """A claim on its way: its tasks still to be stored, the renewals of its lease, and
    the vectors being computed for them."""

    claimed: list[ClaimedTask]
    heartbeat: _Heartbeat
    work: list[_Work] = dataclasses.field(default_factory=list)
    vectors: list[Pending] = dataclasses.field(default_factory=list)


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

    def start(self) -> _Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
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
        # 64, not 32: half the claims, half their fixed statements per document; the
        # copies get parts of 32 texts, which they embed a little faster than 16.
        max_tasks_per_claim: int = 64,
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
        """Claims, embeds and commits until stopped. Up to ``CLAIMS_IN_FLIGHT`` claims are
        held at once: while the oldest is committed (and the next claimed), the embedder's
        copies already embed the one after it. Claims are committed in the order they were
        taken, so of two versions of a document the later one is stored last."""
        try:
            requeued = self._tasks.recover()
        except Exception:  # noqa: BLE001 - the store is unreachable; leases run out instead
            log.exception("taking back this process's earlier tasks failed")
            requeued = 0
        if requeued:
            log.info("resuming %d task(s) that were in flight at the last stop", requeued)
        in_flight: collections.deque[_Claim] = collections.deque()
        while not self._stop.is_set():
            if len(in_flight) < CLAIMS_IN_FLIGHT:
                try:
                    claimed = self._tasks.claim(self._max_tasks)
                except Exception:  # noqa: BLE001 - the store is unreachable; try again soon
                    log.exception("claiming ingest tasks failed")
                    claimed = []
                if claimed:
                    started = self._start(claimed)
                    if started is not None:
                        in_flight.append(started)
                    continue
            if in_flight:
                self._finish(in_flight.popleft())
                continue
            self._wake.wait(IDLE_POLL_SECONDS)
            self._wake.clear()
        while in_flight:  # embedded or nearly: stored rather than left to a re-run
            self._finish(in_flight.popleft())

    def run_once(self) -> int:
        """Processes one claim of tasks to its end; returns how many it claimed."""
        claimed = self._tasks.claim(self._max_tasks)
        if claimed:
            self.process(claimed)
        return len(claimed)

    def process(self, claimed: list[ClaimedTask]) -> None:
        """Works on tasks this worker has claimed (one claim: they share one lease) while
        renewing their lease; a claim that breaks fails its unfinished tasks."""
        started = self._start(claimed)
        if started is not None:
            self._finish(started)

    def _start(self, claimed: list[ClaimedTask]) -> _Claim | None:
        """Judges and chunks a claim and hands its chunks to the embedder; None when
        nothing of it is left to store (refused, or broken)."""
        lease = claimed[0].lease
        ids = [t.task_id for t in claimed]
        claim = _Claim(claimed, _Heartbeat(self._tasks, lease, ids, self._heartbeat_s).start())
        try:
            with self._store.begin() as session:
                # Fail early what cannot succeed, before paying for embeddings.
                for task, verdict in zip(claimed, self._judge_all(session, claimed), strict=True):
                    if verdict.refusal is None:
                        claim.work.append(_Work(task))
                    else:
                        self._fail(session, task, verdict.refusal)
            if not claim.work:
                claim.heartbeat.stop()
                return None
            for item in claim.work:
                item.chunks = chunk_text(item.task.text)
            self._tasks.set_phase(lease, [w.task.task_id for w in claim.work], "embedding", 40)
            texts = [c for w in claim.work for c in w.chunks]
            claim.vectors = [
                submit(self._embedder, texts[i : i + self._batch_chunks])
                for i in range(0, len(texts), self._batch_chunks)
            ]
        except Exception as exc:  # noqa: BLE001 - a broken batch must not kill the worker
            self._broken(claim, exc)
            return None
        return claim

    def _finish(self, claim: _Claim) -> None:
        """Waits for a started claim's vectors and commits it."""
        try:
            parts = [pending.result() for pending in claim.vectors]
            vectors = (
                np.concatenate(parts)
                if parts
                else np.zeros((0, self._embedder.dimension), np.float32)
            )
            start = 0
            for item in claim.work:
                item.vectors = vectors[start : start + len(item.chunks)]
                start += len(item.chunks)
            lease = claim.claimed[0].lease
            self._tasks.set_phase(lease, [w.task.task_id for w in claim.work], "indexing", 80)
            self._commit_all(claim.work)
        except Exception as exc:  # noqa: BLE001 - a broken batch must not kill the worker
            self._broken(claim, exc)
        finally:
            claim.heartbeat.stop()

    def _broken(self, claim: _Claim, exc: Exception) -> None:
        # Failed, not re-queued: a document that breaks the pipeline would otherwise break
        # it again on every retry. The error is retryable for the caller.
        log.exception("ingest batch of %d task(s) failed", len(claim.claimed), exc_info=exc)
        claim.heartbeat.stop()
        try:
            self._tasks.fail_unfinished(
                claim.claimed[0].lease,
                [t.task_id for t in claim.claimed],
                errors.INTERNAL.code,
                f"processing failed unexpectedly ({type(exc).__name__}); it was logged",
            )
        except Exception:  # noqa: BLE001 - the store is away: the lease runs out instead
            log.exception("failing the tasks of a broken batch failed")

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

    def _judge_all(
        self,
        session: Session,
        tasks: Sequence[ClaimedTask],
        namespaces: dict[tuple[str, str], NamespaceInfo | None] | None = None,
    ) -> list[_Verdict]:
        """Whether each task can be stored as asked, on the state in ``session``: one read
        for the namespaces and one per namespace for the ids it already holds.
        ``namespaces`` keeps the namespace rows already read in this transaction; only a
        row's id and model are used, and a namespace deleted meanwhile fails the
        transaction at its change seq, which is then retried document by document."""
        if namespaces is None:
            namespaces = {}
        wanted: dict[str, set[str]] = collections.defaultdict(set)
        for task in tasks:
            if task.refusal is None and (task.tenant, task.namespace) not in namespaces:
                wanted[task.tenant].add(task.namespace)
        for tenant, names in wanted.items():
            found = self._store.namespaces_in(session, tenant, sorted(names))
            for name in names:
                namespaces[(tenant, name)] = found.get(name)
        asked: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
        for task in tasks:
            namespace = namespaces.get((task.tenant, task.namespace))
            if task.refusal is None and namespace is not None:
                asked[(task.tenant, namespace.id)].append(task.document_id)
        rows = {
            key: self._store.document_rows(session, key[0], key[1], ids)
            for key, ids in asked.items()
        }
        verdicts = []
        for task in tasks:
            namespace = namespaces.get((task.tenant, task.namespace))
            verdicts.append(
                self._verdict(
                    task,
                    namespace,
                    None
                    if namespace is None
                    else rows.get((task.tenant, namespace.id), {}).get(task.document_id),
                )
            )
        return verdicts

    def _verdict(
        self, task: ClaimedTask, namespace: NamespaceInfo | None, row_id: int | None
    ) -> _Verdict:
        if task.refusal is not None:
            code, message, data = task.refusal
            return _Verdict(
                errors.ReachstoreError(errors.lookup(code), message, structured_data=data)
            )
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
        if row_id is not None and task.on_duplicate == "error":
            return _Verdict(
                errors.ReachstoreError(
                    errors.DOCUMENT_EXISTS,
                    f"document {task.document_id!r} already exists",
                    structured_data={"document_id": task.document_id, "on_duplicate": "error"},
                )
            )
        return _Verdict(None, namespace.id, row_id)

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
        live, cancelled = [], []
        for item in work:
            state = states_now.get(item.task.task_id)
            if state == states.PROCESSING:
                live.append(item)
            elif state == states.CANCELLING:
                cancelled.append(item.task.task_id)
            # else: cancelled, deleted with its namespace, or taken over meanwhile
        self._tasks.finish(session, lease, cancelled, states.CANCELLED)
        completed = []
        namespaces: dict[tuple[str, str], NamespaceInfo | None] = {}
        for batch in _rounds(live):
            verdicts = self._judge_all(session, [item.task for item in batch], namespaces)
            versions: dict[str, list[DocumentVersion]] = collections.defaultdict(list)
            for item, verdict in zip(batch, verdicts, strict=True):
                task = item.task
                if verdict.refusal is not None:
                    self._fail(session, task, verdict.refusal)
                    continue
                assert verdict.namespace_id is not None and item.vectors is not None
                if not (verdict.exists and task.on_duplicate == "skip"):
                    versions[task.tenant].append(
                        DocumentVersion(
                            verdict.namespace_id,
                            task.document_id,
                            task.text,
                            task.metadata,
                            sha256(task.text),
                            [
                                ChunkData(text, sha256(text), vector.tobytes())
                                for text, vector in zip(item.chunks, item.vectors, strict=True)
                            ],
                            verdict.row_id,
                        )
                    )
                completed.append(task.task_id)
            for tenant, batch_versions in versions.items():
                self._store.commit_documents(session, tenant, batch_versions)
        self._tasks.finish(session, lease, completed, states.COMPLETED)


def _rounds(work: list[_Work]) -> list[list[_Work]]:
    """The claim's documents in order, cut where a document comes again (two versions of
    one id in a claim): each round is judged on what the rounds before it wrote."""
    rounds: list[list[_Work]] = [[]]
    seen: set[tuple[str, str, str]] = set()
    for item in work:
        key = (item.task.tenant, item.task.namespace, item.task.document_id)
        if key in seen:
            rounds.append([])
            seen = set()
        rounds[-1].append(item)
        seen.add(key)
    return [r for r in rounds if r]

"""The mixed load's three operations, as non-blocking ``fire(i, scheduled)`` functions for
``_open_loop.Pacer``, and the corpus they draw from.

- ``QueryOp``: ``Query`` over every corpus namespace (top_k 10) with one of the 500 real
  queries; an error is a failed call or an answer with coverage below 1.
- ``IngestOp``: ``CreateDocument`` of the next unused corpus chunk, namespaces in turn;
  its sample is the accept (202). When the task completes is read from the store at the
  end (``ingest_completion``), since that happens in the ingest worker, not in a call.
- ``ActionOp``: ``SubmitTask`` of one webhook action with a fresh ``n`` (a new
  idempotency key), then ``GetTask`` long-polls chained from the answers' callbacks until
  the task has ended. Two samples: ``action.submit`` (the call) and ``action`` (scheduled
  -> the look-up that saw it succeed).

Every call goes through a channel that balances round robin over the replicas
(``_fleet.Fleet.channel``): the clients see the deployment as an agent would.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import psycopg
from _open_loop import Recorder
from _overload import REFUSED_PREFIX
from _pg_work import libpq_url
from _reach_service import ACTION_TYPE, CHANNEL
from google.protobuf import struct_pb2
from grpc_status import rpc_status

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as ipb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as igrpc
from reachstore.query.v1 import query_service_pb2 as qpb
from reachstore.query.v1 import query_service_pb2_grpc as qgrpc
from reachstore.reach.v1 import reach_service_pb2 as rpb
from reachstore.reach.v1 import reach_service_pb2_grpc as rgrpc

TOP_K = 10
CALL_TIMEOUT = 30.0
WAIT_MS = 5000  # GetTask long-poll
ACTION_DEADLINE = 120.0  # an action not ended by then counts as an error
_ENDED = (rpb.TASK_STATE_SUCCEEDED, rpb.TASK_STATE_FAILED)
_PARKED = (rpb.ACTION_STATE_UNKNOWN, rpb.ACTION_STATE_NEEDS_REVIEW)  # only time or a person


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _unstorable(doc: dict[str, Any]) -> bool:
    """A document whose text PostgreSQL cannot hold (a NUL character): refused, rightly."""
    return "\x00" in doc["text"]


class Corpus:
    """The shared corpus split into a preload (the first ``preload`` chunks of each
    namespace) and the rest, which live ingest takes in turn, namespace by namespace."""

    def __init__(self, folder: Path, preload: int) -> None:
        # The corpus is sent as shipped. One chunk holds a NUL character, which PostgreSQL
        # text cannot store: the services refuse that document (INVALID_ARGUMENT naming its
        # text) and the run reports the refusal (``invalid``) instead of counting an error.
        rows = load_jsonl(folder / "corpus-10k.jsonl")
        self.invalid = [r["id"] for r in rows if _unstorable(r)]
        self.queries = [r["text"] for r in load_jsonl(folder / "queries-10k.jsonl")]
        self.names = list(dict.fromkeys(r["namespace"] for r in rows))
        by_ns: dict[str, list[dict[str, Any]]] = {n: [] for n in self.names}
        for row in rows:
            by_ns[row["namespace"]].append(row)
        self.preload = {n: docs[:preload] for n, docs in by_ns.items()}
        rest = {n: docs[preload:] for n, docs in by_ns.items()}
        longest = max(len(v) for v in rest.values())
        self.live = [rest[n][i] for i in range(longest) for n in self.names if i < len(rest[n])]

    def live_by_namespace(self, start: int, count: int) -> dict[str, list[dict[str, Any]]]:
        """Live documents ``start`` .. ``start + count - 1``, grouped by namespace."""
        out: dict[str, list[dict[str, Any]]] = {n: [] for n in self.names}
        for i in range(start, start + count):
            doc = self.live_document(i)
            out[doc["namespace"]].append(doc)
        return out

    def live_document(self, i: int) -> dict[str, Any]:
        """The ``i``-th live document; past the end, the corpus again under new ids."""
        row = self.live[i % len(self.live)]
        lap = i // len(self.live)
        return {**row, "id": row["id"] if lap == 0 else f"{row['id']}.{lap}"}


def preload(channel: grpc.Channel, corpus: Corpus) -> dict[str, Any]:
    """Creates the namespaces and ingests the preload; documents and seconds."""
    stub = igrpc.IngestServiceStub(channel)
    for name in corpus.names:
        stub.CreateNamespace(ipb.CreateNamespaceRequest(name=name), timeout=CALL_TIMEOUT)
    return ingest_batches(stub, corpus.preload)


def ingest_batches(
    stub: igrpc.IngestServiceStub,
    docs: dict[str, list[dict[str, Any]]],
    batch: int = 100,
) -> dict[str, Any]:
    """Submits ``docs`` (namespace -> rows) through BatchCreateDocuments as fast as they
    are accepted and waits until every task has ended: documents and seconds from the
    first submission to the last completion seen."""
    started = time.perf_counter()
    task_ids: list[str] = []
    refused: list[str] = []  # unstorable documents the service refused, as it must
    for name, rows in docs.items():
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            reply = stub.BatchCreateDocuments(
                ipb.BatchCreateDocumentsRequest(
                    namespace=name,
                    documents=[
                        ipb.DocumentInput(document_id=d["id"], text=d["text"]) for d in part
                    ],
                ),
                timeout=120,
            )
            for failure in reply.meta.failed:
                unstorable = _unstorable(part[failure.batch_index])
                if not unstorable or failure.error_code != "INVALID_ARGUMENT":
                    raise RuntimeError(f"batch refused in part: {failure}")
                refused.append(f"{failure.document_id}: {failure.error_code} {failure.message}")
            task_ids += [r.task_id for r in reply.results if r.task_id]
    wait_for_ingest(stub, task_ids, timeout=1800)
    return {
        "documents": len(task_ids),
        "seconds": time.perf_counter() - started,
        "refused_invalid": refused,
    }


def wait_for_ingest(stub: igrpc.IngestServiceStub, task_ids: Sequence[str], timeout: float) -> None:
    """Until every task has ended: the worker takes the oldest first, so following them in
    order asks little. A task that failed raises."""
    deadline = time.monotonic() + timeout
    for task_id in task_ids:
        while True:
            task = stub.GetTask(ipb.GetTaskRequest(task_id=task_id), timeout=CALL_TIMEOUT).task
            if task.state == ipb.TASK_STATE_COMPLETED:
                break
            if task.state in (ipb.TASK_STATE_FAILED, ipb.TASK_STATE_CANCELLED):
                raise RuntimeError(f"ingest task {task_id}: {ipb.TaskState.Name(task.state)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ingest task {task_id} not done after {timeout:.0f} s")
            time.sleep(0.2)


def _error(exc: BaseException) -> str:
    """The error of a failed call as one line; a refusal that says when to come back (a
    transient code with ``retry_after_ms``, as load shedding answers) starts with
    ``_overload.REFUSED_PREFIX`` and names its code and wait."""
    if isinstance(exc, grpc.Call):
        failure = _failure_of(exc)
        if failure is not None and failure.category in (
            pf_pb2.CATEGORY_TRANSIENT,
            pf_pb2.CATEGORY_QUOTA,
        ):
            hint = (
                f"retry_after_ms={failure.retry_after_ms}"
                if failure.retry_after_ms > 0
                else "no-hint"
            )
            # The refusal's reason ("refused at once: <why>; retry in ..."): which of the
            # admission's rules refused it, for the overload report's account of the tail.
            why = failure.message.split(";", 1)[0].removeprefix("refused at once: ")[:80]
            return f"{REFUSED_PREFIX}{failure.error_code} {hint} ({why})"
    if isinstance(exc, grpc.RpcError):
        return f"{exc.code().name}: {(exc.details() or '')[:120]}"  # type: ignore[attr-defined]
    return f"{type(exc).__name__}: {str(exc)[:120]}"


def _failure_of(call: grpc.Call) -> pf_pb2.PartialFailure | None:
    status = rpc_status.from_call(call)
    for detail in status.details if status is not None else ():
        if detail.Is(pf_pb2.PartialFailure.DESCRIPTOR):
            failure = pf_pb2.PartialFailure()
            detail.Unpack(failure)
            return failure
    return None


class QueryOp:
    def __init__(self, channel: grpc.Channel, recorder: Recorder, corpus: Corpus) -> None:
        self.stub = qgrpc.QueryServiceStub(channel)
        self.recorder = recorder
        self.names = corpus.names
        self.queries = corpus.queries

    def fire(self, i: int, scheduled: float) -> None:
        request = qpb.QueryRequest(
            namespaces=self.names, query=self.queries[i % len(self.queries)], top_k=TOP_K
        )
        self.recorder.begin()
        future = self.stub.Query.future(request, timeout=CALL_TIMEOUT)
        future.add_done_callback(lambda f: self._done(f, scheduled))

    def _done(self, future: grpc.Future, scheduled: float) -> None:
        error = None
        try:
            reply = future.result()
            if reply.meta.coverage_ratio != 1.0:
                failed = [f.error_code for f in reply.meta.namespaces_failed]
                error = f"partial answer: coverage {reply.meta.coverage_ratio:.2f} {failed}"
            elif not reply.results:
                error = "no results"
        except Exception as exc:  # noqa: BLE001 - every failure is a sample
            error = _error(exc)
        self.recorder.end("query", scheduled, error)


class IngestOp:
    def __init__(self, channel: grpc.Channel, recorder: Recorder, corpus: Corpus) -> None:
        self.stub = igrpc.IngestServiceStub(channel)
        self.recorder = recorder
        self.corpus = corpus
        self.task_ids: list[str] = []
        self._lock = threading.Lock()

    def fire(self, i: int, scheduled: float) -> None:
        doc = self.corpus.live_document(i)
        request = ipb.CreateDocumentRequest(
            namespace=doc["namespace"],
            document=ipb.DocumentInput(document_id=doc["id"], text=doc["text"]),
        )
        self.recorder.begin()
        future = self.stub.CreateDocument.future(request, timeout=CALL_TIMEOUT)
        future.add_done_callback(lambda f: self._done(f, scheduled, _unstorable(doc)))

    def _done(self, future: grpc.Future, scheduled: float, unstorable: bool) -> None:
        error = None
        try:
            with self._lock:
                self.task_ids.append(future.result().task.task_id)
        except Exception as exc:  # noqa: BLE001
            error = _error(exc)
            code = exc.code() if isinstance(exc, grpc.Call) else None
            if unstorable and code == grpc.StatusCode.INVALID_ARGUMENT:
                # The right answer to a document PostgreSQL cannot hold: counted apart.
                self.recorder.end("ingest.refused_invalid", scheduled)
                return
        self.recorder.end("ingest.accept", scheduled, error)


class ActionOp:
    def __init__(self, channel: grpc.Channel, recorder: Recorder) -> None:
        self.stub = rgrpc.ReachServiceStub(channel)
        self.recorder = recorder
        self.keys: list[str] = []  # every submitted action's idempotency key
        self.final_states: Counter[str] = Counter()  # as the clients last saw them
        self._lock = threading.Lock()

    def fire(self, i: int, scheduled: float) -> None:
        params = struct_pb2.Struct()
        params.update({"n": i})
        request = rpb.SubmitTaskRequest(
            entity_id="sustained",
            actions=[
                rpb.ActionSpec(
                    name="notify", channel=CHANNEL, action_type=ACTION_TYPE, params=params
                )
            ],
        )
        self.recorder.begin()
        future = self.stub.SubmitTask.future(request, timeout=CALL_TIMEOUT)
        future.add_done_callback(lambda f: self._submitted(f, scheduled))

    def _submitted(self, future: grpc.Future, scheduled: float) -> None:
        try:
            task = future.result().task
        except Exception as exc:  # noqa: BLE001
            self.recorder.record("action.submit", scheduled, time.perf_counter(), _error(exc))
            self._end(scheduled, "not submitted", _error(exc))
            return
        self.recorder.record("action.submit", scheduled, time.perf_counter())
        with self._lock:
            self.keys.append(task.actions[0].idempotency_key)
        self._follow(task, scheduled)

    def _follow(self, task: rpb.Task, scheduled: float) -> None:
        """The next look-up, or the end of the action."""
        action = task.actions[0]
        if task.state in _ENDED or action.state in _PARKED:
            state = rpb.ActionState.Name(action.state)
            ok = task.state == rpb.TASK_STATE_SUCCEEDED
            self._end(scheduled, state, None if ok else f"ended {state}: {action.failure.code}")
            return
        if time.perf_counter() - scheduled > ACTION_DEADLINE:
            self._end(scheduled, "unfinished", f"not ended after {ACTION_DEADLINE:.0f} s")
            return
        request = rpb.GetTaskRequest(
            task_id=task.task_id, wait_ms=WAIT_MS, known_version=task.version
        )
        future = self.stub.GetTask.future(request, timeout=WAIT_MS / 1000 + CALL_TIMEOUT)
        future.add_done_callback(lambda f: self._looked_up(f, task, scheduled))

    def _looked_up(self, future: grpc.Future, task: rpb.Task, scheduled: float) -> None:
        try:
            self._follow(future.result().task, scheduled)
        except Exception as exc:  # noqa: BLE001 - a failed look-up ends the sample
            self._end(scheduled, "look-up failed", _error(exc))

    def _end(self, scheduled: float, state: str, error: str | None) -> None:
        with self._lock:
            self.final_states[state] += 1
        self.recorder.end("action", scheduled, error)


def ingest_completion(database_url: str, task_ids: Sequence[str], wall0: float) -> dict[str, Any]:
    """From the store: each live ingest task's state and accepted -> last change (the
    server's clock; for a completed task, when it completed), with the acceptance time as
    seconds since the window began (``wall0`` = the epoch time of t0)."""
    with psycopg.connect(libpq_url(database_url)) as conn:
        rows = conn.execute(
            "SELECT state, created_at, updated_at FROM ingest_tasks WHERE task_id = ANY(%s)",
            (list(task_ids),),
        ).fetchall()
    states = Counter(str(r[0]) for r in rows)
    samples = [
        (created.timestamp() - wall0, (updated - created).total_seconds())
        for state, created, updated in rows
        if state == "completed"
    ]
    return {"states": dict(states), "found": len(rows), "samples": samples}


def action_states(database_url: str) -> dict[str, Any]:
    """Every action in the store by state, and receipts per action (one expected)."""
    with psycopg.connect(libpq_url(database_url)) as conn:
        states = dict(
            conn.execute("SELECT state, count(*) FROM reach_actions GROUP BY state").fetchall()
        )
        receipts = conn.execute(
            "SELECT n, count(*) FROM (SELECT a.action_id, count(r.action_id) AS n "
            "FROM reach_actions a LEFT JOIN reach_receipts r ON r.action_id = a.action_id "
            "GROUP BY a.action_id) s GROUP BY n"
        ).fetchall()
    return {
        "states": {str(k): int(v) for k, v in states.items()},
        "actions_by_receipt_count": {int(n): int(c) for n, c in receipts},
    }


def epoch_now() -> float:
    return dt.datetime.now(dt.UTC).timestamp()

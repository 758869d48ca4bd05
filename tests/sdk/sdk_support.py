"""Test doubles for the SDK tests: rich statuses built the way a reachstore server builds
them, and small QueryService / IngestService / ReachService servicers for a real
in-process gRPC server.

Deliberately independent of ``reachstore_server.*``: the servicers script their answers so each
test can check exactly what crossed the wire.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import struct_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb2
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore.query.v1 import query_service_pb2 as query_pb2
from reachstore.query.v1 import query_service_pb2_grpc as query_grpc
from reachstore.reach.v1 import reach_service_pb2 as reach_pb2
from reachstore.reach.v1 import reach_service_pb2_grpc as reach_grpc

Category = pf_pb2.Category


def failure_pb(
    code: str,
    category: int,
    *,
    retry_after_ms: int | None = None,
    data: dict[str, Any] | None = None,
    message: str | None = None,
    **where: Any,
) -> pf_pb2.PartialFailure:
    """A PartialFailure; retryable exactly when it has a wait, as the catalogue rules."""
    structured = struct_pb2.Struct()
    structured.update(data or {})
    failure = pf_pb2.PartialFailure(
        category=category,
        error_code=code,
        message=message or code.lower().replace("_", " "),
        retryable=retry_after_ms is not None,
        structured_data=structured,
        **where,
    )
    if retry_after_ms is not None:
        failure.retry_after_ms = retry_after_ms
    return failure


def rich_status(
    grpc_code: grpc.StatusCode,
    failure: pf_pb2.PartialFailure,
    *,
    extra: Sequence[pf_pb2.PartialFailure] = (),
    field: str | None = None,
) -> status_pb2.Status:
    """A google.rpc.Status laid out as the services lay it out: ErrorInfo, RetryInfo (when
    retryable), BadRequest (when a field is named), QuotaFailure (for quota), then the
    error's own PartialFailure, then the extra PartialFailures."""
    status = status_pb2.Status(code=grpc_code.value[0], message=failure.message)
    info = error_details_pb2.ErrorInfo(reason=failure.error_code, domain="reachstore")
    info.metadata["category"] = Category.Name(failure.category)
    info.metadata["retryable"] = str(failure.retryable).lower()
    status.details.add().Pack(info)
    if failure.HasField("retry_after_ms"):
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromMilliseconds(failure.retry_after_ms)
        status.details.add().Pack(retry)
    if field is not None:
        bad = error_details_pb2.BadRequest()
        bad.field_violations.add(field=field, description=failure.message)
        status.details.add().Pack(bad)
    if failure.category == Category.CATEGORY_QUOTA:
        quota = error_details_pb2.QuotaFailure()
        quota.violations.add(subject=failure.error_code, description=failure.message)
        status.details.add().Pack(quota)
    status.details.add().Pack(failure)
    for part in extra:
        status.details.add().Pack(part)
    return status


def abort(context: grpc.ServicerContext, status: status_pb2.Status) -> None:
    """Like the real services: a rich status, and the trailer that tells a channel's retry
    policy the answer stands (so only the SDK decides to retry)."""
    rich = rpc_status.to_status(status)
    trailers = (*rich.trailing_metadata, ("grpc-retry-pushback-ms", "-1"))
    context.abort_with_status(_Status(rich.code, rich.details, trailers))


class _Status(
    collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status
):
    pass


def _unavailable(namespace: str) -> pf_pb2.PartialFailure:
    return failure_pb(
        "NAMESPACE_UNAVAILABLE",
        Category.CATEGORY_PERMANENT,
        data={"namespace": namespace, "index_state": "unavailable"},
        namespace=namespace,
    )


def _timeout(namespace: str) -> pf_pb2.PartialFailure:
    return failure_pb(
        "NAMESPACE_TIMEOUT", Category.CATEGORY_TIMEOUT, retry_after_ms=1000, namespace=namespace
    )


def _page(items: list[Any], key: Any, page_size: int, token: str) -> tuple[list[Any], str]:
    """Key-ordered paging with the last key as the token (a stand-in for the real one)."""
    size = page_size or 20
    rest = [item for item in items if not token or key(item) > token]
    page = rest[:size]
    return page, key(page[-1]) if len(rest) > size else ""


class Recorder:
    """Keeps every request, and fails the next calls with ``fail_next`` (one status each)
    before answering normally again."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.times: list[float] = []  # monotonic receipt time of each request
        self.fail_next: list[status_pb2.Status] = []
        self._lock = threading.Lock()

    def _seen(self, request: Any, context: grpc.ServicerContext) -> None:
        with self._lock:
            self.requests.append(request)
            self.times.append(time.monotonic())
            failure = self.fail_next.pop(0) if self.fail_next else None
        if failure is not None:
            abort(context, failure)


class FakeQueryService(Recorder, query_grpc.QueryServiceServicer):
    """Namespaces starting with "nope" are unavailable, "slow" ones time out, "flaky" ones
    time out (retryable after 100 ms) the first time only, "hang" blocks until ``release``
    is set; the rest answer with one chunk each."""

    def __init__(self, documents: Iterable[str] = ()) -> None:
        super().__init__()
        self.release = threading.Event()
        self.documents = sorted(documents)
        self._flaky_seen: set[str] = set()

    def Query(self, request: query_pb2.QueryRequest, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        if request.namespace:
            abort(
                context,
                rich_status(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    failure_pb(
                        "DEPRECATED_FIELD",
                        Category.CATEGORY_PERMANENT,
                        data={"field": "namespace", "use_instead": "namespaces"},
                    ),
                    field="namespace",
                ),
            )
        if "hang" in request.namespaces:
            self.release.wait(timeout=10)
        results, succeeded, failed = [], [], []
        for rank, name in enumerate(request.namespaces):
            if name.startswith("nope"):
                failed.append(_unavailable(name))
            elif name.startswith("slow"):
                failed.append(_timeout(name))
            elif name.startswith("flaky") and name not in self._flaky_seen:
                self._flaky_seen.add(name)
                failed.append(
                    failure_pb(
                        "NAMESPACE_TIMEOUT",
                        Category.CATEGORY_TIMEOUT,
                        retry_after_ms=100,
                        namespace=name,
                    )
                )
            else:
                succeeded.append(name)
                results.append(
                    query_pb2.QueryResult(
                        namespace=name,
                        document_id=f"{name}-doc",
                        chunk_index=0,
                        text=f"about {request.query} in {name}",
                        score=1.0 / (rank + 1),
                        metadata={"source": name},
                    )
                )
        coverage = len(succeeded) / len(request.namespaces) if request.namespaces else 0.0
        if failed and request.HasField("allow_partial") and not request.allow_partial:
            abort(
                context,
                rich_status(
                    grpc.StatusCode.UNAVAILABLE,
                    failure_pb(
                        "INCOMPLETE_RESULT",
                        Category.CATEGORY_TRANSIENT,
                        retry_after_ms=1000,
                        data={"coverage_ratio": coverage, "field": "allow_partial"},
                    ),
                    extra=failed,
                    field="allow_partial",
                ),
            )
        return query_pb2.QueryResponse(
            results=results[: request.top_k or 10],
            meta=query_pb2.QueryMeta(
                coverage_ratio=coverage,
                namespaces_queried=list(request.namespaces),
                namespaces_succeeded=succeeded,
                namespaces_failed=failed,
            ),
        )

    def GetDocument(
        self, request: query_pb2.GetDocumentRequest, context: grpc.ServicerContext
    ) -> Any:
        self._seen(request, context)
        if request.document_id not in self.documents:
            abort(
                context,
                rich_status(
                    grpc.StatusCode.NOT_FOUND,
                    failure_pb(
                        "DOCUMENT_NOT_FOUND",
                        Category.CATEGORY_PERMANENT,
                        data={"namespace": request.namespace, "document_id": request.document_id},
                    ),
                ),
            )
        return query_pb2.GetDocumentResponse(
            document=self._document(request.namespace, request.document_id, True)
        )

    def ListDocuments(
        self, request: query_pb2.ListDocumentsRequest, context: grpc.ServicerContext
    ) -> Any:
        self._seen(request, context)
        page, token = _page(self.documents, lambda d: d, request.page_size, request.page_token)
        return query_pb2.ListDocumentsResponse(
            documents=[self._document(request.namespace, d, False) for d in page],
            next_page_token=token,
        )

    @staticmethod
    def _document(namespace: str, document_id: str, with_text: bool) -> query_pb2.Document:
        return query_pb2.Document(
            namespace=namespace,
            document_id=document_id,
            text=f"text of {document_id}" if with_text else "",
            metadata={"id": document_id},
            chunk_count=2,
            content_sha256="ab" * 32,
            updated_at="2026-01-02T03:04:05Z",
        )


class FakeIngestService(Recorder, ingest_grpc.IngestServiceServicer):
    """Namespaces in memory; each task walks through ``task_script`` one GetTask at a time
    and stays on its last step. GetTask of "t-hang" blocks until ``release`` is set."""

    def __init__(self, task_script: Sequence[ingest_pb2.Task] = ()) -> None:
        super().__init__()
        self.namespaces: dict[str, ingest_pb2.Namespace] = {}
        self.task_polls: list[float] = []  # monotonic receipt time of each GetTask
        self.task_script = list(task_script)
        self.release = threading.Event()

    def _namespace_unavailable(self, context: grpc.ServicerContext, name: str) -> None:
        abort(context, rich_status(grpc.StatusCode.NOT_FOUND, _unavailable(name)))

    def CreateNamespace(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        if request.name in self.namespaces:
            abort(
                context,
                rich_status(
                    grpc.StatusCode.ALREADY_EXISTS,
                    failure_pb(
                        "NAMESPACE_EXISTS",
                        Category.CATEGORY_PERMANENT,
                        data={"namespace": request.name},
                    ),
                ),
            )
        namespace = ingest_pb2.Namespace(
            name=request.name,
            embedding_model="test-model",
            dimension=8,
            created_at="2026-01-02T03:04:05Z",
        )
        self.namespaces[request.name] = namespace
        return ingest_pb2.CreateNamespaceResponse(namespace=namespace)

    def GetNamespace(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        if request.name not in self.namespaces:
            self._namespace_unavailable(context, request.name)
        return ingest_pb2.GetNamespaceResponse(namespace=self.namespaces[request.name])

    def ListNamespaces(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        items = sorted(self.namespaces.values(), key=lambda n: n.name)
        page, token = _page(items, lambda n: n.name, request.page_size, request.page_token)
        return ingest_pb2.ListNamespacesResponse(namespaces=page, next_page_token=token)

    def DeleteNamespace(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        if self.namespaces.pop(request.name, None) is None:
            self._namespace_unavailable(context, request.name)
        return ingest_pb2.DeleteNamespaceResponse()

    def CreateDocument(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        return ingest_pb2.CreateDocumentResponse(
            task=ingest_pb2.Task(
                task_id="task-1",
                namespace=request.namespace,
                document_id=request.document.document_id or "generated-1",
                state=ingest_pb2.TASK_STATE_QUEUED,
                agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_POLL_AGAIN,
                poll_after_ms=500,
            )
        )

    def BatchCreateDocuments(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Documents whose text is empty are refused; the others are accepted."""
        self._seen(request, context)
        results, failed = [], []
        for index, document in enumerate(request.documents):
            document_id = document.document_id or f"generated-{index}"
            if document.text:
                results.append(
                    ingest_pb2.BatchDocumentResult(
                        batch_index=index,
                        document_id=document_id,
                        outcome=ingest_pb2.DOCUMENT_OUTCOME_ACCEPTED,
                        task_id=f"task-{index}",
                    )
                )
            else:
                results.append(
                    ingest_pb2.BatchDocumentResult(
                        batch_index=index,
                        document_id=document_id,
                        outcome=ingest_pb2.DOCUMENT_OUTCOME_FAILED,
                    )
                )
                failed.append(
                    failure_pb(
                        "INVALID_ARGUMENT",
                        Category.CATEGORY_PERMANENT,
                        data={"field": f"documents[{index}].text", "rule": "required"},
                        batch_index=index,
                        document_id=document_id,
                    )
                )
        accepted = len(request.documents) - len(failed)
        return ingest_pb2.BatchCreateDocumentsResponse(
            results=results,
            meta=ingest_pb2.BatchMeta(
                coverage_ratio=accepted / len(request.documents), failed=failed
            ),
        )

    def DeleteDocument(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        return ingest_pb2.DeleteDocumentResponse()

    def GetTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.task_id == "t-hang":
            self.release.wait(timeout=10)
        with self._lock:
            self.requests.append(request)
            self.task_polls.append(time.monotonic())
            step = min(len(self.task_polls), len(self.task_script)) - 1
        if step < 0:
            abort(
                context,
                rich_status(
                    grpc.StatusCode.NOT_FOUND,
                    failure_pb(
                        "TASK_NOT_FOUND",
                        Category.CATEGORY_PERMANENT,
                        data={"task_id": request.task_id},
                    ),
                ),
            )
        task = ingest_pb2.Task()
        task.CopyFrom(self.task_script[step])
        task.task_id = request.task_id
        return ingest_pb2.GetTaskResponse(task=task)

    def CancelTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        return ingest_pb2.CancelTaskResponse(
            task=ingest_pb2.Task(
                task_id=request.task_id,
                state=ingest_pb2.TASK_STATE_CANCELLING,
                phase=ingest_pb2.TASK_PHASE_EMBEDDING,
                agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_POLL_AGAIN,
                poll_after_ms=250,
            )
        )


class FakeReachService(Recorder, reach_grpc.ReachServiceServicer):
    """SubmitTask and Reach reserve the task "rt-1" (a repeat with the same idempotency key
    is ``deduplicated``); GetTask walks through ``task_script`` one call at a time and
    stays on its last step."""

    def __init__(self) -> None:
        super().__init__()
        self.task_script: list[reach_pb2.Task] = []
        self._keys: set[str] = set()
        self._polls = 0

    def _reserve(self, entity_id: str, key: str, specs: Sequence[reach_pb2.ActionSpec]) -> Any:
        with self._lock:
            repeat = bool(key) and key in self._keys
            self._keys.add(key)
        actions = [
            reach_pb2.Action(
                action_id=f"a-{index}",
                task_id="rt-1",
                name=spec.name,
                channel=spec.channel,
                action_type=spec.action_type,
                params=spec.params,
                depends_on=spec.depends_on,
                requirement=spec.requirement or reach_pb2.REQUIREMENT_REQUIRED,
                idempotency_key=f"default/{entity_id}/{spec.action_type}/digest/day",
                state=reach_pb2.ACTION_STATE_READY,
            )
            for index, spec in enumerate(specs)
        ]
        task = reach_pb2.Task(
            task_id="rt-1",
            entity_id=entity_id,
            idempotency_key=key,
            state=reach_pb2.TASK_STATE_PENDING,
            version=1,
            actions=actions,
            poll_after_ms=100,
        )
        return task, repeat

    def SubmitTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        task, repeat = self._reserve(request.entity_id, request.idempotency_key, request.actions)
        return reach_pb2.SubmitTaskResponse(
            task=task, deduplicated=repeat, validated_only=request.validate_only
        )

    def Reach(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        task, repeat = self._reserve(request.entity_id, request.idempotency_key, [request.action])
        action = task.actions[0]
        return reach_pb2.ReachResponse(
            task_id=task.task_id,
            action_id=action.action_id,
            idempotency_key=action.idempotency_key,
            state=action.state,
            deduplicated=repeat,
        )

    def GetTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        with self._lock:
            self._polls += 1
            step = min(self._polls, len(self.task_script)) - 1
        if step < 0:
            abort(
                context,
                rich_status(
                    grpc.StatusCode.NOT_FOUND,
                    failure_pb(
                        "REACH_TASK_NOT_FOUND",
                        Category.CATEGORY_PERMANENT,
                        data={"task_id": request.task_id},
                    ),
                ),
            )
        task = reach_pb2.Task()
        task.CopyFrom(self.task_script[step])
        task.task_id = request.task_id
        failed = [a.failure for a in task.actions if a.HasField("failure")]
        return reach_pb2.GetTaskResponse(task=task, partial_failures=failed)


def serve(
    query: FakeQueryService | None = None,
    ingest: FakeIngestService | None = None,
    address: str = "127.0.0.1:0",
    reach: FakeReachService | None = None,
) -> tuple[grpc.Server, int]:
    """A started sync gRPC server with the given servicers, and its port (0 if binding
    ``address`` failed; the server is then stopped)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    if query is not None:
        query_grpc.add_QueryServiceServicer_to_server(query, server)
    if ingest is not None:
        ingest_grpc.add_IngestServiceServicer_to_server(ingest, server)
    if reach is not None:
        reach_grpc.add_ReachServiceServicer_to_server(reach, server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        server.stop(None)
        return server, 0
    server.start()
    return server, port


@dataclasses.dataclass
class Served:
    """The fake services behind one running server, for tests to inspect."""

    query: FakeQueryService
    ingest: FakeIngestService
    port: int
    reach: FakeReachService = dataclasses.field(default_factory=FakeReachService)

"""IngestService: validates and converts requests, calls the store, converts back.

Storage calls are blocking (SQLAlchemy), so each runs in a worker thread; the event loop
keeps serving other calls meanwhile.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

import grpc

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from reachstore_server.common import errors, limits, names, nul_strings, paging
from reachstore_server.common.auth import Caller
from reachstore_server.common.identity import caller
from reachstore_server.embedding import Embedder
from reachstore_server.ingest.api.convert import namespace_to_pb, task_to_pb
from reachstore_server.storage.records import Usage
from reachstore_server.storage.repository import NamespaceExists, NamespaceInfo, SemanticStore
from reachstore_server.storage.tasks import NewTask, TaskInfo, TaskStore

T = TypeVar("T")

# How often the queue is read for the backlog check (``IngestServicer._check_backlog``).
BACKLOG_READ_EVERY_S = 1.0

_ON_DUPLICATE: dict[int, str] = {
    pb.ON_DUPLICATE_UNSPECIFIED: "error",
    pb.ON_DUPLICATE_ERROR: "error",
    pb.ON_DUPLICATE_SKIP: "skip",
    pb.ON_DUPLICATE_OVERWRITE: "overwrite",
}


def _on_duplicate(value: int) -> str:
    if value not in _ON_DUPLICATE:
        raise errors.invalid("on_duplicate", "must be skip, overwrite or error")
    return _ON_DUPLICATE[value]


def _check_document(doc: pb.DocumentInput, field: str) -> str:
    """Validates one document; returns its id (generated when empty)."""
    nul_strings.check_item(doc, field)  # a batch's documents are not checked up front
    document_id = doc.document_id or uuid.uuid4().hex
    if doc.document_id:
        names.check_document_id(doc.document_id, f"{field}.document_id")
    if not doc.text.strip():
        raise errors.invalid(f"{field}.text", "is required and must not be blank")
    size = len(doc.text.encode())
    if size > names.MAX_DOCUMENT_BYTES:
        raise errors.over_limit(
            errors.DOCUMENT_TOO_LARGE,
            f"{field}.text",
            "bytes",
            names.MAX_DOCUMENT_BYTES,
            size,
            unit="bytes",
        )
    names.check_metadata(dict(doc.metadata), f"{field}.metadata")
    return document_id


class IngestServicer(pb_grpc.IngestServiceServicer):
    def __init__(
        self,
        store: SemanticStore,
        tasks: TaskStore,
        embedder: Embedder,
        wake_worker: Callable[[], None],
        quotas: limits.Limits | None = None,
        max_queue_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._quotas = quotas or limits.Limits()
        self._max_queue_s = max_queue_s
        self._clock = clock
        # (when read, oldest queued wait in seconds): the queue as last read.
        self._queue_seen: tuple[float, float] | None = None
        self._store = store
        self._tasks = tasks
        self._embedder = embedder
        self._wake_worker = wake_worker

    @staticmethod
    async def _run(fn: Callable[..., T], *args: object) -> T:
        return await asyncio.to_thread(fn, *args)

    async def _namespace(self, who: Caller, name: str, field: str) -> NamespaceInfo:
        """The namespace, if it exists and the caller's key may use it. Both refusals are
        the same answer, after the same look-up (anti-enumeration)."""
        names.check_namespace_name(name, field)
        info = await self._run(self._store.get_namespace, who.tenant, name)
        if info is None or not who.may_use(name):
            raise errors.namespace_unavailable(name)
        return info

    async def _check_backlog(self) -> None:
        """Refuses new documents while the oldest queued one has waited longer than
        ``max_queue_s``: past that, accepting more only delays every later document further
        (docs/OPERATIONS.md, "Load shedding"). The queue is read at most once a second, so
        under a burst of writes the check costs one query a second, not one per call."""
        now = self._clock()
        if self._queue_seen is None or now - self._queue_seen[0] >= BACKLOG_READ_EVERY_S:
            _, waited = await self._run(self._tasks.queue)
            self._queue_seen = (now, waited)
        waited = self._queue_seen[1]
        if waited <= self._max_queue_s:
            return
        # The queue must shed its excess wait before new work is worth taking: advise that
        # long, within [1 s, max_queue_s].
        retry_s = min(max(waited - self._max_queue_s, 1.0), self._max_queue_s)
        # The queue is every tenant's: the refusal names the bound, never the figures of a
        # queue that holds other tenants' documents.
        raise errors.ReachstoreError(
            errors.INGEST_BACKLOG,
            f"the ingest queue is more than {self._max_queue_s:g} s behind; retry in "
            f"{retry_s:.1f} s",
            retry_after_ms=math.ceil(retry_s * 1000),
            structured_data={"max_queue_s": self._max_queue_s},
        )

    # --- namespaces -------------------------------------------------------------------

    async def CreateNamespace(
        self, request: pb.CreateNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateNamespaceResponse:
        who = caller(context)
        names.check_namespace_name(request.name, "name")
        if not who.may_use(request.name):
            raise errors.outside_grants(request.name)
        usage = await self._run(self._store.usage, who.tenant, request.name)
        if limits.namespace_quota_left(self._quotas, usage.namespaces) < 1:
            raise errors.over_limit(
                errors.NAMESPACE_LIMIT_REACHED,
                "name",
                "namespaces with this one",
                self._quotas.max_namespaces_per_tenant,
                usage.namespaces + 1,
            )
        try:
            info = await self._run(
                self._store.create_namespace,
                who.tenant,
                request.name,
                self._embedder.model_id,
                self._embedder.dimension,
            )
        except NamespaceExists:
            raise errors.ReachstoreError(
                errors.NAMESPACE_EXISTS,
                f"namespace {request.name!r} already exists",
                structured_data={"namespace": request.name},
            ) from None
        return pb.CreateNamespaceResponse(namespace=namespace_to_pb(info))

    async def GetNamespace(
        self, request: pb.GetNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetNamespaceResponse:
        info = await self._namespace(caller(context), request.name, "name")
        return pb.GetNamespaceResponse(namespace=namespace_to_pb(info))

    async def ListNamespaces(
        self, request: pb.ListNamespacesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListNamespacesResponse:
        size = names.page_size(request.page_size)
        after = paging.decode_token(request.page_token)
        who = caller(context)
        rows = await self._run(self._store.list_namespaces, who.tenant, size + 1, after)
        page = rows[:size]
        token = paging.encode_token(page[-1].name) if len(rows) > size else ""
        # Namespaces outside the key's grants are left out, so a page may come back short.
        return pb.ListNamespacesResponse(
            namespaces=[namespace_to_pb(r) for r in page if who.may_use(r.name)],
            next_page_token=token,
        )

    async def DeleteNamespace(
        self, request: pb.DeleteNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteNamespaceResponse:
        who = caller(context)
        await self._namespace(who, request.name, "name")
        if not await self._run(self._store.delete_namespace, who.tenant, request.name):
            raise errors.namespace_unavailable(request.name)
        await self._run(self._tasks.delete_for_namespace, who.tenant, request.name)
        return pb.DeleteNamespaceResponse()

    # --- documents --------------------------------------------------------------------

    async def CreateDocument(
        self, request: pb.CreateDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateDocumentResponse:
        names.check_namespace_name(request.namespace, "namespace")
        if not request.HasField("document"):
            raise errors.invalid("document", "is required")
        document_id = _check_document(request.document, "document")
        on_duplicate = _on_duplicate(request.on_duplicate)
        await self._check_backlog()
        who = caller(context)
        new = NewTask(
            request.namespace,
            document_id,
            request.document.text,
            dict(request.document.metadata),
            on_duplicate,
        )
        # Whether the namespace exists, and whether the id is taken, are decided by the task
        # and reported in its progress: accepting is only about the request's own shape.
        # A namespace outside the key's grants gets the very answer of a missing one: a
        # task that fails as unavailable.
        if who.may_use(request.namespace):
            usage = await self._run(self._store.usage, who.tenant, request.namespace)
            refusal = self._size_refusal(
                "document",
                usage,
                limits.documents_left(self._quotas, usage.documents),
                limits.bytes_left(self._quotas, usage.stored_bytes),
                len(new.text.encode()),
            )
            if refusal is not None:
                raise refusal
            [task] = await self._run(self._tasks.enqueue, who.tenant, [new], who.key_id)
            self._wake_worker()
        else:
            refusal = errors.namespace_unavailable(request.namespace)
            task = await self._run(
                self._tasks.enqueue_refused,
                who.tenant,
                new,
                refusal.code,
                refusal.failure.message,
                dict(refusal.failure.structured_data),
                who.key_id,
            )
            self._wake_worker()
        return pb.CreateDocumentResponse(task=task_to_pb(task))

    async def BatchCreateDocuments(
        self, request: pb.BatchCreateDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.BatchCreateDocumentsResponse:
        who = caller(context)
        tenant = who.tenant
        docs = request.documents
        self._check_envelope(docs)
        on_duplicate = _on_duplicate(request.on_duplicate)
        await self._check_backlog()
        namespace = await self._namespace(who, request.namespace, "namespace")

        results: list[pb.BatchDocumentResult] = []
        failed = []
        accepted: list[tuple[int, NewTask]] = []
        # A NUL fails its document below; looked up, it would fail the query on PostgreSQL.
        ids = [d.document_id for d in docs if d.document_id and "\x00" not in d.document_id]
        existing = await self._run(self._store.existing_document_ids, tenant, namespace.id, ids)
        for index, doc in enumerate(docs):
            try:
                document_id = _check_document(doc, f"documents[{index}]")
                if document_id in existing and on_duplicate == "error":
                    raise errors.ReachstoreError(
                        errors.DOCUMENT_EXISTS,
                        f"document {document_id!r} already exists",
                        structured_data={"document_id": document_id, "on_duplicate": "error"},
                    )
            except errors.ReachstoreError as exc:
                failure = exc.failure
                failure.document_id, failure.batch_index = doc.document_id, index
                failed.append(failure)
                results.append(
                    pb.BatchDocumentResult(
                        batch_index=index,
                        document_id=doc.document_id,
                        outcome=pb.DOCUMENT_OUTCOME_FAILED,
                    )
                )
                continue
            if document_id in existing and on_duplicate == "skip":
                results.append(
                    pb.BatchDocumentResult(
                        batch_index=index,
                        document_id=document_id,
                        outcome=pb.DOCUMENT_OUTCOME_SKIPPED,
                    )
                )
                continue
            results.append(
                pb.BatchDocumentResult(
                    batch_index=index, document_id=document_id, outcome=pb.DOCUMENT_OUTCOME_ACCEPTED
                )
            )
            accepted.append(
                (
                    index,
                    NewTask(
                        namespace.name, document_id, doc.text, dict(doc.metadata), on_duplicate
                    ),
                )
            )
        accepted = await self._within_quotas(tenant, namespace.name, accepted, results, failed)
        if accepted:
            tasks = await self._run(
                self._tasks.enqueue, tenant, [t for _, t in accepted], who.key_id
            )
            for (index, _), task in zip(accepted, tasks, strict=True):
                results[index].task_id = task.task_id
            self._wake_worker()
        meta = pb.BatchMeta(coverage_ratio=(len(docs) - len(failed)) / len(docs), failed=failed)
        return pb.BatchCreateDocumentsResponse(results=results, meta=meta)

    async def _within_quotas(
        self,
        tenant: str,
        namespace: str,
        accepted: list[tuple[int, NewTask]],
        results: list[pb.BatchDocumentResult],
        failed: list[pf_pb2.PartialFailure],
    ) -> list[tuple[int, NewTask]]:
        """Admits documents in order while the size quotas last; the others fail one by
        one and the rest of the batch is stored. A document too large for what is left
        does not stop a smaller one after it."""
        if not accepted:
            return accepted
        usage = await self._run(self._store.usage, tenant, namespace)
        docs_left = limits.documents_left(self._quotas, usage.documents)
        bytes_left = limits.bytes_left(self._quotas, usage.stored_bytes)
        admitted = []
        for index, task in accepted:
            size = len(task.text.encode())
            refusal = self._size_refusal(f"documents[{index}]", usage, docs_left, bytes_left, size)
            if refusal is None:
                docs_left, bytes_left = docs_left - 1, bytes_left - size
                admitted.append((index, task))
                continue
            failure = refusal.failure
            failure.document_id, failure.batch_index = task.document_id, index
            failed.append(failure)
            results[index].outcome = pb.DOCUMENT_OUTCOME_FAILED
        return admitted

    def _size_refusal(
        self, field: str, usage: Usage, docs_left: int, bytes_left: int, size: int
    ) -> errors.ReachstoreError | None:
        if docs_left < 1:
            return errors.over_limit(
                errors.DOCUMENT_LIMIT_REACHED,
                field,
                "documents in the namespace with this one",
                self._quotas.max_documents_per_namespace,
                usage.documents + 1,
            )
        if size > bytes_left:
            return errors.over_limit(
                errors.STORAGE_LIMIT_REACHED,
                field,
                "bytes stored by the tenant with this one",
                self._quotas.max_bytes_per_tenant,
                usage.stored_bytes + size,
                unit="bytes",
            )
        return None

    @staticmethod
    def _check_envelope(docs: Sequence[pb.DocumentInput]) -> None:
        """Faults of the batch as a whole: nothing of it is accepted."""
        if not docs:
            raise errors.ReachstoreError(
                errors.BATCH_EMPTY,
                "documents: the batch is empty",
                field="documents",
                structured_data={"limit": names.MAX_BATCH_DOCUMENTS, "actual": 0},
            )
        if len(docs) > names.MAX_BATCH_DOCUMENTS:
            raise errors.over_limit(
                errors.BATCH_TOO_LARGE,
                "documents",
                "documents",
                names.MAX_BATCH_DOCUMENTS,
                len(docs),
            )
        total = sum(len(d.text.encode()) for d in docs)
        if total > names.MAX_BATCH_BYTES:
            raise errors.over_limit(
                errors.BATCH_TOO_LARGE,
                "documents",
                "bytes of text",
                names.MAX_BATCH_BYTES,
                total,
                unit="bytes",
            )
        seen: dict[str, int] = {}
        duplicates = sorted(
            {
                d.document_id
                for i, d in enumerate(docs)
                if d.document_id and seen.setdefault(d.document_id, i) != i
            }
        )
        if duplicates:
            raise errors.ReachstoreError(
                errors.DUPLICATE_DOCUMENT_IDS,
                f"documents: ids appear more than once: {', '.join(duplicates[:10])}",
                field="documents",
                structured_data={"duplicate_ids": duplicates[:100]},
            )

    async def DeleteDocument(
        self, request: pb.DeleteDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteDocumentResponse:
        who = caller(context)
        namespace = await self._namespace(who, request.namespace, "namespace")
        names.check_document_id(request.document_id, "document_id")
        if not await self._run(
            self._store.delete_document, who.tenant, namespace.id, request.document_id
        ):
            raise errors.document_not_found(request.namespace, request.document_id)
        return pb.DeleteDocumentResponse()

    # --- tasks ------------------------------------------------------------------------

    async def GetTask(
        self, request: pb.GetTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTaskResponse:
        return pb.GetTaskResponse(
            task=task_to_pb(await self._task(caller(context), request.task_id))
        )

    async def CancelTask(
        self, request: pb.CancelTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelTaskResponse:
        who = caller(context)
        await self._task(who, request.task_id)
        task = await self._run(self._tasks.request_cancel, who.tenant, request.task_id)
        if task is None:  # deleted with its namespace in between
            raise _task_not_found(request.task_id)
        return pb.CancelTaskResponse(task=task_to_pb(task))

    async def _task(self, who: Caller, task_id: str) -> TaskInfo:
        """The task, if it is the caller's tenant's and the caller's key submitted it or may
        use its namespace."""
        task = await self._run(self._tasks.get, who.tenant, task_id)
        mine = task is not None and who.key_id != "" and task.submitted_by == who.key_id
        if task is None or not (mine or who.may_use(task.namespace)):
            raise _task_not_found(task_id)
        return task


def _task_not_found(task_id: str) -> errors.ReachstoreError:
    return errors.ReachstoreError(
        errors.TASK_NOT_FOUND, "no task has this id", structured_data={"task_id": task_id[:64]}
    )

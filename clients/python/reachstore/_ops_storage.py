"""Storage operations (query, namespaces, documents, ingest tasks) and API keys.

Each method returns a flow (see ``_flow``); the clients' methods of the same names run
them and carry the user-facing documentation.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reachstore import _convert, _merge
from reachstore._errors import DeadlineError, TaskWaitTimeoutError
from reachstore._flow import Flow, sleep
from reachstore._models import (
    ApiKey,
    BatchResponse,
    CreatedKey,
    Document,
    DocumentInput,
    Failure,
    Namespace,
    SearchRequest,
    SearchResponse,
    Task,
)
from reachstore._ops_common import OperationsBase
from reachstore._paging import Page, Pages
from reachstore.admin.v1 import key_service_pb2 as key_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb2
from reachstore.query.v1 import query_service_pb2 as query_pb2

# How long to wait between polls when a running task gives no poll_after_ms.
DEFAULT_POLL_MS = 500
# A floor under the server's advice, so a `poll_after_ms: 0` cannot make a busy loop.
MIN_POLL_MS = 10
# The wait before re-asking a retryable namespace that advised none.
DEFAULT_RETRY_WAIT_MS = 1000


class StorageOperations(OperationsBase):
    # --- query -----------------------------------------------------------------------------

    def search(
        self,
        namespaces: Iterable[str],
        query: str,
        top_k: int,
        filter: Mapping[str, str] | None,
        timeout_ms: int | None,
        allow_partial: bool | None,
        timeout: float | None,
    ) -> Flow[SearchResponse]:
        request = _convert.search_request(
            namespaces, query, top_k, filter, timeout_ms, allow_partial
        )
        return self._search(request, timeout)

    def _search(self, request: SearchRequest, timeout: float | None) -> Flow[SearchResponse]:
        response = yield from self._call(
            "QueryService.Query",
            _convert.query_request_pb(request),
            query_pb2.QueryResponse,
            timeout,
        )
        return _convert.search_response_from_pb(response, request)

    def retry_failed(
        self,
        resp: SearchResponse,
        timeout_ms: int | None,
        wait: bool,
        timeout: float | None,
    ) -> Flow[SearchResponse]:
        if resp.request is None:
            raise ValueError(
                "this answer does not carry its request; retry_failed needs an answer "
                "returned by search() or retry_failed()"
            )
        names = _merge.retryable_namespaces(resp)
        if not names:
            return resp
        if wait:
            advised = [f.retry_after_ms for f in resp.meta.namespaces_failed if f.retryable]
            yield from sleep(max(w or DEFAULT_RETRY_WAIT_MS for w in advised) / 1000)
        again = yield from self._search(
            dataclasses.replace(
                resp.request,
                namespaces=names,
                timeout_ms=timeout_ms or resp.request.timeout_ms,
                # A partial answer is what is being completed: take one again.
                allow_partial=None,
            ),
            timeout,
        )
        return _merge.merge(resp, again, resp.request.top_k or 10)

    # --- namespaces -------------------------------------------------------------------------

    def create_namespace(self, name: str, timeout: float | None) -> Flow[Namespace]:
        response = yield from self._call(
            "IngestService.CreateNamespace",
            ingest_pb2.CreateNamespaceRequest(name=name),
            ingest_pb2.CreateNamespaceResponse,
            timeout,
        )
        return _convert.namespace_from_pb(response.namespace)

    def get_namespace(self, name: str, timeout: float | None) -> Flow[Namespace]:
        response = yield from self._call(
            "IngestService.GetNamespace",
            ingest_pb2.GetNamespaceRequest(name=name),
            ingest_pb2.GetNamespaceResponse,
            timeout,
        )
        return _convert.namespace_from_pb(response.namespace)

    def namespace_pages(self, page_size: int | None, timeout: float | None) -> Pages[Namespace]:
        def page(token: str) -> Flow[Page[Namespace]]:
            response = yield from self._call(
                "IngestService.ListNamespaces",
                ingest_pb2.ListNamespacesRequest(page_size=page_size or 0, page_token=token),
                ingest_pb2.ListNamespacesResponse,
                timeout,
            )
            return Page(
                [_convert.namespace_from_pb(n) for n in response.namespaces],
                response.next_page_token,
            )

        return page

    def delete_namespace(self, name: str, timeout: float | None) -> Flow[None]:
        yield from self._call(
            "IngestService.DeleteNamespace",
            ingest_pb2.DeleteNamespaceRequest(name=name),
            ingest_pb2.DeleteNamespaceResponse,
            timeout,
        )

    # --- documents --------------------------------------------------------------------------

    def add_document(
        self,
        namespace: str,
        text: str,
        document_id: str | None,
        metadata: Mapping[str, str] | None,
        on_duplicate: str,
        timeout: float | None,
    ) -> Flow[Task]:
        request = ingest_pb2.CreateDocumentRequest(
            namespace=namespace,
            document=_convert.document_input_to_pb(
                DocumentInput(text=text, document_id=document_id, metadata=metadata)
            ),
            on_duplicate=_convert.on_duplicate_to_pb(on_duplicate),
        )
        response = yield from self._call(
            "IngestService.CreateDocument", request, ingest_pb2.CreateDocumentResponse, timeout
        )
        return _convert.task_from_pb(response.task)

    def add_documents(
        self,
        namespace: str,
        documents: Sequence[DocumentInput | Mapping[str, Any]],
        on_duplicate: str,
        timeout: float | None,
    ) -> Flow[BatchResponse]:
        request = ingest_pb2.BatchCreateDocumentsRequest(
            namespace=namespace,
            documents=[_convert.document_input_to_pb(d) for d in documents],
            on_duplicate=_convert.on_duplicate_to_pb(on_duplicate),
        )
        response = yield from self._call(
            "IngestService.BatchCreateDocuments",
            request,
            ingest_pb2.BatchCreateDocumentsResponse,
            timeout,
        )
        return _convert.batch_response_from_pb(response)

    def get_document(
        self, namespace: str, document_id: str, timeout: float | None
    ) -> Flow[Document]:
        response = yield from self._call(
            "QueryService.GetDocument",
            query_pb2.GetDocumentRequest(namespace=namespace, document_id=document_id),
            query_pb2.GetDocumentResponse,
            timeout,
        )
        return _convert.document_from_pb(response.document)

    def document_pages(
        self, namespace: str, page_size: int | None, timeout: float | None
    ) -> Pages[Document]:
        def page(token: str) -> Flow[Page[Document]]:
            response = yield from self._call(
                "QueryService.ListDocuments",
                query_pb2.ListDocumentsRequest(
                    namespace=namespace, page_size=page_size or 0, page_token=token
                ),
                query_pb2.ListDocumentsResponse,
                timeout,
            )
            return Page(
                [_convert.document_from_pb(d) for d in response.documents],
                response.next_page_token,
            )

        return page

    def delete_document(
        self, namespace: str, document_id: str, timeout: float | None
    ) -> Flow[None]:
        yield from self._call(
            "IngestService.DeleteDocument",
            ingest_pb2.DeleteDocumentRequest(namespace=namespace, document_id=document_id),
            ingest_pb2.DeleteDocumentResponse,
            timeout,
        )

    # --- ingest tasks -----------------------------------------------------------------------

    def get_task(self, task_id: str, timeout: float | None) -> Flow[Task]:
        response = yield from self._call(
            "IngestService.GetTask",
            ingest_pb2.GetTaskRequest(task_id=task_id),
            ingest_pb2.GetTaskResponse,
            timeout,
        )
        return _convert.task_from_pb(response.task)

    def cancel_task(self, task_id: str, timeout: float | None) -> Flow[Task]:
        response = yield from self._call(
            "IngestService.CancelTask",
            ingest_pb2.CancelTaskRequest(task_id=task_id),
            ingest_pb2.CancelTaskResponse,
            timeout,
        )
        return _convert.task_from_pb(response.task)

    def wait_for_task(self, task: str | Task, timeout: float) -> Flow[Task]:
        task_id = task.task_id if isinstance(task, Task) else task
        deadline = time.monotonic() + timeout
        last: Task | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _task_wait_timeout(task_id, timeout, last)
            # Each poll is bounded by what is left of the wait, so the wait as a whole
            # never overruns `timeout` by a full RPC deadline.
            try:
                last = yield from self.get_task(task_id, min(self.timeout, remaining))
            except DeadlineError as exc:
                if remaining < self.timeout:
                    raise _task_wait_timeout(task_id, timeout, last) from exc
                raise
            if last.done:
                return last
            pause = _poll_ms(last.poll_after_ms) / 1000
            yield from sleep(min(pause, deadline - time.monotonic()))

    # --- keys -------------------------------------------------------------------------------

    def create_key(
        self,
        scopes: Iterable[str],
        name: str,
        namespaces: Iterable[str] | None,
        channels: Iterable[str] | None,
        groups: Iterable[str] | None,
        ttl_seconds: int,
        timeout: float | None,
    ) -> Flow[CreatedKey]:
        request = key_pb2.CreateKeyRequest(
            name=name,
            scopes=_convert.strings_arg(scopes, "scopes"),
            namespaces=_convert.strings_arg(namespaces, "namespaces"),
            channels=_convert.strings_arg(channels, "channels"),
            groups=_convert.strings_arg(groups, "groups"),
            ttl_seconds=ttl_seconds,
        )
        response = yield from self._call(
            "KeyService.CreateKey", request, key_pb2.CreateKeyResponse, timeout
        )
        return CreatedKey(key=_convert.api_key_from_pb(response.key), secret=response.secret)

    def key_pages(self, page_size: int | None, timeout: float | None) -> Pages[ApiKey]:
        def page(token: str) -> Flow[Page[ApiKey]]:
            response = yield from self._call(
                "KeyService.ListKeys",
                key_pb2.ListKeysRequest(page_size=page_size or 0, page_token=token),
                key_pb2.ListKeysResponse,
                timeout,
            )
            return Page(
                [_convert.api_key_from_pb(k) for k in response.keys], response.next_page_token
            )

        return page

    def current_key(self, timeout: float | None) -> Flow[ApiKey]:
        response = yield from self._call(
            "KeyService.GetCurrentKey",
            key_pb2.GetCurrentKeyRequest(),
            key_pb2.GetCurrentKeyResponse,
            timeout,
        )
        return _convert.api_key_from_pb(response.key)

    def revoke_key(self, key_id: str, timeout: float | None) -> Flow[ApiKey]:
        response = yield from self._call(
            "KeyService.RevokeKey",
            key_pb2.RevokeKeyRequest(key_id=key_id),
            key_pb2.RevokeKeyResponse,
            timeout,
        )
        return _convert.api_key_from_pb(response.key)


def _poll_ms(advised: int | None) -> int:
    return max(MIN_POLL_MS, advised if advised is not None else DEFAULT_POLL_MS)


def wait_timeout_error(
    what: str, task_id: str, timeout: float, state: str | None, poll_after_ms: int | None
) -> Failure:
    """The failure of a wait that ran out of time: retryable, since the task itself keeps
    running and waiting longer may well see it end."""
    seen = state or "unknown"
    return Failure(
        category="timeout",
        error_code="DEADLINE_EXCEEDED",
        message=f"{what} {task_id} was still {seen} after {timeout:g} s",
        retryable=True,
        retry_after_ms=_poll_ms(poll_after_ms),
        structured_data={"task_id": task_id, "state": seen, "waited_ms": round(timeout * 1000)},
    )


def _task_wait_timeout(task_id: str, timeout: float, last: Task | None) -> TaskWaitTimeoutError:
    failure = wait_timeout_error(
        "task",
        task_id,
        timeout,
        last.state if last else None,
        last.poll_after_ms if last else None,
    )
    return TaskWaitTimeoutError(failure, task=last)

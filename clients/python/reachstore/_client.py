"""The synchronous gRPC client.

One method per RPC, each under a deadline (the call's ``timeout`` or the client's), each
returning SDK models and raising SDK exceptions. No retries here: what to retry, and
when, is read from the exceptions' ``retryable`` / ``retry_after_ms`` and from
``meta.namespaces_failed`` of partial answers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc

from reachstore import _convert
from reachstore._errors import DeadlineError, TaskWaitTimeoutError, from_rpc_error
from reachstore._models import (
    BatchResponse,
    Document,
    DocumentInput,
    Failure,
    Namespace,
    SearchResponse,
    Task,
)
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb2
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore.query.v1 import query_service_pb2 as query_pb2
from reachstore.query.v1 import query_service_pb2_grpc as query_grpc

# Batches carry up to 16 MiB of text; the services accept 32 MiB messages, so do we.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
# Where the client looks for an API key when none is passed.
API_KEY_ENV = "REACHSTORE_API_KEY"
# How long to wait between polls when a running task gives no poll_after_ms.
DEFAULT_POLL_MS = 500
# A floor under the server's advice, so a `poll_after_ms: 0` cannot make a busy loop.
MIN_POLL_MS = 10

_Response = TypeVar("_Response")


class Client:
    """A connection to a reachstore system's query and ingest services.

    >>> with Client.local() as client:
    ...     resp = client.search(["policy", "orders"], "where is my refund?")
    ...     if resp.meta.coverage_ratio < 1:
    ...         for failed in resp.meta.namespaces_failed:
    ...             print(failed["namespace"], failed["category"], failed["retryable"])
    """

    def __init__(
        self,
        query_target: str = "127.0.0.1:50051",
        ingest_target: str = "127.0.0.1:50052",
        *,
        timeout: float = 30.0,
        api_key: str | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive seconds")
        self.timeout = timeout
        # The key from the argument, else from the environment; none means the keyless
        # local caller of a development system.
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {key}"),) if key else ()
        )
        # Channels connect lazily, so building a client never blocks or fails.
        self._query_channel = grpc.insecure_channel(query_target, options=CHANNEL_OPTIONS)
        self._ingest_channel = grpc.insecure_channel(ingest_target, options=CHANNEL_OPTIONS)
        self._query = query_grpc.QueryServiceStub(self._query_channel)
        self._ingest = ingest_grpc.IngestServiceStub(self._ingest_channel)

    @classmethod
    def local(cls, host: str = "127.0.0.1", grpc_port_base: int = 50051, **kwargs: Any) -> Client:
        """A client for ``reachstore up``: query on the port base, ingest on base + 1."""
        return cls(f"{host}:{grpc_port_base}", f"{host}:{grpc_port_base + 1}", **kwargs)

    def close(self) -> None:
        """Closes both channels; calls in flight are cancelled."""
        self._query_channel.close()
        self._ingest_channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- plumbing ---------------------------------------------------------------------------

    def _call(
        self,
        method: Callable[..., _Response],
        request: Any,
        timeout: float | None,
    ) -> _Response:
        """Runs one RPC under a deadline, translating gRPC errors into SDK exceptions."""
        try:
            return method(
                request,
                timeout=self.timeout if timeout is None else timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    # --- query -----------------------------------------------------------------------------

    def search(
        self,
        namespaces: Iterable[str],
        query: str,
        top_k: int = 10,
        *,
        filter: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
        allow_partial: bool | None = None,
        timeout: float | None = None,
    ) -> SearchResponse:
        """Searches several namespaces at once and merges the answers.

        A namespace that fails does not fail the call: check ``meta.coverage_ratio`` and
        ``meta.namespaces_failed``. With ``allow_partial=False`` an incomplete answer
        raises instead (code ``INCOMPLETE_RESULT``; the per-namespace failures are the
        error's ``details``). ``timeout_ms`` is the server-side budget per namespace;
        ``timeout`` the client-side deadline of the whole call, in seconds.
        """
        request = _convert.query_request(
            namespaces, query, top_k, filter, timeout_ms, allow_partial
        )
        response = self._call(self._query.Query, request, timeout)
        return _convert.search_response_from_pb(response)

    # --- namespaces --------------------------------------------------------------------------

    def create_namespace(self, name: str, *, timeout: float | None = None) -> Namespace:
        request = ingest_pb2.CreateNamespaceRequest(name=name)
        response = self._call(self._ingest.CreateNamespace, request, timeout)
        return _convert.namespace_from_pb(response.namespace)

    def get_namespace(self, name: str, *, timeout: float | None = None) -> Namespace:
        request = ingest_pb2.GetNamespaceRequest(name=name)
        response = self._call(self._ingest.GetNamespace, request, timeout)
        return _convert.namespace_from_pb(response.namespace)

    def list_namespaces(
        self, page_size: int | None = None, *, timeout: float | None = None
    ) -> Iterator[Namespace]:
        """Every namespace in name order, fetching pages as the iterator advances (so
        errors surface while iterating). ``timeout`` applies to each page."""
        token = ""
        while True:
            request = ingest_pb2.ListNamespacesRequest(page_size=page_size or 0, page_token=token)
            response = self._call(self._ingest.ListNamespaces, request, timeout)
            for namespace in response.namespaces:
                yield _convert.namespace_from_pb(namespace)
            token = response.next_page_token
            if not token:
                return

    def delete_namespace(self, name: str, *, timeout: float | None = None) -> None:
        request = ingest_pb2.DeleteNamespaceRequest(name=name)
        self._call(self._ingest.DeleteNamespace, request, timeout)

    # --- documents ----------------------------------------------------------------------------

    def add_document(
        self,
        namespace: str,
        text: str,
        *,
        document_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        on_duplicate: str = "error",
        timeout: float | None = None,
    ) -> Task:
        """Queues one document for ingestion and returns its task (see ``wait_for_task``).
        Problems that depend on stored state (unknown namespace, duplicate id) show in the
        task's ``error``, not here."""
        request = ingest_pb2.CreateDocumentRequest(
            namespace=namespace,
            document=_convert.document_input_to_pb(
                DocumentInput(text=text, document_id=document_id, metadata=metadata)
            ),
            on_duplicate=_convert.on_duplicate_to_pb(on_duplicate),
        )
        response = self._call(self._ingest.CreateDocument, request, timeout)
        return _convert.task_from_pb(response.task)

    def add_documents(
        self,
        namespace: str,
        documents: Sequence[DocumentInput | Mapping[str, Any]],
        on_duplicate: str = "error",
        *,
        timeout: float | None = None,
    ) -> BatchResponse:
        """Submits 1 to 100 documents. Refused documents are listed in ``meta.failed`` (and
        on their ``results`` entry) while the others proceed; check ``meta.coverage_ratio``."""
        request = ingest_pb2.BatchCreateDocumentsRequest(
            namespace=namespace,
            documents=[_convert.document_input_to_pb(d) for d in documents],
            on_duplicate=_convert.on_duplicate_to_pb(on_duplicate),
        )
        response = self._call(self._ingest.BatchCreateDocuments, request, timeout)
        return _convert.batch_response_from_pb(response)

    def get_document(
        self, namespace: str, document_id: str, *, timeout: float | None = None
    ) -> Document:
        request = query_pb2.GetDocumentRequest(namespace=namespace, document_id=document_id)
        response = self._call(self._query.GetDocument, request, timeout)
        return _convert.document_from_pb(response.document)

    def list_documents(
        self, namespace: str, page_size: int | None = None, *, timeout: float | None = None
    ) -> Iterator[Document]:
        """Every document of a namespace in id order, without texts, fetching pages as
        the iterator advances. ``timeout`` applies to each page."""
        token = ""
        while True:
            request = query_pb2.ListDocumentsRequest(
                namespace=namespace, page_size=page_size or 0, page_token=token
            )
            response = self._call(self._query.ListDocuments, request, timeout)
            for document in response.documents:
                yield _convert.document_from_pb(document)
            token = response.next_page_token
            if not token:
                return

    def delete_document(
        self, namespace: str, document_id: str, *, timeout: float | None = None
    ) -> None:
        request = ingest_pb2.DeleteDocumentRequest(namespace=namespace, document_id=document_id)
        self._call(self._ingest.DeleteDocument, request, timeout)

    # --- tasks -----------------------------------------------------------------------------------

    def get_task(self, task_id: str, *, timeout: float | None = None) -> Task:
        request = ingest_pb2.GetTaskRequest(task_id=task_id)
        response = self._call(self._ingest.GetTask, request, timeout)
        return _convert.task_from_pb(response.task)

    def cancel_task(self, task_id: str, *, timeout: float | None = None) -> Task:
        request = ingest_pb2.CancelTaskRequest(task_id=task_id)
        response = self._call(self._ingest.CancelTask, request, timeout)
        return _convert.task_from_pb(response.task)

    def wait_for_task(self, task_id: str | Task, timeout: float = 60.0) -> Task:
        """Polls a task, waiting ``poll_after_ms`` between polls as the server advises,
        until it is completed, failed or cancelled, and returns it. A failed task is
        returned, not raised: read its ``error``.

        Raises ``TaskWaitTimeoutError`` (a ``DeadlineError`` and a builtin
        ``TimeoutError``) when ``timeout`` seconds pass first; its ``task`` is the last
        state seen. ``task_id`` may also be the Task that ``add_document`` returned.
        """
        if isinstance(task_id, Task):
            task_id = task_id.task_id
        deadline = time.monotonic() + timeout
        last: Task | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _wait_timeout(task_id, timeout, last)
            # Each poll is bounded by what is left of the wait, so the wait as a whole
            # never overruns `timeout` by a full RPC deadline.
            try:
                last = self.get_task(task_id, timeout=min(self.timeout, remaining))
            except DeadlineError as exc:
                if remaining < self.timeout:
                    raise _wait_timeout(task_id, timeout, last) from exc
                raise
            if last.done:
                return last
            pause = _poll_ms(last) / 1000
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))


def _poll_ms(task: Task) -> int:
    advised = task.poll_after_ms if task.poll_after_ms is not None else DEFAULT_POLL_MS
    return max(MIN_POLL_MS, advised)


def _wait_timeout(task_id: str, timeout: float, last: Task | None) -> TaskWaitTimeoutError:
    state = last.state if last is not None else "unknown"
    wait = _poll_ms(last) if last is not None else DEFAULT_POLL_MS
    return TaskWaitTimeoutError(
        Failure(
            category="timeout",
            error_code="DEADLINE_EXCEEDED",
            message=f"task {task_id} was still {state} after {timeout:g} s",
            # Waiting longer may well see it finish: the task itself keeps running.
            retryable=True,
            retry_after_ms=wait,
            structured_data={
                "task_id": task_id,
                "state": state,
                "waited_ms": round(timeout * 1000),
            },
        ),
        task=last,
    )

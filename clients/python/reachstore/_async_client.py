"""The asynchronous client: ``Client``'s methods as coroutines, listings as async iterators.

It runs the very operations ``Client`` runs (``_ops_*``), awaiting each step instead of
blocking on it, over ``grpc.aio`` or ``httpx.AsyncClient``. Use it from one event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from google.protobuf.message import Message

from reachstore import _flow
from reachstore._audit_models import AppendResult, AuditEvent, Checkpoint, VerifyResult
from reachstore._client_base import (
    DEFAULT_AUDIT_TARGET,
    DEFAULT_INGEST_TARGET,
    DEFAULT_QUERY_TARGET,
    DEFAULT_REACH_TARGET,
    DEFAULT_RETRIES,
    Operations,
    grpc_targets,
)
from reachstore._config import (
    DEFAULT_GRPC_PORT_BASE,
    DEFAULT_HOST,
    DEFAULT_REST_URL,
    DEFAULT_TIMEOUT_S,
    local_targets,
    resolve_api_key,
)
from reachstore._flow import Flow, Send
from reachstore._models import (
    ApiKey,
    BatchResponse,
    CreatedKey,
    Document,
    DocumentInput,
    Namespace,
    SearchResponse,
    Task,
)
from reachstore._ops_reach import ActionArg
from reachstore._paging import aiterate
from reachstore._reach_models import (
    CancelResult,
    Channel,
    ReachAction,
    ReachResult,
    ReachTask,
    UnknownReview,
)
from reachstore._retry import RetryPolicy
from reachstore._tls import Tls, resolve_tls
from reachstore._transport_grpc import AsyncGrpcTransport
from reachstore._transport_rest import AsyncRestTransport

_T = TypeVar("_T")


class AsyncClient:
    """``Client`` for asyncio: the same methods, arguments, models, exceptions, deadlines
    and retries, awaited::

        async with AsyncClient.local() as client:
            resp = await client.search(["policy"], "where is my refund?")
            task = await client.submit_task("WO-1", [action], idempotency_key="WO-1/dispatch")
            done = await client.wait_for_reach_task(task)
            async for event in client.list_events(method="SubmitTask"):
                ...

    ``AsyncClient.rest(base_url)`` talks to the REST bridge instead of gRPC. See ``Client``
    for what each method does.
    """

    def __init__(
        self,
        query_target: str = DEFAULT_QUERY_TARGET,
        ingest_target: str = DEFAULT_INGEST_TARGET,
        *,
        reach_target: str = DEFAULT_REACH_TARGET,
        audit_target: str = DEFAULT_AUDIT_TARGET,
        timeout: float = DEFAULT_TIMEOUT_S,
        api_key: str | None = None,
        retries: RetryPolicy | None = DEFAULT_RETRIES,
        tls: Tls | bool | None = None,
    ) -> None:
        self._ops = Operations(timeout, retries)
        self._transport: AsyncGrpcTransport | AsyncRestTransport = AsyncGrpcTransport(
            grpc_targets(query_target, ingest_target, reach_target, audit_target),
            resolve_api_key(api_key),
            resolve_tls(tls),
        )

    @classmethod
    def local(
        cls,
        host: str = DEFAULT_HOST,
        grpc_port_base: int = DEFAULT_GRPC_PORT_BASE,
        **kwargs: Any,
    ) -> AsyncClient:
        """An async client for ``reachstore up`` (ports as in ``Client.local``)."""
        targets = local_targets(host, grpc_port_base)
        return cls(
            targets["query"],
            targets["ingest"],
            reach_target=targets["reach"],
            audit_target=targets["audit"],
            **kwargs,
        )

    @classmethod
    def rest(
        cls,
        base_url: str = DEFAULT_REST_URL,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        api_key: str | None = None,
        retries: RetryPolicy | None = DEFAULT_RETRIES,
        tls: Tls | bool | None = None,
    ) -> AsyncClient:
        """An async client that talks to the REST bridge."""
        client = cls.__new__(cls)
        client._ops = Operations(timeout, retries)
        client._transport = AsyncRestTransport(base_url, resolve_api_key(api_key), resolve_tls(tls))
        return client

    @property
    def timeout(self) -> float:
        return self._ops.timeout

    @property
    def retries(self) -> RetryPolicy | None:
        return self._ops.retries

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _send(self, step: Send) -> Message:
        return await self._transport.call(step.rpc, step.request, step.timeout)

    async def _run(self, flow: Flow[_T]) -> _T:
        return await _flow.arun(flow, self._send)

    # --- query -----------------------------------------------------------------------------

    async def search(
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
        return await self._run(
            self._ops.search(namespaces, query, top_k, filter, timeout_ms, allow_partial, timeout)
        )

    async def retry_failed(
        self,
        resp: SearchResponse,
        *,
        timeout_ms: int | None = None,
        wait: bool = True,
        timeout: float | None = None,
    ) -> SearchResponse:
        return await self._run(self._ops.retry_failed(resp, timeout_ms, wait, timeout))

    # --- namespaces --------------------------------------------------------------------------

    async def create_namespace(self, name: str, *, timeout: float | None = None) -> Namespace:
        return await self._run(self._ops.create_namespace(name, timeout))

    async def get_namespace(self, name: str, *, timeout: float | None = None) -> Namespace:
        return await self._run(self._ops.get_namespace(name, timeout))

    def list_namespaces(
        self, page_size: int | None = None, *, timeout: float | None = None
    ) -> AsyncIterator[Namespace]:
        return aiterate(self._run, self._ops.namespace_pages(page_size, timeout))

    async def delete_namespace(self, name: str, *, timeout: float | None = None) -> None:
        await self._run(self._ops.delete_namespace(name, timeout))

    # --- documents ----------------------------------------------------------------------------

    async def add_document(
        self,
        namespace: str,
        text: str,
        *,
        document_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        on_duplicate: str = "error",
        timeout: float | None = None,
    ) -> Task:
        return await self._run(
            self._ops.add_document(namespace, text, document_id, metadata, on_duplicate, timeout)
        )

    async def add_documents(
        self,
        namespace: str,
        documents: Sequence[DocumentInput | Mapping[str, Any]],
        on_duplicate: str = "error",
        *,
        timeout: float | None = None,
    ) -> BatchResponse:
        return await self._run(self._ops.add_documents(namespace, documents, on_duplicate, timeout))

    async def get_document(
        self, namespace: str, document_id: str, *, timeout: float | None = None
    ) -> Document:
        return await self._run(self._ops.get_document(namespace, document_id, timeout))

    def list_documents(
        self, namespace: str, page_size: int | None = None, *, timeout: float | None = None
    ) -> AsyncIterator[Document]:
        return aiterate(self._run, self._ops.document_pages(namespace, page_size, timeout))

    async def delete_document(
        self, namespace: str, document_id: str, *, timeout: float | None = None
    ) -> None:
        await self._run(self._ops.delete_document(namespace, document_id, timeout))

    # --- ingest tasks -----------------------------------------------------------------------

    async def get_task(self, task_id: str, *, timeout: float | None = None) -> Task:
        return await self._run(self._ops.get_task(task_id, timeout))

    async def cancel_task(self, task_id: str, *, timeout: float | None = None) -> Task:
        return await self._run(self._ops.cancel_task(task_id, timeout))

    async def wait_for_task(self, task_id: str | Task, timeout: float = 60.0) -> Task:
        return await self._run(self._ops.wait_for_task(task_id, timeout))

    # --- keys --------------------------------------------------------------------------------

    async def create_key(
        self,
        scopes: Iterable[str],
        *,
        name: str = "",
        namespaces: Iterable[str] | None = None,
        channels: Iterable[str] | None = None,
        groups: Iterable[str] | None = None,
        ttl_seconds: int = 0,
        timeout: float | None = None,
    ) -> CreatedKey:
        return await self._run(
            self._ops.create_key(scopes, name, namespaces, channels, groups, ttl_seconds, timeout)
        )

    def list_keys(
        self, page_size: int | None = None, *, timeout: float | None = None
    ) -> AsyncIterator[ApiKey]:
        return aiterate(self._run, self._ops.key_pages(page_size, timeout))

    async def current_key(self, *, timeout: float | None = None) -> ApiKey:
        return await self._run(self._ops.current_key(timeout))

    async def revoke_key(self, key_id: str, *, timeout: float | None = None) -> ApiKey:
        return await self._run(self._ops.revoke_key(key_id, timeout))

    # --- reach -------------------------------------------------------------------------------

    async def submit_task(
        self,
        entity_id: str,
        actions: Sequence[ActionArg],
        *,
        idempotency_key: str | None = None,
        logical_time: str | None = None,
        validate_only: bool = False,
        trace_id: str | None = None,
        timeout: float | None = None,
    ) -> ReachTask:
        return await self._run(
            self._ops.submit_task(
                entity_id, actions, idempotency_key, logical_time, validate_only, trace_id, timeout
            )
        )

    async def reach(
        self,
        action: ActionArg,
        *,
        entity_id: str,
        idempotency_key: str | None = None,
        logical_time: str | None = None,
        trace_id: str | None = None,
        timeout: float | None = None,
    ) -> ReachResult:
        return await self._run(
            self._ops.reach(action, entity_id, idempotency_key, logical_time, trace_id, timeout)
        )

    async def get_reach_task(
        self,
        task_id: str,
        *,
        wait_ms: int = 0,
        known_version: int = 0,
        timeout: float | None = None,
    ) -> ReachTask:
        return await self._run(self._ops.get_reach_task(task_id, wait_ms, known_version, timeout))

    async def wait_for_reach_task(
        self, task_id: str | ReachTask | ReachResult, timeout: float = 60.0
    ) -> ReachTask:
        return await self._run(self._ops.wait_for_reach_task(task_id, timeout))

    def list_reach_tasks(
        self,
        *,
        state: str | None = None,
        channel: str | None = None,
        entity_id: str | None = None,
        page_size: int = 20,
        timeout: float | None = None,
    ) -> AsyncIterator[ReachTask]:
        return aiterate(
            self._run, self._ops.task_pages(state, channel, entity_id, page_size, timeout)
        )

    async def get_action(self, action_id: str, *, timeout: float | None = None) -> ReachAction:
        return await self._run(self._ops.get_action(action_id, timeout))

    async def cancel_action(self, action_id: str, *, timeout: float | None = None) -> CancelResult:
        return await self._run(self._ops.cancel_action(action_id, timeout))

    async def resolve_action(
        self, action_id: str, outcome: str, note: str, *, timeout: float | None = None
    ) -> ReachAction:
        return await self._run(self._ops.resolve_action(action_id, outcome, note, timeout))

    async def list_channels(self, *, timeout: float | None = None) -> list[Channel]:
        return await self._run(self._ops.list_channels(timeout))

    async def unknown_review(
        self, *, since_s: int = 7 * 86400, channel: str | None = None, timeout: float | None = None
    ) -> UnknownReview:
        return await self._run(self._ops.unknown_review(since_s, channel, timeout))

    # --- audit -------------------------------------------------------------------------------

    def list_events(
        self,
        *,
        tenant: str | None = None,
        caller_key_id: str | None = None,
        service: str | None = None,
        method: str | None = None,
        idempotency_key: str | None = None,
        trace_id: str | None = None,
        since: str | None = None,
        until: str | None = None,
        page_size: int = 100,
        timeout: float | None = None,
    ) -> AsyncIterator[AuditEvent]:
        pages = self._ops.event_pages(
            tenant,
            caller_key_id,
            service,
            method,
            idempotency_key,
            trace_id,
            since,
            until,
            page_size,
            timeout,
        )
        return aiterate(self._run, pages)

    async def get_event(self, event_id: str, *, timeout: float | None = None) -> AuditEvent:
        return await self._run(self._ops.get_event(event_id, timeout))

    async def verify_audit(
        self,
        *,
        tenant: str | None = None,
        all_tenants: bool = False,
        from_seq: int = 0,
        to_seq: int = 0,
        timeout: float | None = None,
    ) -> VerifyResult:
        return await self._run(
            self._ops.verify_audit(tenant, all_tenants, from_seq, to_seq, timeout)
        )

    async def get_checkpoint(
        self, tenant: str | None = None, *, timeout: float | None = None
    ) -> Checkpoint | None:
        return await self._run(self._ops.get_checkpoint(tenant, timeout))

    async def append_events(
        self, events: Sequence[AuditEvent], *, timeout: float | None = None
    ) -> AppendResult:
        return await self._run(self._ops.append_events(events, timeout))

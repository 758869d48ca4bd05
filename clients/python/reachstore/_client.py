"""The synchronous client.

One method per operation, each under a deadline (the call's ``timeout`` or the client's)
and the client's retry policy, each returning SDK models and raising SDK exceptions. The
operations themselves are written once (``_ops_*``) and shared with ``AsyncClient``; the
transport - gRPC or the REST bridge - is chosen when the client is made.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
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
from reachstore._paging import iterate
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
from reachstore._transport_grpc import GrpcTransport
from reachstore._transport_rest import RestTransport

_T = TypeVar("_T")


class Client:
    """A connection to a reachstore system: storage, keys, reach and audit.

    >>> with Client.local() as client:                  # gRPC, ports of `reachstore up`
    ...     resp = client.search(["policy", "orders"], "where is my refund?")
    ...     if resp.meta.coverage_ratio < 1:
    ...         for failed in resp.meta.namespaces_failed:
    ...             print(failed["namespace"], failed["category"], failed["retryable"])

    ``Client.rest("http://127.0.0.1:8420")`` gives the same client over the REST bridge.
    ``timeout`` is the default deadline of each call, in seconds, retries included;
    ``api_key`` defaults to ``$REACHSTORE_API_KEY``; ``retries`` is the retry policy
    (None: never retry); ``tls`` is how to speak TLS (a ``Tls``; True: trust the
    system's authorities; None: what ``$REACHSTORE_TLS_*`` say, plain text if unset;
    False: plain text).
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
        self._transport: GrpcTransport | RestTransport = GrpcTransport(
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
    ) -> Client:
        """A client for ``reachstore up``: query on the port base, ingest (and keys) on
        base + 1, reach on base + 2, audit on base + 3."""
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
    ) -> Client:
        """A client that talks to the REST bridge (``reachstore up`` serves it on 8420)
        instead of gRPC: same methods, same models, same exceptions."""
        client = cls.__new__(cls)
        client._ops = Operations(timeout, retries)
        client._transport = RestTransport(base_url, resolve_api_key(api_key), resolve_tls(tls))
        return client

    @property
    def timeout(self) -> float:
        """The default deadline of each call, in seconds."""
        return self._ops.timeout

    @property
    def retries(self) -> RetryPolicy | None:
        return self._ops.retries

    def close(self) -> None:
        """Closes the connections; calls in flight are cancelled."""
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _send(self, step: Send) -> Message:
        return self._transport.call(step.rpc, step.request, step.timeout)

    def _run(self, flow: Flow[_T]) -> _T:
        return _flow.run(flow, self._send)

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
        ``meta.namespaces_failed`` (or hand the answer to ``retry_failed``). With
        ``allow_partial=False`` an incomplete answer raises instead (code
        ``INCOMPLETE_RESULT``; the per-namespace failures are the error's ``details``).
        ``timeout_ms`` is the server-side budget per namespace; ``timeout`` the client-side
        deadline of the whole call, in seconds.
        """
        return self._run(
            self._ops.search(namespaces, query, top_k, filter, timeout_ms, allow_partial, timeout)
        )

    def retry_failed(
        self,
        resp: SearchResponse,
        *,
        timeout_ms: int | None = None,
        wait: bool = True,
        timeout: float | None = None,
    ) -> SearchResponse:
        """Asks again the namespaces of a partial answer whose failures were retryable,
        after the longest ``retry_after_ms`` they advised, and merges the two answers.

        Namespaces that failed for good are not asked again; results are re-ranked by
        score (at most ``top_k``) and ``meta`` is recomputed over the namespaces first
        asked. The answer can be passed to ``retry_failed`` again. An answer with nothing
        retryable is returned as it is, without a call. ``timeout_ms`` gives the retried
        namespaces another server-side budget (default: the first one); ``wait=False``
        skips the advised wait.
        """
        return self._run(self._ops.retry_failed(resp, timeout_ms, wait, timeout))

    # --- namespaces --------------------------------------------------------------------------

    def create_namespace(self, name: str, *, timeout: float | None = None) -> Namespace:
        return self._run(self._ops.create_namespace(name, timeout))

    def get_namespace(self, name: str, *, timeout: float | None = None) -> Namespace:
        return self._run(self._ops.get_namespace(name, timeout))

    def list_namespaces(
        self, page_size: int | None = None, *, timeout: float | None = None
    ) -> Iterator[Namespace]:
        """Every namespace in name order, fetching pages as the iterator advances (so
        errors surface while iterating). ``timeout`` applies to each page."""
        return iterate(self._run, self._ops.namespace_pages(page_size, timeout))

    def delete_namespace(self, name: str, *, timeout: float | None = None) -> None:
        self._run(self._ops.delete_namespace(name, timeout))

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
        task's ``error``, not here. Not retried: a repeat would queue it twice."""
        return self._run(
            self._ops.add_document(namespace, text, document_id, metadata, on_duplicate, timeout)
        )

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
        return self._run(self._ops.add_documents(namespace, documents, on_duplicate, timeout))

    def get_document(
        self, namespace: str, document_id: str, *, timeout: float | None = None
    ) -> Document:
        return self._run(self._ops.get_document(namespace, document_id, timeout))

    def list_documents(
        self, namespace: str, page_size: int | None = None, *, timeout: float | None = None
    ) -> Iterator[Document]:
        """Every document of a namespace in id order, without texts, fetching pages as
        the iterator advances. ``timeout`` applies to each page."""
        return iterate(self._run, self._ops.document_pages(namespace, page_size, timeout))

    def delete_document(
        self, namespace: str, document_id: str, *, timeout: float | None = None
    ) -> None:
        self._run(self._ops.delete_document(namespace, document_id, timeout))

    # --- ingest tasks -----------------------------------------------------------------------

    def get_task(self, task_id: str, *, timeout: float | None = None) -> Task:
        return self._run(self._ops.get_task(task_id, timeout))

    def cancel_task(self, task_id: str, *, timeout: float | None = None) -> Task:
        return self._run(self._ops.cancel_task(task_id, timeout))

    def wait_for_task(self, task_id: str | Task, timeout: float = 60.0) -> Task:
        """Polls a task, waiting ``poll_after_ms`` between polls as the server advises,
        until it is completed, failed or cancelled, and returns it. A failed task is
        returned, not raised: read its ``error``.

        Raises ``TaskWaitTimeoutError`` (a ``DeadlineError`` and a builtin
        ``TimeoutError``) when ``timeout`` seconds pass first; its ``task`` is the last
        state seen. ``task_id`` may also be the Task that ``add_document`` returned.
        """
        return self._run(self._ops.wait_for_task(task_id, timeout))

    # --- keys --------------------------------------------------------------------------------

    def create_key(
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
        """Creates a key of the caller's tenant (admin scope). The secret is in the
        answer only: store it now. ``namespaces`` and ``channels`` are name patterns
        (``*``, ``?``; none means all); ``ttl_seconds`` 0 never expires."""
        return self._run(
            self._ops.create_key(scopes, name, namespaces, channels, groups, ttl_seconds, timeout)
        )

    def list_keys(
        self, page_size: int | None = None, *, timeout: float | None = None
    ) -> Iterator[ApiKey]:
        """The tenant's keys in id order, without secrets, page by page as iterated."""
        return iterate(self._run, self._ops.key_pages(page_size, timeout))

    def current_key(self, *, timeout: float | None = None) -> ApiKey:
        """The key this client calls with, without its secret: its tenant, scopes, grants,
        channel allow-list, groups and expiry (read scope). The keyless local caller gets
        its tenant and scopes, with an empty ``key_id``."""
        return self._run(self._ops.current_key(timeout))

    def revoke_key(self, key_id: str, *, timeout: float | None = None) -> ApiKey:
        """Revokes a key; calls made with it fail from then on. Repeating is harmless."""
        return self._run(self._ops.revoke_key(key_id, timeout))

    # --- reach -------------------------------------------------------------------------------

    def submit_task(
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
        """Reserves a task of 1 to 50 actions (``ActionInput`` or dicts with keys
        ``name``, ``channel``, ``action_type``, ``params``, ``depends_on`` and
        ``requirement``: ``"required"`` or ``"optional"``) and returns it at once; the
        actions run in the background (``wait_for_reach_task``).

        The task is checked whole - parameters, rules, permissions - and refused whole.
        Each action is reserved under its own idempotency key, so a repeat returns the
        task already reserved (``deduplicated``). Give ``idempotency_key`` to make repeats
        safe across time windows; only then is a failed submission retried automatically.
        ``validate_only`` runs every check and reserves nothing.
        """
        return self._run(
            self._ops.submit_task(
                entity_id, actions, idempotency_key, logical_time, validate_only, trace_id, timeout
            )
        )

    def reach(
        self,
        action: ActionArg,
        *,
        entity_id: str,
        idempotency_key: str | None = None,
        logical_time: str | None = None,
        trace_id: str | None = None,
        timeout: float | None = None,
    ) -> ReachResult:
        """The one-call form: a task of exactly one action. Returns where to follow it
        (``task_id``, ``action_id``). Retried automatically only with an
        ``idempotency_key``."""
        return self._run(
            self._ops.reach(action, entity_id, idempotency_key, logical_time, trace_id, timeout)
        )

    def get_reach_task(
        self,
        task_id: str,
        *,
        wait_ms: int = 0,
        known_version: int = 0,
        timeout: float | None = None,
    ) -> ReachTask:
        """A reach task with its actions and ``partial_failures``. With ``wait_ms`` (up
        to 30,000) the server holds the call until the task changes from
        ``known_version`` (0: its version now) or finishes; the default deadline is
        lengthened by the wait."""
        return self._run(self._ops.get_reach_task(task_id, wait_ms, known_version, timeout))

    def wait_for_reach_task(
        self, task_id: str | ReachTask | ReachResult, timeout: float = 60.0
    ) -> ReachTask:
        """Long-polls a reach task until waiting longer would change nothing without a
        person, and returns it: when it succeeded or failed (a failed task may still have
        independent actions running), or when every action is final or needs review
        (``resolve_action``). An ``unknown`` action is still being looked up, so the wait
        goes on.

        Raises ``TaskWaitTimeoutError`` when ``timeout`` seconds pass first; its ``task``
        is the last state seen. ``task_id`` may also be what ``submit_task`` or ``reach``
        returned.
        """
        return self._run(self._ops.wait_for_reach_task(task_id, timeout))

    def list_reach_tasks(
        self,
        *,
        state: str | None = None,
        channel: str | None = None,
        entity_id: str | None = None,
        page_size: int = 20,
        timeout: float | None = None,
    ) -> Iterator[ReachTask]:
        """The caller's reach tasks, newest first, filtered by state (``"running"``, ...),
        channel or entity, fetched page by page as iterated."""
        return iterate(
            self._run, self._ops.task_pages(state, channel, entity_id, page_size, timeout)
        )

    def get_action(self, action_id: str, *, timeout: float | None = None) -> ReachAction:
        """One action with its receipts and its history of state changes."""
        return self._run(self._ops.get_action(action_id, timeout))

    def cancel_action(self, action_id: str, *, timeout: float | None = None) -> CancelResult:
        """Cancels an action, best effort: one not yet sent always; one already sent only
        when its channel can cancel at the receiver. ``cancelled`` says whether it worked
        and ``partial_failures`` why not."""
        return self._run(self._ops.cancel_action(action_id, timeout))

    def resolve_action(
        self, action_id: str, outcome: str, note: str, *, timeout: float | None = None
    ) -> ReachAction:
        """Closes an ``unknown`` or ``needs_review`` action as ``"succeeded"`` or
        ``"failed"`` after a person checked the receiver (operator scope); ``note`` says
        what was checked. Not retried automatically."""
        return self._run(self._ops.resolve_action(action_id, outcome, note, timeout))

    def list_channels(self, *, timeout: float | None = None) -> list[Channel]:
        """The channels this caller may use, each described as a tool."""
        return self._run(self._ops.list_channels(timeout))

    def unknown_review(
        self, *, since_s: int = 7 * 86400, channel: str | None = None, timeout: float | None = None
    ) -> UnknownReview:
        """Every action of this tenant that entered UNKNOWN in the last ``since_s`` seconds
        (3600 to 90 days; a week by default), grouped by channel and by how it was settled:
        the weekly UNKNOWN review. Needs the operator scope."""
        return self._run(self._ops.unknown_review(since_s, channel, timeout))

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
    ) -> Iterator[AuditEvent]:
        """Audit events in chain order, filtered (``since``/``until`` are RFC 3339),
        page by page as iterated. Another tenant's trail needs the auditor scope."""
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
        return iterate(self._run, pages)

    def get_event(self, event_id: str, *, timeout: float | None = None) -> AuditEvent:
        return self._run(self._ops.get_event(event_id, timeout))

    def verify_audit(
        self,
        *,
        tenant: str | None = None,
        all_tenants: bool = False,
        from_seq: int = 0,
        to_seq: int = 0,
        timeout: float | None = None,
    ) -> VerifyResult:
        """Checks a tenant's chain (default: the caller's; a range with ``from_seq`` /
        ``to_seq``; every tenant with ``all_tenants`` and the auditor scope) against its
        signed checkpoints. A break is a result: ``ok`` false and ``first_break``."""
        return self._run(self._ops.verify_audit(tenant, all_tenants, from_seq, to_seq, timeout))

    def get_checkpoint(
        self, tenant: str | None = None, *, timeout: float | None = None
    ) -> Checkpoint | None:
        """The latest signed checkpoint of a tenant's chain; None while there is none."""
        return self._run(self._ops.get_checkpoint(tenant, timeout))

    def append_events(
        self, events: Sequence[AuditEvent], *, timeout: float | None = None
    ) -> AppendResult:
        """Appends events to the trail (internal scope: what the services' shippers do).
        Events are idempotent by ``event_id``; a batch whose events all have one is
        retried automatically."""
        return self._run(self._ops.append_events(events, timeout))

"""The one error catalogue of reachstore, and the one exception every service raises.

Each code names its category, whether it is retryable, the default wait, and the gRPC and
HTTP statuses it travels with. The same entry describes a whole-request error (raised as
``ReachstoreError`` and sent as a rich gRPC status) and a per-part failure (a
``PartialFailure`` inside a successful response), so a caller decodes one shape everywhere.
``docs/ERRORS.md`` is generated from this module (``python -m reachstore_server.common.errors``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2
from google.rpc import error_details_pb2, status_pb2

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2

Category = pf_pb2.Category
ERROR_DOMAIN = "reachstore"


# The standard gRPC -> HTTP mapping (google.rpc.Code). Errors that only the REST bridge
# raises may name another HTTP status; everything a service raises travels by this table.
HTTP_STATUS_FOR_GRPC: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
}

# Categories whose failures are always retryable, and those that never are. Quota may be
# either: a rate limit passes with time, a size cap does not.
_ALWAYS_RETRYABLE = (Category.CATEGORY_TRANSIENT, Category.CATEGORY_TIMEOUT)
_NEVER_RETRYABLE = (Category.CATEGORY_AUTH, Category.CATEGORY_PERMANENT)


@dataclasses.dataclass(frozen=True)
class ErrorSpec:
    """One entry of the catalogue. Retryable exactly when it has a default wait."""

    code: str
    category: pf_pb2.Category
    grpc_status: grpc.StatusCode
    description: str
    retry_after_ms: int | None = None
    bridge_http_status: int | None = None

    @property
    def retryable(self) -> bool:
        return self.retry_after_ms is not None

    @property
    def http_status(self) -> int:
        return self.bridge_http_status or HTTP_STATUS_FOR_GRPC[self.grpc_status]


_CATALOGUE: dict[str, ErrorSpec] = {}


def _entry(
    code: str,
    category: pf_pb2.Category,
    grpc_status: grpc.StatusCode,
    description: str,
    retry_after_ms: int | None = None,
    bridge_http_status: int | None = None,
) -> ErrorSpec:
    spec = ErrorSpec(code, category, grpc_status, description, retry_after_ms, bridge_http_status)
    if category in _ALWAYS_RETRYABLE and not spec.retryable:
        raise ValueError(f"{code}: transient and timeout codes need a default retry_after_ms")
    if category in _NEVER_RETRYABLE and spec.retryable:
        raise ValueError(f"{code}: auth and permanent codes are never retryable")
    _CATALOGUE[code] = spec
    return spec


_P, _T, _TO, _Q, _A = (
    Category.CATEGORY_PERMANENT,
    Category.CATEGORY_TRANSIENT,
    Category.CATEGORY_TIMEOUT,
    Category.CATEGORY_QUOTA,
    Category.CATEGORY_AUTH,
)
_S = grpc.StatusCode

# --- request shape -------------------------------------------------------------------
INVALID_ARGUMENT = _entry(
    "INVALID_ARGUMENT",
    _P,
    _S.INVALID_ARGUMENT,
    "A field breaks its rule; structured_data names the field and the rule.",
)
DEPRECATED_FIELD = _entry(
    "DEPRECATED_FIELD",
    _P,
    _S.INVALID_ARGUMENT,
    "A deprecated field was set; structured_data.use_instead names its replacement.",
)
MALFORMED_JSON = _entry(
    "MALFORMED_JSON",
    _P,
    _S.INVALID_ARGUMENT,
    "The HTTP body is not valid JSON, or not a JSON object.",
)
UNSUPPORTED_MEDIA_TYPE = _entry(
    "UNSUPPORTED_MEDIA_TYPE",
    _P,
    _S.INVALID_ARGUMENT,
    "The HTTP body, or a POST (even with an empty body), is not sent as application/json.",
    bridge_http_status=415,
)
PAYLOAD_TOO_LARGE = _entry(
    "PAYLOAD_TOO_LARGE",
    _P,
    _S.INVALID_ARGUMENT,
    "The request body is larger than the server accepts; structured_data has the limit.",
    bridge_http_status=413,
)
HOST_NOT_ALLOWED = _entry(
    "HOST_NOT_ALLOWED",
    _P,
    _S.PERMISSION_DENIED,
    "The request named a host the bridge does not serve (a DNS-rebinding page does): it "
    "answers loopback names, its own listen address and REACHSTORE_HTTP_ALLOWED_HOSTS.",
)
ORIGIN_NOT_ALLOWED = _entry(
    "ORIGIN_NOT_ALLOWED",
    _P,
    _S.PERMISSION_DENIED,
    "The request came from a web page of another origin; the bridge's own origin is "
    "served, others when listed in REACHSTORE_HTTP_ALLOWED_ORIGINS.",
)
ROUTE_NOT_FOUND = _entry(
    "ROUTE_NOT_FOUND",
    _P,
    _S.UNIMPLEMENTED,
    "No API route matches this path.",
    bridge_http_status=404,
)
METHOD_NOT_ALLOWED = _entry(
    "METHOD_NOT_ALLOWED",
    _P,
    _S.UNIMPLEMENTED,
    "The route exists but not for this HTTP method; structured_data.allowed lists them.",
    bridge_http_status=405,
)

# --- credentials ---------------------------------------------------------------------------
AUTH_MISSING = _entry(
    "AUTH_MISSING",
    _A,
    _S.UNAUTHENTICATED,
    "No API key was sent: use `authorization: Bearer <key>` (over HTTP also X-API-Key).",
)
AUTH_MALFORMED = _entry(
    "AUTH_MALFORMED",
    _A,
    _S.UNAUTHENTICATED,
    "The credential header is not `Bearer rsk_<id>_<secret>`.",
)
AUTH_INVALID_KEY = _entry("AUTH_INVALID_KEY", _A, _S.UNAUTHENTICATED, "The API key is not valid.")
AUTH_KEY_EXPIRED = _entry(
    "AUTH_KEY_EXPIRED",
    _A,
    _S.UNAUTHENTICATED,
    "The API key has expired; ask an admin of the tenant for a new one.",
)
AUTH_KEY_REVOKED = _entry(
    "AUTH_KEY_REVOKED",
    _A,
    _S.UNAUTHENTICATED,
    "The API key was revoked; ask an admin of the tenant for a new one.",
)
AUTH_SCOPE_MISSING = _entry(
    "AUTH_SCOPE_MISSING",
    _A,
    _S.PERMISSION_DENIED,
    "The API key is valid but lacks the scope this call needs; structured_data names it.",
)
KEY_NOT_FOUND = _entry("KEY_NOT_FOUND", _P, _S.NOT_FOUND, "The tenant has no API key with this id.")
KEY_EXCEEDS_CREATOR = _entry(
    "KEY_EXCEEDS_CREATOR",
    _A,
    _S.PERMISSION_DENIED,
    "A key made over the API may hold no more than the key making it: a scope, namespace or "
    "channel pattern, group or lifetime beyond it was asked for, or auditor or internal, "
    "which only the operator gives (`reachstore keys create`); structured_data names the field.",
)

# --- rate limits and quotas -------------------------------------------------------------
RATE_LIMITED = _entry(
    "RATE_LIMITED",
    _Q,
    _S.RESOURCE_EXHAUSTED,
    "Too many calls for this API key or its tenant; retry after retry_after_ms, the wait "
    "computed for this call.",
    retry_after_ms=1000,
)
NAMESPACE_RATE_LIMITED = _entry(
    "NAMESPACE_RATE_LIMITED",
    _Q,
    _S.RESOURCE_EXHAUSTED,
    "This namespace is searched more often than allowed; in a query only this namespace "
    "fails; retry it after retry_after_ms.",
    retry_after_ms=1000,
)
# Size caps do not pass with time, so they are not 429 (which clients retry blindly).
NAMESPACE_LIMIT_REACHED = _entry(
    "NAMESPACE_LIMIT_REACHED",
    _Q,
    _S.FAILED_PRECONDITION,
    "The tenant holds as many namespaces as allowed; delete one first. structured_data has "
    "the limit and the count.",
)
DOCUMENT_LIMIT_REACHED = _entry(
    "DOCUMENT_LIMIT_REACHED",
    _Q,
    _S.FAILED_PRECONDITION,
    "The namespace holds as many documents as allowed; in a batch only the documents over "
    "the limit fail. structured_data has the limit and the count.",
)
STORAGE_LIMIT_REACHED = _entry(
    "STORAGE_LIMIT_REACHED",
    _Q,
    _S.FAILED_PRECONDITION,
    "The tenant stores as many bytes as allowed; in a batch only the documents over the "
    "limit fail. structured_data has limit_bytes and actual_bytes.",
)

# --- batches ---------------------------------------------------------------------------
BATCH_EMPTY = _entry("BATCH_EMPTY", _P, _S.INVALID_ARGUMENT, "A batch holds no documents.")
BATCH_TOO_LARGE = _entry(
    "BATCH_TOO_LARGE",
    _Q,
    _S.INVALID_ARGUMENT,
    "A batch holds more documents or bytes than allowed; split it. structured_data has the "
    "limit and the actual value. Not retryable as sent.",
)
DUPLICATE_DOCUMENT_IDS = _entry(
    "DUPLICATE_DOCUMENT_IDS",
    _P,
    _S.INVALID_ARGUMENT,
    "The same document id appears more than once in one batch.",
)
DOCUMENT_TOO_LARGE = _entry(
    "DOCUMENT_TOO_LARGE",
    _P,
    _S.INVALID_ARGUMENT,
    "A document's text is larger than allowed; structured_data has the limit and the size.",
)

# --- namespaces, documents, tasks --------------------------------------------------------
NAMESPACE_UNAVAILABLE = _entry(
    "NAMESPACE_UNAVAILABLE",
    _P,
    _S.NOT_FOUND,
    "The namespace does not exist or is not visible to the caller; the two cases are "
    "deliberately indistinguishable.",
)
NAMESPACE_EXISTS = _entry(
    "NAMESPACE_EXISTS", _P, _S.ALREADY_EXISTS, "A namespace with this name already exists."
)
TOO_MANY_NAMESPACES = _entry(
    "TOO_MANY_NAMESPACES",
    _Q,
    _S.INVALID_ARGUMENT,
    "A query names more namespaces than allowed; structured_data has the cap and the count. "
    "Not retryable as sent: split the query.",
)
DOCUMENT_NOT_FOUND = _entry(
    "DOCUMENT_NOT_FOUND", _P, _S.NOT_FOUND, "The document does not exist in this namespace."
)
DOCUMENT_EXISTS = _entry(
    "DOCUMENT_EXISTS",
    _P,
    _S.ALREADY_EXISTS,
    "A document with this id exists and on_duplicate is error.",
)
TASK_NOT_FOUND = _entry("TASK_NOT_FOUND", _P, _S.NOT_FOUND, "No task has this id.")
EMBEDDING_MODEL_MISMATCH = _entry(
    "EMBEDDING_MODEL_MISMATCH",
    _P,
    _S.FAILED_PRECONDITION,
    "The namespace was built with another embedding model than the server runs; models "
    "are never mixed in one namespace.",
)

# --- query-time, per namespace -----------------------------------------------------------
NAMESPACE_TIMEOUT = _entry(
    "NAMESPACE_TIMEOUT",
    _TO,
    _S.DEADLINE_EXCEEDED,
    "The namespace did not answer within its time budget; its work was cancelled.",
    retry_after_ms=1000,
)
INDEX_REBUILDING = _entry(
    "INDEX_REBUILDING",
    _T,
    _S.UNAVAILABLE,
    "The namespace's index is being rebuilt from the store; retry after the advised wait.",
    retry_after_ms=2000,
)
SHARD_UNAVAILABLE = _entry(
    "SHARD_UNAVAILABLE",
    _T,
    _S.UNAVAILABLE,
    "No query process that holds the namespace answered (they are all down or restarting); "
    "retry after the advised wait, by when the namespace is placed on the live ones. "
    "structured_data names the reason (shard_unavailable) and the owners tried "
    "(docs/SHARDS.md).",
    retry_after_ms=2000,
)
INCOMPLETE_RESULT = _entry(
    "INCOMPLETE_RESULT",
    _T,
    _S.UNAVAILABLE,
    "allow_partial was false and some namespaces did not answer, each for a retryable "
    "reason; the per-namespace failures travel in the details.",
    retry_after_ms=1000,
)
INCOMPLETE_RESULT_PERMANENT = _entry(
    "INCOMPLETE_RESULT_PERMANENT",
    _P,
    _S.FAILED_PRECONDITION,
    "allow_partial was false and at least one namespace cannot answer as asked (its failure "
    "is not retryable); the per-namespace failures travel in the details.",
)

# --- reach: requests -----------------------------------------------------------------------
CHANNEL_NOT_ALLOWED = _entry(
    "CHANNEL_NOT_ALLOWED",
    _A,
    _S.PERMISSION_DENIED,
    "The channel is not configured or the API key's channel allow-list does not cover it "
    "(the two look alike on purpose); ListChannels shows the usable ones.",
)
PARAMS_REJECTED = _entry(
    "PARAMS_REJECTED",
    _P,
    _S.INVALID_ARGUMENT,
    "An action's parameters break the channel's schema or rules; one detail per "
    "offending action names the field and the rule. Nothing was reserved.",
)
IDEMPOTENCY_KEY_REUSED = _entry(
    "IDEMPOTENCY_KEY_REUSED",
    _P,
    _S.FAILED_PRECONDITION,
    "The task's idempotency key was used before for a task with different content; use a "
    "new key for a different task.",
)
ACTION_ALREADY_RESERVED = _entry(
    "ACTION_ALREADY_RESERVED",
    _P,
    _S.ALREADY_EXISTS,
    "An action of this task has the idempotency key of an action of another task; "
    "structured_data names it. It will not run twice.",
)
REACH_TASK_NOT_FOUND = _entry(
    "REACH_TASK_NOT_FOUND", _P, _S.NOT_FOUND, "The tenant has no reach task with this id."
)
ACTION_NOT_FOUND = _entry(
    "ACTION_NOT_FOUND", _P, _S.NOT_FOUND, "The tenant has no reach action with this id."
)
ACTION_NOT_RESOLVABLE = _entry(
    "ACTION_NOT_RESOLVABLE",
    _P,
    _S.FAILED_PRECONDITION,
    "Only an UNKNOWN or NEEDS_REVIEW action can be resolved by an operator.",
)
ACTION_NOT_RECHECKABLE = _entry(
    "ACTION_NOT_RECHECKABLE",
    _P,
    _S.FAILED_PRECONDITION,
    "Only an UNKNOWN or NEEDS_REVIEW action on a channel with a status look-up can be looked "
    "up again on request; structured_data says which condition failed.",
)

# --- reach: per action (inside responses) ----------------------------------------------------
ACTION_IN_FLIGHT = _entry(
    "ACTION_IN_FLIGHT",
    _T,
    _S.FAILED_PRECONDITION,
    "The action is being sent right now; ask again in a moment.",
    retry_after_ms=1000,
)
CANCEL_NOT_SUPPORTED = _entry(
    "CANCEL_NOT_SUPPORTED",
    _P,
    _S.FAILED_PRECONDITION,
    "The action was already sent and its receiver cannot cancel it (or refused to).",
)
ACTION_ALREADY_FINISHED = _entry(
    "ACTION_ALREADY_FINISHED", _P, _S.FAILED_PRECONDITION, "The action had already finished."
)
OUTCOME_UNKNOWN = _entry(
    "OUTCOME_UNKNOWN",
    _T,
    _S.UNAVAILABLE,
    "The action may or may not have taken effect. It is re-checked at the receiver and "
    "never re-sent blindly; ask again after the advised wait.",
    retry_after_ms=30_000,
)
REVIEW_REQUIRED = _entry(
    "REVIEW_REQUIRED",
    _P,
    _S.FAILED_PRECONDITION,
    "Re-checking could not settle the action's outcome; an operator must resolve it.",
)
DEPENDENCY_FAILED = _entry(
    "DEPENDENCY_FAILED",
    _P,
    _S.FAILED_PRECONDITION,
    "Not run: an action it depends on failed, was cancelled or was skipped.",
)
ACTION_CANCELLED = _entry("ACTION_CANCELLED", _P, _S.CANCELLED, "The action was cancelled.")
RESOLVED_FAILED = _entry(
    "RESOLVED_FAILED",
    _P,
    _S.FAILED_PRECONDITION,
    "An operator found that the action did not take effect; their note says why.",
)
RECEIVER_REPORTED_FAILURE = _entry(
    "RECEIVER_REPORTED_FAILURE",
    _P,
    _S.FAILED_PRECONDITION,
    "The receiver accepted the action and later reported that it failed.",
)
RECEIVER_REJECTED = _entry(
    "RECEIVER_REJECTED",
    _P,
    _S.FAILED_PRECONDITION,
    "The receiver refused the action on its merits (an HTTP 4xx, a gRPC INVALID_ARGUMENT).",
)
RECIPIENT_REFUSED = _entry(
    "RECIPIENT_REFUSED", _P, _S.FAILED_PRECONDITION, "The mail server refused a recipient."
)
INVALID_PARAMS = _entry(
    "INVALID_PARAMS",
    _P,
    _S.INVALID_ARGUMENT,
    "The receiver's request could not be built from the parameters.",
)
RECEIVER_AUTH_FAILED = _entry(
    "RECEIVER_AUTH_FAILED",
    _A,
    _S.FAILED_PRECONDITION,
    "The receiver refused reachstore's credentials for this channel (configuration).",
)
SMTP_AUTH_FAILED = _entry(
    "SMTP_AUTH_FAILED", _A, _S.FAILED_PRECONDITION, "The mail server refused the login."
)
RECEIVER_REDIRECTED = _entry(
    "RECEIVER_REDIRECTED",
    _P,
    _S.FAILED_PRECONDITION,
    "The receiver answered with a redirect; the channel's URL needs fixing.",
)
RECEIVER_ANSWER_TOO_LARGE = _entry(
    "RECEIVER_ANSWER_TOO_LARGE",
    _P,
    _S.FAILED_PRECONDITION,
    "The receiver's answer was larger than reachstore accepts; the call itself completed, "
    "so its outcome is unknown.",
)
RECEIVER_UNIMPLEMENTED = _entry(
    "RECEIVER_UNIMPLEMENTED",
    _P,
    _S.FAILED_PRECONDITION,
    "The receiver does not implement the configured method.",
)
SMTP_REJECTED = _entry(
    "SMTP_REJECTED", _P, _S.FAILED_PRECONDITION, "The mail server refused the message."
)
RECEIVER_REQUEST_INVALID = _entry(
    "RECEIVER_REQUEST_INVALID",
    _P,
    _S.FAILED_PRECONDITION,
    "The request to the receiver could not be built (for example a header that is not ASCII).",
)
SMTP_STARTTLS_UNSUPPORTED = _entry(
    "SMTP_STARTTLS_UNSUPPORTED",
    _P,
    _S.FAILED_PRECONDITION,
    "The channel requires STARTTLS and the mail server does not offer it; nothing is sent "
    "in plain text.",
)
SMTP_TLS_FAILED = _entry(
    "SMTP_TLS_FAILED",
    _P,
    _S.FAILED_PRECONDITION,
    "The TLS handshake with the mail server failed (for example an untrusted certificate).",
)
RECEIVER_RATE_LIMITED = _entry(
    "RECEIVER_RATE_LIMITED",
    _Q,
    _S.RESOURCE_EXHAUSTED,
    "The receiver is rate limiting reachstore (HTTP 429, gRPC RESOURCE_EXHAUSTED); its "
    "Retry-After is honoured.",
    retry_after_ms=5000,
)
_RECEIVER_TRANSIENT = {
    "RECEIVER_UNAVAILABLE": "The receiver answered with a server error (5xx, UNAVAILABLE).",
    "RECEIVER_UNREACHABLE": "No connection to the receiver could be made; nothing was sent.",
    "RECEIVER_CONNECTION_LOST": "The connection dropped after the request was sent.",
    "RECEIVER_ERROR": "The receiver failed in a way that may be temporary.",
    "RECEIVER_ABORTED": "The receiver aborted the call (gRPC ABORTED); it may succeed again.",
    "SMTP_TEMPORARY_FAILURE": "The mail server answered with a temporary (4xx) failure.",
    "SMTP_UNREACHABLE": "No connection to the mail server could be made; nothing was sent.",
    "SMTP_CONNECTION_LOST": "The mail server dropped the connection after the message was sent.",
}
for _code, _text in _RECEIVER_TRANSIENT.items():
    _entry(_code, _T, _S.UNAVAILABLE, _text, retry_after_ms=1000)
for _code, _text in {
    "RECEIVER_TIMEOUT": "The receiver did not answer in time after the request was sent.",
    "SMTP_TIMEOUT": "The mail server did not answer in time.",
}.items():
    _entry(_code, _TO, _S.DEADLINE_EXCEEDED, _text, retry_after_ms=1000)
PENDING_STALLED = _entry(
    "PENDING_STALLED",
    _TO,
    _S.DEADLINE_EXCEEDED,
    "The receiver accepted the action but reported no outcome within the channel's stall "
    "timeout; it is now UNKNOWN and re-checked.",
    retry_after_ms=30_000,
)

# --- audit -----------------------------------------------------------------------------------
AUDIT_EVENT_NOT_FOUND = _entry(
    "AUDIT_EVENT_NOT_FOUND", _P, _S.NOT_FOUND, "The tenant's audit trail has no event with this id."
)
AUDIT_TENANT_NOT_ALLOWED = _entry(
    "AUDIT_TENANT_NOT_ALLOWED",
    _A,
    _S.PERMISSION_DENIED,
    "An appended event names a tenant other than the key's own; only a deployment service "
    "key (`reachstore keys create --service`) appends for every tenant. Nothing was stored.",
)

# --- server side ---------------------------------------------------------------------------
SERVICE_UNAVAILABLE = _entry(
    "SERVICE_UNAVAILABLE",
    _T,
    _S.UNAVAILABLE,
    "A reachstore service did not answer; retry after the advised wait.",
    retry_after_ms=1000,
)
INGEST_BACKLOG = _entry(
    "INGEST_BACKLOG",
    _T,
    _S.UNAVAILABLE,
    "The ingest queue is too far behind (its oldest queued document has waited longer than "
    "REACHSTORE_INGEST_MAX_QUEUE_S): new documents are refused, nothing of this request was "
    "stored, until it catches up; retry after the advised wait. Queries are not affected. "
    "structured_data has the bound (the queue's own figures are every tenant's: not shown).",
    retry_after_ms=1000,
)
SERVICE_OVERLOADED = _entry(
    "SERVICE_OVERLOADED",
    _T,
    _S.UNAVAILABLE,
    "The service has more calls than it can serve before their deadlines and refused this "
    "one at once, before doing any of its work; retry after the advised wait, which is how "
    "long its backlog takes to drain. structured_data has the limit and the drain time "
    '(docs/OPERATIONS.md, "Load shedding").',
    retry_after_ms=1000,
)
DATABASE_UNAVAILABLE = _entry(
    "DATABASE_UNAVAILABLE",
    _T,
    _S.UNAVAILABLE,
    "The service lost its database for this call (connection refused or dropped, the server "
    "restarting, a transaction conflict); retry after the advised wait. A write that ended "
    "this way may or may not have taken effect: send it again with the same idempotency key.",
    retry_after_ms=1000,
)
DEADLINE_EXCEEDED = _entry(
    "DEADLINE_EXCEEDED",
    _TO,
    _S.DEADLINE_EXCEEDED,
    "The whole request ran out of time.",
    retry_after_ms=1000,
)
REQUEST_TOO_SLOW = _entry(
    "REQUEST_TOO_SLOW",
    _TO,
    _S.DEADLINE_EXCEEDED,
    "The request did not arrive in time: an HTTP request's head or body within the "
    "bridge's deadline (the connection is closed), or a gRPC call's message within the "
    "service's. structured_data says which part and the deadline.",
    retry_after_ms=1000,
    bridge_http_status=408,
)
HEADERS_TOO_LARGE = _entry(
    "HEADERS_TOO_LARGE",
    _P,
    _S.INVALID_ARGUMENT,
    "The HTTP request line and headers are larger than the bridge reads; structured_data "
    "has the limit. The connection is closed.",
    bridge_http_status=431,
)
TOO_MANY_CONNECTIONS = _entry(
    "TOO_MANY_CONNECTIONS",
    _T,
    _S.UNAVAILABLE,
    "The bridge holds as many open HTTP connections as it accepts; retry after the "
    "advised wait. structured_data has the limit.",
    retry_after_ms=1000,
    bridge_http_status=503,
)
# Not transient: nothing says an unexpected error passes with time, and "retry in 1 s" on
# a request the server cannot handle has an agent send it for ever. What is known to pass
# (the database away, a service not answering) has its own transient code.
INTERNAL = _entry(
    "INTERNAL",
    _P,
    _S.INTERNAL,
    "An unexpected server error; it was logged with the request id. Not retryable as sent: "
    "report the request id.",
)


def catalogue() -> dict[str, ErrorSpec]:
    """Every code, keyed by name."""
    return dict(_CATALOGUE)


def lookup(code: str) -> ErrorSpec:
    """The catalogue entry for ``code`` (INTERNAL when unknown, so decoding never fails)."""
    return _CATALOGUE.get(code, INTERNAL)


def _struct(data: dict[str, Any] | None) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    if data:
        s.update(data)
    return s


def make_failure(
    spec: ErrorSpec,
    message: str | None = None,
    *,
    structured_data: dict[str, Any] | None = None,
    retry_after_ms: int | None = None,
    namespace: str = "",
    document_id: str = "",
    batch_index: int | None = None,
    action_id: str = "",
) -> pf_pb2.PartialFailure:
    """Builds a PartialFailure for one part of a response, from a catalogue entry."""
    failure = pf_pb2.PartialFailure(
        namespace=namespace,
        document_id=document_id,
        action_id=action_id,
        category=spec.category,
        error_code=spec.code,
        message=message or spec.description,
        retryable=spec.retryable,
        structured_data=_struct(structured_data),
    )
    if batch_index is not None:
        failure.batch_index = batch_index
    if spec.retry_after_ms is not None:  # exactly the retryable codes
        failure.retry_after_ms = spec.retry_after_ms if retry_after_ms is None else retry_after_ms
    return failure


class ReachstoreError(Exception):
    """A whole-request error. Raised anywhere in a service; the gRPC layer turns it into a
    rich status whose details carry the same PartialFailure a caller sees everywhere else.

    ``details`` are extra PartialFailures that belong to the error (for example the
    per-namespace failures of a query that was not allowed to be partial).
    """

    def __init__(
        self,
        spec: ErrorSpec,
        message: str | None = None,
        *,
        structured_data: dict[str, Any] | None = None,
        retry_after_ms: int | None = None,
        field: str | None = None,
        details: list[pf_pb2.PartialFailure] | None = None,
    ) -> None:
        self.spec = spec
        self.field = field
        data = dict(structured_data or {})
        if field is not None:
            data.setdefault("field", field)
        self.failure = make_failure(
            spec, message, structured_data=data, retry_after_ms=retry_after_ms
        )
        self.details = list(details or [])
        super().__init__(self.failure.message)

    @property
    def code(self) -> str:
        return self.spec.code


def invalid(field: str, rule: str, **extra: Any) -> ReachstoreError:
    """The usual bad-field error: names the field and the rule it breaks."""
    return ReachstoreError(
        INVALID_ARGUMENT,
        f"{field}: {rule}",
        field=field,
        structured_data={"rule": rule, **extra},
    )


def namespace_unavailable(name: str) -> ReachstoreError:
    """The anti-enumeration answer: identical whether the namespace does not exist or the
    caller may not see it, on every route that takes a namespace."""
    return ReachstoreError(
        NAMESPACE_UNAVAILABLE,
        f"namespace {name!r} is unavailable",
        structured_data={"namespace": name, "index_state": "unavailable"},
    )


def namespace_unavailable_failure(name: str) -> pf_pb2.PartialFailure:
    """The same answer as one namespace's failure inside a query response."""
    failure = namespace_unavailable(name).failure
    failure.namespace = name
    return failure


def document_not_found(namespace: str, document_id: str) -> ReachstoreError:
    return ReachstoreError(
        DOCUMENT_NOT_FOUND,
        f"document {document_id!r} not found",
        structured_data={"namespace": namespace, "document_id": document_id},
    )


def outside_grants(namespace: str) -> ReachstoreError:
    """A write to a namespace the caller's key is not granted (reads get the unavailable
    answer instead, so they reveal nothing)."""
    return ReachstoreError(
        AUTH_SCOPE_MISSING,
        f"the API key's namespace grants do not cover {namespace!r}",
        structured_data={"namespace": namespace},
    )


def over_limit(
    spec: ErrorSpec, field: str, what: str, limit: int, actual: int, unit: str = ""
) -> ReachstoreError:
    """A size or count limit was passed: the limit and the actual value travel as data
    (``limit``/``actual``, or ``limit_bytes``/``actual_bytes`` when ``unit`` is "bytes")."""
    suffix = f"_{unit}" if unit else ""
    return ReachstoreError(
        spec,
        f"{field}: {actual} {what}; at most {limit}",
        field=field,
        structured_data={f"limit{suffix}": limit, f"actual{suffix}": actual},
    )


def to_rpc_status(error: ReachstoreError) -> status_pb2.Status:
    """Encodes an error as a google.rpc.Status with standard details plus our PartialFailure."""
    failure = error.failure
    status = status_pb2.Status(code=error.spec.grpc_status.value[0], message=failure.message)
    info = error_details_pb2.ErrorInfo(reason=failure.error_code, domain=ERROR_DOMAIN)
    info.metadata["category"] = pf_pb2.Category.Name(failure.category)
    info.metadata["retryable"] = str(failure.retryable).lower()
    status.details.add().Pack(info)
    if failure.HasField("retry_after_ms"):
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromMilliseconds(failure.retry_after_ms)
        status.details.add().Pack(retry)
    if error.field is not None:
        bad = error_details_pb2.BadRequest()
        bad.field_violations.add(field=error.field, description=failure.message)
        status.details.add().Pack(bad)
    if error.spec.category == Category.CATEGORY_QUOTA:
        quota = error_details_pb2.QuotaFailure()
        quota.violations.add(subject=failure.error_code, description=failure.message)
        status.details.add().Pack(quota)
    status.details.add().Pack(failure)
    for extra in error.details:
        status.details.add().Pack(extra)
    return status


# gRPC clients refuse trailing metadata over 16 KiB (and may refuse it from 8 KiB on); the
# status travels there base64-encoded, next to its message. An error that echoes a huge
# value back (a 70 kB name in a rejected action) has its texts shortened from
# TRIM_STATUS_BYTES on; details are dropped only beyond MAX_STATUS_BYTES, which the many
# short per-namespace details of a 32-namespace query stay under.
TRIM_STATUS_BYTES = 4096
MAX_STATUS_BYTES = 10 * 1024


def _trim_text(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _trim_value(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return _trim_text(value, 200)
    if depth > 6:
        return "…"
    if isinstance(value, dict):
        items = list(value.items())[:20]
        return {_trim_text(str(k), 64): _trim_value(v, depth + 1) for k, v in items}
    if isinstance(value, list):
        return [_trim_value(v, depth + 1) for v in value[:20]]
    return value


def _trim_failure(failure: pf_pb2.PartialFailure) -> pf_pb2.PartialFailure:
    short = pf_pb2.PartialFailure()
    short.CopyFrom(failure)
    short.message = _trim_text(failure.message, 512)
    short.namespace = _trim_text(failure.namespace, 128)
    short.document_id = _trim_text(failure.document_id, 128)
    short.action_id = _trim_text(failure.action_id, 128)
    short.structured_data.Clear()
    short.structured_data.update(_trim_value(json_format.MessageToDict(failure.structured_data)))
    return short


def fitted_rpc_status(error: ReachstoreError) -> status_pb2.Status:
    """``to_rpc_status``, shortened when it would not fit in a status trailer: long texts
    are cut (saying how long they were) and extra details dropped (saying how many)."""
    return to_rpc_status(fitted(error))


def fitted(error: ReachstoreError) -> ReachstoreError:
    """``error``, or a copy shortened as ``fitted_rpc_status`` says: also for the bridge's
    own answers, where a 20 MiB key echoed in the message and the field made a 40 MiB
    answer to a mistake."""
    if to_rpc_status(error).ByteSize() <= TRIM_STATUS_BYTES and len(error.failure.message) <= 1024:
        return error
    short = ReachstoreError(error.spec, _trim_text(error.failure.message, 512))
    short.field = _trim_text(error.field, 128) if error.field is not None else None
    short.failure = _trim_failure(error.failure)
    short.details = [_trim_failure(d) for d in error.details]
    omitted = 0
    while short.details and to_rpc_status(short).ByteSize() > MAX_STATUS_BYTES:
        short.details.pop()
        omitted += 1
    if omitted:
        short.failure.structured_data["details_omitted"] = omitted
    return short


def failures_from_rpc_status(status: status_pb2.Status) -> list[pf_pb2.PartialFailure]:
    """The PartialFailures packed into a rich status, the error's own first."""
    found = []
    for detail in status.details:
        if detail.Is(pf_pb2.PartialFailure.DESCRIPTOR):
            failure = pf_pb2.PartialFailure()
            detail.Unpack(failure)
            found.append(failure)
    return found


def _markdown() -> str:
    lines = [
        "# Error codes",
        "",
        "Generated from `reachstore_server/common/errors.py` by "
        "`python -m reachstore_server.common.errors`;",
        "do not edit by hand. Decide from `category` and `retryable`, never from the message.",
        "",
        "| code | category | retryable | default retry_after_ms | gRPC | HTTP | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec in _CATALOGUE.values():
        category = pf_pb2.Category.Name(spec.category).removeprefix("CATEGORY_").lower()
        wait = "" if spec.retry_after_ms is None else str(spec.retry_after_ms)
        lines.append(
            f"| `{spec.code}` | {category} | {str(spec.retryable).lower()} | {wait} | "
            f"{spec.grpc_status.name} | {spec.http_status} | {spec.description} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(_markdown(), end="")

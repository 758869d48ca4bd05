"""SDK exceptions, and the translations into them: from a gRPC error, and from the REST
bridge's error body.

Every whole-request error is a ``ReachstoreError``; its class says what kind of problem it
is (the ``category`` of the error catalogue, docs/ERRORS.md), so callers can catch by
family and still read the exact ``code``::

    ReachstoreError                  any whole-request error
    ├── AuthError                    category auth: fix the credentials, do not retry
    ├── PermanentError               category permanent: fix the request, do not retry
    │   ├── InvalidArgumentError     a field breaks its rule (gRPC INVALID_ARGUMENT, ...)
    │   ├── NotFoundError            NAMESPACE_UNAVAILABLE, DOCUMENT_NOT_FOUND, ...
    │   └── AlreadyExistsError       NAMESPACE_EXISTS, DOCUMENT_EXISTS
    ├── TransientError               category transient: retry after retry_after_ms
    ├── DeadlineError                category timeout (also a builtin TimeoutError)
    │   └── TaskWaitTimeoutError     wait_for_task ran out of time before the task ended
    └── QuotaError                   category quota: shrink or slow down, then retry

The server sends the error itself as the first ``PartialFailure`` among the rich status
details (after google.rpc ErrorInfo / RetryInfo / BadRequest / QuotaFailure); further
PartialFailures are ``details`` (for example the per-namespace failures of a query run
with ``allow_partial=False``). A status with no details at all comes from the transport,
not a service: UNAVAILABLE (server down) becomes SERVICE_UNAVAILABLE and DEADLINE_EXCEEDED
stays DEADLINE_EXCEEDED, both retryable after 1000 ms as in the catalogue; other gRPC
codes keep their gRPC name and get the category google.rpc gives them.

Over REST the error body carries the same fields (code, category, retryable,
retry_after_ms, structured_data, details), so it decodes to the same exception with the
same attributes. The body does not name the gRPC status, and HTTP 400 stands for both
INVALID_ARGUMENT and FAILED_PRECONDITION; the few codes of the catalogue that travel as
INVALID_ARGUMENT are named below so that the same error raises the same class over both
transports (a test holds this list to the server's catalogue).
"""

from __future__ import annotations

import builtins
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

from reachstore import _convert, _json
from reachstore._models import Failure, Task
from reachstore._reach_models import ReachTask
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2

_DETAILS_KEY = "grpc-status-details-bin"


class ReachstoreError(Exception):
    """A request that failed as a whole. Decide from ``category`` and ``retryable``."""

    failure: Failure  # the error itself, in the same shape as a per-part failure
    code: str
    category: str
    retryable: bool
    retry_after_ms: int | None
    structured_data: dict[str, Any]
    message: str
    details: list[Failure]
    # The gRPC status the error travels with (over REST: the one it travels with over
    # gRPC, read from the HTTP status and the code).
    grpc_code: grpc.StatusCode | None
    # The HTTP status, when the error came over REST.
    http_status: int | None

    def __init__(
        self,
        failure: Failure,
        *,
        details: list[Failure] | None = None,
        grpc_code: grpc.StatusCode | None = None,
        http_status: int | None = None,
    ) -> None:
        self.failure = failure
        self.code = failure.error_code
        self.category = failure.category
        self.retryable = failure.retryable
        self.retry_after_ms = failure.retry_after_ms
        self.structured_data = failure.structured_data
        self.message = failure.message
        self.details = list(details or [])
        self.grpc_code = grpc_code
        self.http_status = http_status
        super().__init__(f"{failure.error_code}: {failure.message}")

    def __reduce__(self) -> tuple[Any, ...]:
        # The default reduce re-calls __init__ with `args` (one string), which these
        # keyword-rich constructors do not accept; rebuild from the instance dict instead,
        # so errors survive pickling (multiprocessing, concurrent.futures).
        return (_rebuild, (type(self), self.args), self.__dict__)


def _rebuild(cls: type[ReachstoreError], args: tuple[Any, ...]) -> ReachstoreError:
    error = cls.__new__(cls)
    error.args = args
    return error


class AuthError(ReachstoreError):
    """Missing, wrong or insufficient credentials."""


class PermanentError(ReachstoreError):
    """The request cannot succeed as sent."""


class InvalidArgumentError(PermanentError):
    """A field of the request breaks its rule; ``structured_data["field"]`` names it."""


class NotFoundError(PermanentError):
    """The namespace, document or task does not exist (or is not visible: the same)."""


class AlreadyExistsError(PermanentError):
    """The namespace or document already exists."""


class TransientError(ReachstoreError):
    """A passing server-side problem; retry after ``retry_after_ms``."""


# Also a builtin TimeoutError so `except TimeoutError` catches it: it is one.
class DeadlineError(ReachstoreError, builtins.TimeoutError):
    """The request (or the waited-for operation) ran out of time."""


class TaskWaitTimeoutError(DeadlineError):
    """``wait_for_task`` or ``wait_for_reach_task`` gave up before the task ended;
    ``task`` is the last state seen (None if none was seen)."""

    def __init__(self, failure: Failure, *, task: Task | ReachTask | None = None) -> None:
        super().__init__(failure)
        self.task = task


class QuotaError(ReachstoreError):
    """A limit was reached: shrink the request or slow down, then retry if retryable."""


_BY_CATEGORY: dict[str, type[ReachstoreError]] = {
    "auth": AuthError,
    "permanent": PermanentError,
    "transient": TransientError,
    "timeout": DeadlineError,
    "quota": QuotaError,
}
# Within the permanent family the gRPC code is the finer distinction.
_PERMANENT_BY_GRPC: dict[grpc.StatusCode, type[PermanentError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
}


def error_class(category: str, grpc_code: grpc.StatusCode | None) -> type[ReachstoreError]:
    """The exception class for a category (and, for permanent errors, the gRPC code).
    An unknown category (a newer server) falls back to the base class."""
    cls = _BY_CATEGORY.get(category, ReachstoreError)
    if cls is PermanentError and grpc_code is not None:
        return _PERMANENT_BY_GRPC.get(grpc_code, PermanentError)
    return cls


def error_from_failure(
    failure: Failure,
    *,
    details: list[Failure] | None = None,
    grpc_code: grpc.StatusCode | None = None,
    http_status: int | None = None,
) -> ReachstoreError:
    """The right exception for a decoded failure, whichever transport it came over."""
    return error_class(failure.category, grpc_code)(
        failure, details=details, grpc_code=grpc_code, http_status=http_status
    )


# --- statuses without our details: the transport spoke, not a reachstore service -----------

_S = grpc.StatusCode
# code -> (catalogue-style code, category, retry_after_ms or None when not retryable).
# UNAVAILABLE / DEADLINE_EXCEEDED / INTERNAL use the catalogue's own codes and waits; the
# rest keep the gRPC name, since no reachstore service sent them.
_TRANSPORT: dict[grpc.StatusCode, tuple[str, str, int | None]] = {
    _S.UNAVAILABLE: ("SERVICE_UNAVAILABLE", "transient", 1000),
    _S.DEADLINE_EXCEEDED: ("DEADLINE_EXCEEDED", "timeout", 1000),
    _S.INTERNAL: ("INTERNAL", "transient", 1000),
    _S.UNKNOWN: ("INTERNAL", "transient", 1000),
    _S.DATA_LOSS: ("INTERNAL", "transient", 1000),
    _S.ABORTED: ("ABORTED", "transient", 1000),
    _S.CANCELLED: ("CANCELLED", "transient", 1000),
    _S.UNAUTHENTICATED: ("UNAUTHENTICATED", "auth", None),
    _S.PERMISSION_DENIED: ("PERMISSION_DENIED", "auth", None),
    # Mostly gRPC's own message-size limit: not retryable as sent.
    _S.RESOURCE_EXHAUSTED: ("RESOURCE_EXHAUSTED", "quota", None),
}


def _transport_failure(code: grpc.StatusCode, message: str) -> Failure:
    error_code, category, wait = _TRANSPORT.get(code, (code.name, "permanent", None))
    return Failure(
        category=category,
        error_code=error_code,
        message=message or code.name,
        retryable=wait is not None,
        retry_after_ms=wait,
        structured_data={"grpc_code": code.name},
    )


# --- rich statuses -----------------------------------------------------------------------------


def _status_from_trailers(exc: grpc.Call | grpc.aio.AioRpcError) -> status_pb2.Status | None:
    for key, value in exc.trailing_metadata() or ():
        if key == _DETAILS_KEY:
            try:
                return status_pb2.Status.FromString(value)
            except DecodeError:
                return None  # garbled details are treated like none at all
    return None


def _failure_from_standard_details(status: status_pb2.Status) -> Failure | None:
    """A failure from google.rpc ErrorInfo (+ RetryInfo) alone, for a server that sends the
    standard details but not our PartialFailure."""
    info: error_details_pb2.ErrorInfo | None = None
    wait: int | None = None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) and info is None:
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            wait = retry.retry_delay.ToMilliseconds()
    if info is None:
        return None
    category = info.metadata.get("category", "").removeprefix("CATEGORY_").lower()
    retryable = info.metadata.get("retryable", str(wait is not None)).lower() == "true"
    return Failure(
        category=category or "unspecified",
        error_code=info.reason,
        message=status.message,
        retryable=retryable,
        retry_after_ms=wait if retryable else None,
        # The rest of ErrorInfo's metadata is the machine-readable context it carries.
        structured_data={
            k: v for k, v in info.metadata.items() if k not in ("category", "retryable")
        },
    )


def error_from_status(status: status_pb2.Status, grpc_code: grpc.StatusCode) -> ReachstoreError:
    """Decodes a rich ``google.rpc.Status``: the first PartialFailure is the error, later
    ones are its details."""
    failures: list[Failure] = []
    for detail in status.details:
        if detail.Is(pf_pb2.PartialFailure.DESCRIPTOR):
            message = pf_pb2.PartialFailure()
            detail.Unpack(message)
            failures.append(_convert.failure_from_pb(message))
    if failures:
        return error_from_failure(failures[0], details=failures[1:], grpc_code=grpc_code)
    standard = _failure_from_standard_details(status)
    if standard is not None:
        return error_from_failure(standard, grpc_code=grpc_code)
    return error_from_failure(_transport_failure(grpc_code, status.message), grpc_code=grpc_code)


def from_rpc_error(exc: grpc.RpcError) -> ReachstoreError:
    """THE translation of a failed gRPC call into an SDK exception (raise it ``from exc``).
    Takes the errors of synchronous calls and of ``grpc.aio`` calls alike."""
    if not isinstance(exc, (grpc.Call, grpc.aio.AioRpcError)):
        # Every RpcError raised by a unary call is also a Call; anything else is a bug in
        # grpc or a test double, so say what we know rather than crash while decoding.
        return error_from_failure(_transport_failure(grpc.StatusCode.UNKNOWN, str(exc)))
    code = exc.code()
    status = _status_from_trailers(exc)
    if status is not None:
        return error_from_status(status, code)
    return error_from_failure(_transport_failure(code, exc.details() or ""), grpc_code=code)


# --- REST ----------------------------------------------------------------------------------

_GRPC_FOR_HTTP: dict[int, grpc.StatusCode] = {
    400: _S.FAILED_PRECONDITION,
    401: _S.UNAUTHENTICATED,
    403: _S.PERMISSION_DENIED,
    404: _S.NOT_FOUND,
    405: _S.UNIMPLEMENTED,
    408: _S.DEADLINE_EXCEEDED,
    409: _S.ALREADY_EXISTS,
    413: _S.INVALID_ARGUMENT,
    415: _S.INVALID_ARGUMENT,
    431: _S.INVALID_ARGUMENT,
    429: _S.RESOURCE_EXHAUSTED,
    499: _S.CANCELLED,
    500: _S.INTERNAL,
    501: _S.UNIMPLEMENTED,
    502: _S.UNAVAILABLE,
    503: _S.UNAVAILABLE,
    504: _S.DEADLINE_EXCEEDED,
}
# Codes that are HTTP 400 because they are gRPC INVALID_ARGUMENT (a field breaks its rule);
# every other 400 of the catalogue is FAILED_PRECONDITION.
_INVALID_ARGUMENT_CODES = frozenset(
    {
        "INVALID_ARGUMENT",
        "DEPRECATED_FIELD",
        "MALFORMED_JSON",
        "BATCH_EMPTY",
        "BATCH_TOO_LARGE",
        "DUPLICATE_DOCUMENT_IDS",
        "DOCUMENT_TOO_LARGE",
        "TOO_MANY_NAMESPACES",
        "PARAMS_REJECTED",
        "INVALID_PARAMS",
    }
)
# The bridge's own 404 for a path that is no route (gRPC UNIMPLEMENTED), not a missing thing.
_ROUTE_CODES = frozenset({"ROUTE_NOT_FOUND"})


def _grpc_code_for_http(status: int, code: str) -> grpc.StatusCode:
    if status == 400 and code in _INVALID_ARGUMENT_CODES:
        return _S.INVALID_ARGUMENT
    if status == 404 and code in _ROUTE_CODES:
        return _S.UNIMPLEMENTED
    if status in _GRPC_FOR_HTTP:
        return _GRPC_FOR_HTTP[status]
    return _S.INTERNAL if status >= 500 else _S.UNKNOWN


def _failure_from_json(data: Mapping[str, Any]) -> Failure:
    return _convert.failure_from_pb(_json.from_json(dict(data), pf_pb2.PartialFailure))


def _retry_after_header_ms(headers: Mapping[str, str]) -> int | None:
    value = headers.get("retry-after", "")
    return int(value) * 1000 if value.strip().isdigit() else None


def from_http_error(status: int, headers: Mapping[str, str], content: bytes) -> ReachstoreError:
    """The SDK exception for a non-2xx answer of the REST bridge. ``headers`` must look up
    names case-insensitively (as httpx's do)."""
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        try:
            failure = _failure_from_json(
                {
                    "error_code": error["code"],
                    "message": error.get("message", ""),
                    "category": error.get("category"),
                    "retryable": error.get("retryable", False),
                    "retry_after_ms": error.get("retry_after_ms"),
                    "structured_data": error.get("structured_data") or {},
                }
            )
            details = [
                _failure_from_json(d) for d in error.get("details") or [] if isinstance(d, dict)
            ]
        except ValueError:
            failure, details = None, []
        if failure is not None:
            if failure.retryable and failure.retry_after_ms is None:
                # An older bridge may only send the header; whole seconds, but a wait.
                wait = _retry_after_header_ms(headers)
                if wait is not None:
                    failure = dataclasses.replace(failure, retry_after_ms=wait)
            code = _grpc_code_for_http(status, failure.error_code)
            return error_from_failure(failure, details=details, grpc_code=code, http_status=status)
    # Not the bridge's error shape: a proxy or a server in front of it answered.
    code = _grpc_code_for_http(status, "")
    text = content[:200].decode("utf-8", "replace").strip()
    failure = _transport_failure(code, f"HTTP {status}: {text}" if text else f"HTTP {status}")
    failure = dataclasses.replace(failure, structured_data={"http_status": status})
    return error_from_failure(failure, grpc_code=code, http_status=status)


def transport_error(code: grpc.StatusCode, message: str) -> ReachstoreError:
    """The error a gRPC call failing with ``code`` and no details would raise, for the same
    situation met by another transport (no connection: UNAVAILABLE; out of time:
    DEADLINE_EXCEEDED; an answer that cannot be read: INTERNAL)."""
    return error_from_failure(_transport_failure(code, message), grpc_code=code)

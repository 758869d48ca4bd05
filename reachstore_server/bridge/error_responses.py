"""Error bodies: one shape for the bridge's own errors and for errors from the services.

``{"error": {"code", "message", "category", "retryable", "retry_after_ms",
"structured_data", "request_id", "details"}}`` plus ``Retry-After`` when retryable. A
service error arrives as a rich gRPC status whose first PartialFailure *is* the error, so
the body is decoded from it, never from message text. A gRPC error without our details
(the service is down, the deadline passed) maps to a catalogue code instead of a 500 page.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from grpc_status import rpc_status
from starlette.responses import Response

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.bridge import json_codec
from reachstore_server.common import errors

log = logging.getLogger(__name__)

_DETAILS_KEY = "grpc-status-details-bin"
# gRPC statuses that carry no reachstore details come from the transport, not a service.
_TRANSPORT_ERRORS: dict[grpc.StatusCode, errors.ErrorSpec] = {
    grpc.StatusCode.UNAVAILABLE: errors.SERVICE_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.DEADLINE_EXCEEDED,
    # The bridge never cancels a call it still waits for: a bare CANCELLED is gRPC giving up
    # on a call the service did not take in time (UNTAKEN_WAIT_OPTION of
    # reachstore_server/common/grpc_server.py), an overload refused before any work.
    grpc.StatusCode.CANCELLED: errors.SERVICE_OVERLOADED,
}


class JsonResponse(Response):
    """Compact UTF-8 JSON. NaN/Infinity never reach here (the codec spells them as strings)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode()


def error_body(
    failure: pf_pb2.PartialFailure, request_id: str, details: Sequence[pf_pb2.PartialFailure] = ()
) -> dict[str, Any]:
    rendered = json_codec.message_to_dict(failure)
    return {
        "error": {
            "code": failure.error_code,
            "message": failure.message,
            "category": rendered["category"],
            "retryable": failure.retryable,
            "retry_after_ms": rendered["retry_after_ms"],
            "structured_data": rendered["structured_data"],
            "request_id": request_id,
            "details": [json_codec.message_to_dict(extra) for extra in details],
        }
    }


def error_response(
    failure: pf_pb2.PartialFailure,
    http_status: int,
    request_id: str,
    details: Sequence[pf_pb2.PartialFailure] = (),
    headers: Mapping[str, str] | None = None,
) -> JsonResponse:
    all_headers = dict(headers or {})
    if failure.retryable:
        # Whole seconds, rounded up, never 0: "retry at once" would invite a tight loop.
        wait_ms = failure.retry_after_ms if failure.HasField("retry_after_ms") else 0
        all_headers["Retry-After"] = str(max(1, math.ceil(wait_ms / 1000)))
    return JsonResponse(error_body(failure, request_id, details), http_status, all_headers)


def from_error(
    error: errors.ReachstoreError, request_id: str, headers: Mapping[str, str] | None = None
) -> JsonResponse:
    """A response for an error the bridge raised itself, its echoed texts cut as over gRPC."""
    error = errors.fitted(error)
    return error_response(error.failure, error.spec.http_status, request_id, error.details, headers)


def _rich_status(exc: grpc.aio.AioRpcError) -> status_pb2.Status | None:
    try:
        return rpc_status.from_call(exc)
    except (ValueError, DecodeError):
        # from_call refuses a status whose code or message differs from the details (a
        # proxy may rewrite them); the details are still the service's own account.
        for key, value in exc.trailing_metadata() or ():
            if key == _DETAILS_KEY:
                try:
                    return status_pb2.Status.FromString(value)
                except DecodeError:
                    return None
    return None


def _http_status(failure: pf_pb2.PartialFailure, code: grpc.StatusCode) -> int:
    spec = errors.catalogue().get(failure.error_code)
    if spec is not None and spec.bridge_http_status is not None:
        return spec.bridge_http_status
    return errors.HTTP_STATUS_FOR_GRPC.get(code, 500)


def from_rpc_error(exc: grpc.aio.AioRpcError, service: str, request_id: str) -> JsonResponse:
    """A response for a failed call to ``service``."""
    status = _rich_status(exc)
    failures = errors.failures_from_rpc_status(status) if status is not None else []
    if failures:
        first, *extra = failures
        log.info("%s answered %s (request_id=%s)", service, first.error_code, request_id)
        return error_response(first, _http_status(first, exc.code()), request_id, extra)
    spec = _TRANSPORT_ERRORS.get(exc.code(), errors.INTERNAL)
    # The transport's text names internal addresses; it goes to the log, not the caller.
    log.warning(
        "call to %s failed without details: %s %s (request_id=%s)",
        service,
        exc.code().name,
        exc.details(),
        request_id,
    )
    short = service.rsplit(".", 1)[-1]
    messages = {
        errors.SERVICE_UNAVAILABLE: f"{short} did not answer; retry after the advised wait",
        errors.DEADLINE_EXCEEDED: f"{short} did not answer within the deadline",
        errors.SERVICE_OVERLOADED: f"{short} was too busy to take the call in time; retry "
        "after the advised wait",
    }
    message = messages.get(spec, f"unexpected failure calling {short}; request_id={request_id}")
    failure = errors.make_failure(
        spec, message, structured_data={"service": service, "grpc_code": exc.code().name}
    )
    return error_response(failure, spec.http_status, request_id)

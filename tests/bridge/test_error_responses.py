"""Decoding gRPC failures into the error body: status choice, Retry-After, odd statuses."""

from __future__ import annotations

import json
from typing import Any

import grpc
from google.rpc import status_pb2

from reachstore_server.bridge import error_responses
from reachstore_server.common import errors

SERVICE = "reachstore.ingest.v1.IngestService"


def _rpc_error(
    error: errors.ReachstoreError | None,
    code: grpc.StatusCode,
    details: str = "text",
    raw_details: bytes | None = None,
) -> grpc.aio.AioRpcError:
    trailing: list[tuple[str, Any]] = []
    if error is not None:
        raw_details = errors.to_rpc_status(error).SerializeToString()
    if raw_details is not None:
        trailing.append(("grpc-status-details-bin", raw_details))
    return grpc.aio.AioRpcError(
        code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details=details
    )


def _body(response: Any) -> dict[str, Any]:
    return json.loads(response.body)["error"]


def test_status_comes_from_the_standard_grpc_table() -> None:
    error = errors.ReachstoreError(errors.DOCUMENT_EXISTS)
    response = error_responses.from_rpc_error(
        _rpc_error(error, grpc.StatusCode.ALREADY_EXISTS, error.failure.message), SERVICE, "r1"
    )
    assert response.status_code == 409
    assert _body(response)["code"] == "DOCUMENT_EXISTS"
    assert "retry-after" not in response.headers


def test_catalogue_bridge_status_wins_over_the_grpc_table() -> None:
    error = errors.ReachstoreError(errors.PAYLOAD_TOO_LARGE)
    response = error_responses.from_rpc_error(
        _rpc_error(error, grpc.StatusCode.INVALID_ARGUMENT, error.failure.message), SERVICE, "r1"
    )
    assert response.status_code == 413


def test_details_are_read_even_when_the_status_text_was_rewritten() -> None:
    # rpc_status.from_call refuses a message that differs from the details' message.
    error = errors.ReachstoreError(errors.TASK_NOT_FOUND, structured_data={"task_id": "x"})
    response = error_responses.from_rpc_error(
        _rpc_error(error, grpc.StatusCode.NOT_FOUND, "rewritten by a proxy"), SERVICE, "r2"
    )
    assert response.status_code == 404
    body = _body(response)
    assert (body["code"], body["structured_data"], body["request_id"]) == (
        "TASK_NOT_FOUND",
        {"task_id": "x"},
        "r2",
    )


def test_undecodable_details_fall_back_to_the_catalogue() -> None:
    response = error_responses.from_rpc_error(
        _rpc_error(None, grpc.StatusCode.UNKNOWN, raw_details=b"\xff\xff not a status"),
        SERVICE,
        "r3",
    )
    assert response.status_code == 500
    body = _body(response)
    assert body["code"] == "INTERNAL"
    assert body["structured_data"] == {"service": SERVICE, "grpc_code": "UNKNOWN"}


def test_status_without_partial_failure_uses_the_transport_mapping() -> None:
    plain = status_pb2.Status(code=grpc.StatusCode.DEADLINE_EXCEEDED.value[0], message="late")
    response = error_responses.from_rpc_error(
        _rpc_error(None, grpc.StatusCode.DEADLINE_EXCEEDED, "late", plain.SerializeToString()),
        SERVICE,
        "r4",
    )
    assert response.status_code == 504
    assert _body(response)["code"] == "DEADLINE_EXCEEDED"
    assert response.headers["retry-after"] == "1"


def test_retry_after_rounds_up_to_whole_seconds() -> None:
    error = errors.ReachstoreError(errors.INDEX_REBUILDING, retry_after_ms=1001)
    response = error_responses.from_error(error, "r5")
    assert response.headers["retry-after"] == "2"
    assert _body(response)["retry_after_ms"] == 1001


def test_retry_after_is_at_least_one_second() -> None:
    error = errors.ReachstoreError(errors.INDEX_REBUILDING, retry_after_ms=0)
    assert error_responses.from_error(error, "r6").headers["retry-after"] == "1"


def test_extra_failures_become_details_in_order() -> None:
    extra = [errors.make_failure(errors.NAMESPACE_TIMEOUT, namespace=name) for name in "ab"]
    error = errors.ReachstoreError(errors.INCOMPLETE_RESULT, details=extra)
    response = error_responses.from_rpc_error(
        _rpc_error(error, grpc.StatusCode.UNAVAILABLE, error.failure.message), SERVICE, "r7"
    )
    details = _body(response)["details"]
    assert [detail["namespace"] for detail in details] == ["a", "b"]
    assert all(detail["category"] == "timeout" for detail in details)

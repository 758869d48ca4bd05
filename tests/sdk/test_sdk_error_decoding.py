"""Rich gRPC statuses -> SDK exceptions, decoded from real google.rpc.Status bytes."""

from __future__ import annotations

import pickle
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from sdk_support import failure_pb, rich_status

from reachstore import (
    AlreadyExistsError,
    AuthError,
    DeadlineError,
    InvalidArgumentError,
    NotFoundError,
    PermanentError,
    QuotaError,
    ReachstoreError,
    TransientError,
)
from reachstore._errors import from_rpc_error
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2

C = pf_pb2.Category
S = grpc.StatusCode


class FailedCall(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """What a failed unary call raises: an RpcError that is also a Call."""

    def __init__(
        self, code: grpc.StatusCode, details: str, trailers: tuple[tuple[str, Any], ...] = ()
    ) -> None:
        self._code, self._details, self._trailers = code, details, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._trailers

    def initial_metadata(self) -> tuple[tuple[str, Any], ...]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float | None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Any) -> bool:
        return False


def _rich_call(status: status_pb2.Status) -> FailedCall:
    """The call as the client sees it: the status serialized into the trailers."""
    return FailedCall(
        S(next(c for c in S if c.value[0] == status.code)),
        status.message,
        (("grpc-status-details-bin", status.SerializeToString()),),
    )


def test_an_incomplete_query_error_carries_the_per_namespace_failures_as_details() -> None:
    status = rich_status(
        S.UNAVAILABLE,
        failure_pb(
            "INCOMPLETE_RESULT",
            C.CATEGORY_TRANSIENT,
            retry_after_ms=1000,
            message="2 of 3 namespaces answered",
            data={"coverage_ratio": 0.5, "field": "allow_partial"},
        ),
        extra=[
            failure_pb(
                "NAMESPACE_TIMEOUT", C.CATEGORY_TIMEOUT, retry_after_ms=1200, namespace="orders"
            ),
            failure_pb(
                "NAMESPACE_UNAVAILABLE",
                C.CATEGORY_PERMANENT,
                namespace="nope",
                data={"namespace": "nope", "index_state": "unavailable"},
            ),
        ],
        field="allow_partial",
    )
    # The standard details come first, as the server sends them: decoding must skip them.
    kinds = [d.type_url.rsplit(".", 1)[-1] for d in status.details]
    assert kinds[:3] == ["ErrorInfo", "RetryInfo", "BadRequest"]

    error = from_rpc_error(_rich_call(status))

    assert type(error) is TransientError
    assert (error.code, error.category, error.retryable, error.retry_after_ms) == (
        "INCOMPLETE_RESULT",
        "transient",
        True,
        1000,
    )
    assert error.message == "2 of 3 namespaces answered"
    assert error.structured_data == {"coverage_ratio": 0.5, "field": "allow_partial"}
    assert error.grpc_code is S.UNAVAILABLE
    assert str(error) == "INCOMPLETE_RESULT: 2 of 3 namespaces answered"
    orders, nope = error.details
    assert (orders["namespace"], orders["category"], orders["retry_after_ms"]) == (
        "orders",
        "timeout",
        1200,
    )
    assert (nope.namespace, nope.retryable, nope.retry_after_ms) == ("nope", False, None)
    assert error.failure.error_code == "INCOMPLETE_RESULT"


@pytest.mark.parametrize(
    ("grpc_code", "category", "wait", "expected"),
    [
        (S.UNAUTHENTICATED, C.CATEGORY_AUTH, None, AuthError),
        (S.INVALID_ARGUMENT, C.CATEGORY_PERMANENT, None, InvalidArgumentError),
        (S.NOT_FOUND, C.CATEGORY_PERMANENT, None, NotFoundError),
        (S.ALREADY_EXISTS, C.CATEGORY_PERMANENT, None, AlreadyExistsError),
        (S.FAILED_PRECONDITION, C.CATEGORY_PERMANENT, None, PermanentError),
        (S.UNAVAILABLE, C.CATEGORY_TRANSIENT, 2000, TransientError),
        (S.DEADLINE_EXCEEDED, C.CATEGORY_TIMEOUT, 1000, DeadlineError),
        (S.INVALID_ARGUMENT, C.CATEGORY_QUOTA, None, QuotaError),
        (S.UNAVAILABLE, C.CATEGORY_UNSPECIFIED, 1000, ReachstoreError),
    ],
)
def test_the_category_picks_the_exception_family(
    grpc_code: grpc.StatusCode, category: int, wait: int | None, expected: type[Exception]
) -> None:
    status = rich_status(grpc_code, failure_pb("SOME_CODE", category, retry_after_ms=wait))
    error = from_rpc_error(_rich_call(status))
    assert type(error) is expected
    assert error.code == "SOME_CODE" and error.retry_after_ms == wait
    assert error.retryable is (wait is not None)


def test_a_quota_error_keeps_its_limits_and_is_not_retryable_as_sent() -> None:
    status = rich_status(
        S.INVALID_ARGUMENT,
        failure_pb("BATCH_TOO_LARGE", C.CATEGORY_QUOTA, data={"limit": 100, "actual": 101}),
    )
    assert any(d.Is(error_details_pb2.QuotaFailure.DESCRIPTOR) for d in status.details)
    error = from_rpc_error(_rich_call(status))
    assert isinstance(error, QuotaError)
    assert error.structured_data == {"limit": 100, "actual": 101}
    assert error.retryable is False and error.retry_after_ms is None and error.details == []


def test_deadline_errors_are_also_builtin_timeout_errors() -> None:
    error = from_rpc_error(FailedCall(S.DEADLINE_EXCEEDED, "Deadline Exceeded"))
    assert isinstance(error, DeadlineError) and isinstance(error, TimeoutError)
    assert (error.code, error.category, error.retry_after_ms) == (
        "DEADLINE_EXCEEDED",
        "timeout",
        1000,
    )


def test_a_status_without_details_from_a_down_server_is_service_unavailable() -> None:
    error = from_rpc_error(FailedCall(S.UNAVAILABLE, "failed to connect to all addresses"))
    assert type(error) is TransientError
    assert (error.code, error.category, error.retryable, error.retry_after_ms) == (
        "SERVICE_UNAVAILABLE",
        "transient",
        True,
        1000,
    )
    assert error.message == "failed to connect to all addresses"
    assert error.structured_data == {"grpc_code": "UNAVAILABLE"}


@pytest.mark.parametrize(
    ("grpc_code", "expected", "code", "retryable"),
    [
        (S.UNIMPLEMENTED, PermanentError, "UNIMPLEMENTED", False),
        (S.PERMISSION_DENIED, AuthError, "PERMISSION_DENIED", False),
        (S.RESOURCE_EXHAUSTED, QuotaError, "RESOURCE_EXHAUSTED", False),
        (S.INTERNAL, TransientError, "INTERNAL", True),
        (S.NOT_FOUND, NotFoundError, "NOT_FOUND", False),
    ],
)
def test_other_statuses_without_details_map_by_grpc_code(
    grpc_code: grpc.StatusCode, expected: type[Exception], code: str, retryable: bool
) -> None:
    error = from_rpc_error(FailedCall(grpc_code, ""))
    assert type(error) is expected
    assert error.code == code and error.retryable is retryable
    assert error.message == grpc_code.name  # something to log even when the peer said nothing


def test_garbled_details_fall_back_to_the_grpc_code() -> None:
    call = FailedCall(S.UNAVAILABLE, "x", (("grpc-status-details-bin", b"\xff\xff not a status"),))
    error = from_rpc_error(call)
    assert type(error) is TransientError and error.code == "SERVICE_UNAVAILABLE"


def test_standard_details_alone_still_give_code_category_and_wait() -> None:
    # A peer that sends google.rpc ErrorInfo + RetryInfo but not our PartialFailure.
    status = status_pb2.Status(code=S.UNAVAILABLE.value[0], message="rebuilding")
    info = error_details_pb2.ErrorInfo(
        reason="INDEX_REBUILDING",
        domain="reachstore",
        metadata={"category": "CATEGORY_TRANSIENT", "retryable": "true", "namespace": "a"},
    )
    status.details.add().Pack(info)
    retry = error_details_pb2.RetryInfo()
    retry.retry_delay.FromMilliseconds(2000)
    status.details.add().Pack(retry)

    error = from_rpc_error(_rich_call(status))

    assert type(error) is TransientError
    assert (error.code, error.retryable, error.retry_after_ms) == ("INDEX_REBUILDING", True, 2000)
    assert error.structured_data == {"namespace": "a"} and error.message == "rebuilding"


def test_decoded_errors_survive_pickling_with_class_and_fields() -> None:
    # Errors cross process boundaries in worker pools; a lost class or field would hide
    # whether to retry.
    status = rich_status(
        S.NOT_FOUND,
        failure_pb("DOCUMENT_NOT_FOUND", C.CATEGORY_PERMANENT, data={"document_id": "d"}),
        extra=[failure_pb("X", C.CATEGORY_TIMEOUT, retry_after_ms=5, namespace="n")],
    )
    error = from_rpc_error(_rich_call(status))

    copy = pickle.loads(pickle.dumps(error))

    assert type(copy) is NotFoundError and str(copy) == str(error)
    assert (copy.code, copy.structured_data, copy.details, copy.grpc_code) == (
        error.code,
        error.structured_data,
        error.details,
        error.grpc_code,
    )

"""The error catalogue and the rich-status encoding."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.common import errors


def test_retryable_codes_have_a_wait_and_others_none() -> None:
    for spec in errors.catalogue().values():
        assert spec.retryable == (spec.retry_after_ms is not None), spec.code
        if spec.category in (pf_pb2.CATEGORY_AUTH, pf_pb2.CATEGORY_PERMANENT):
            assert not spec.retryable, spec.code
        if spec.category in (pf_pb2.CATEGORY_TRANSIENT, pf_pb2.CATEGORY_TIMEOUT):
            assert spec.retryable, spec.code


def test_codes_are_upper_snake_and_http_status_follows_the_grpc_table() -> None:
    for code, spec in errors.catalogue().items():
        assert code == spec.code and code.isupper() and " " not in code
        if spec.bridge_http_status is None:
            assert spec.http_status == errors.HTTP_STATUS_FOR_GRPC[spec.grpc_status]


def test_unknown_codes_decode_as_internal() -> None:
    assert errors.lookup("NO_SUCH_CODE") is errors.INTERNAL


def test_a_rich_status_carries_the_partial_failure_and_standard_details() -> None:
    extra = errors.make_failure(errors.NAMESPACE_TIMEOUT, namespace="slow")
    err = errors.ReachstoreError(
        errors.INCOMPLETE_RESULT,
        "two of three",
        field="allow_partial",
        structured_data={"coverage_ratio": 0.5},
        details=[extra],
    )
    status = errors.to_rpc_status(err)
    assert status.code == grpc.StatusCode.UNAVAILABLE.value[0]
    failures = errors.failures_from_rpc_status(status)
    assert [f.error_code for f in failures] == ["INCOMPLETE_RESULT", "NAMESPACE_TIMEOUT"]
    own = failures[0]
    assert own.retryable and own.retry_after_ms == 1000
    assert own.structured_data["coverage_ratio"] == 0.5
    assert own.structured_data["field"] == "allow_partial"
    kinds = {d.type_url.rsplit("/", 1)[-1] for d in status.details}
    assert {"google.rpc.ErrorInfo", "google.rpc.RetryInfo", "google.rpc.BadRequest"} <= kinds
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    assert info.reason == "INCOMPLETE_RESULT" and info.metadata["retryable"] == "true"


def test_a_non_retryable_failure_has_no_retry_after() -> None:
    failure = errors.make_failure(errors.NAMESPACE_UNAVAILABLE, namespace="nope")
    assert not failure.retryable
    assert not failure.HasField("retry_after_ms")


def test_quota_errors_carry_a_quota_failure_detail() -> None:
    status = errors.to_rpc_status(errors.ReachstoreError(errors.TOO_MANY_NAMESPACES, "too many"))
    kinds = {d.type_url.rsplit("/", 1)[-1] for d in status.details}
    assert "google.rpc.QuotaFailure" in kinds

"""The SDK decodes exactly what the services encode, for every code of the catalogue,
over gRPC (rich statuses) and over REST (the bridge's error bodies) alike.

The SDK itself never imports ``services``; this test does, so that a change to the
server's encoding that the SDK cannot read fails here rather than in a user's agent.
"""

from __future__ import annotations

import json

import grpc
import httpx
import pytest

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
from reachstore._errors import error_from_status, from_http_error
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.bridge import error_responses
from reachstore_server.common import errors

FAMILY: dict[int, type[ReachstoreError]] = {
    pf_pb2.CATEGORY_AUTH: AuthError,
    pf_pb2.CATEGORY_PERMANENT: PermanentError,
    pf_pb2.CATEGORY_TRANSIENT: TransientError,
    pf_pb2.CATEGORY_TIMEOUT: DeadlineError,
    pf_pb2.CATEGORY_QUOTA: QuotaError,
}
# Permanent errors are told apart further by the gRPC code they travel with.
PERMANENT_BY_GRPC: dict[grpc.StatusCode, type[ReachstoreError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
}


@pytest.mark.parametrize("spec", list(errors.catalogue().values()), ids=lambda s: s.code)
def test_every_catalogue_code_decodes_to_its_family_and_fields(spec: errors.ErrorSpec) -> None:
    extra = errors.make_failure(errors.NAMESPACE_TIMEOUT, namespace="slow")
    server_error = errors.ReachstoreError(
        spec,
        "as the server says it",
        field="some_field",
        structured_data={"limit": 100},
        details=[extra],
    )
    status = errors.to_rpc_status(server_error)

    error = error_from_status(status, spec.grpc_status)

    expected = FAMILY[spec.category]
    if expected is PermanentError:
        expected = PERMANENT_BY_GRPC.get(spec.grpc_status, PermanentError)
    assert type(error) is expected
    assert error.code == spec.code
    assert error.category == pf_pb2.Category.Name(spec.category).removeprefix("CATEGORY_").lower()
    assert error.retryable is spec.retryable
    assert error.retry_after_ms == spec.retry_after_ms
    assert error.message == "as the server says it"
    assert error.structured_data == {"limit": 100, "field": "some_field"}
    assert error.grpc_code is spec.grpc_status
    assert [(d.namespace, d.error_code) for d in error.details] == [("slow", "NAMESPACE_TIMEOUT")]


@pytest.mark.parametrize("spec", list(errors.catalogue().values()), ids=lambda s: s.code)
def test_every_catalogue_code_decodes_the_same_over_rest_as_over_grpc(
    spec: errors.ErrorSpec,
) -> None:
    extra = errors.make_failure(errors.NAMESPACE_TIMEOUT, namespace="slow")
    server_error = errors.ReachstoreError(
        spec, "as the server says it", structured_data={"limit": 100}, details=[extra]
    )
    over_grpc = error_from_status(errors.to_rpc_status(server_error), spec.grpc_status)
    # Exactly the body and status the bridge answers with.
    body = error_responses.error_body(server_error.failure, "req-1", server_error.details)
    over_rest = from_http_error(spec.http_status, httpx.Headers(), json.dumps(body).encode())

    assert type(over_rest) is type(over_grpc)
    assert over_rest.failure == over_grpc.failure
    assert over_rest.details == over_grpc.details
    assert over_rest.grpc_code is over_grpc.grpc_code
    assert over_rest.http_status == spec.http_status

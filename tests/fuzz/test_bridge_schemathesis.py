"""The REST bridge fuzzed from its own OpenAPI document, against a real running system.

Every operation of the document gets examples that fit it and examples that break it
(wrong types, missing fields, out-of-range values), sent with a key that holds every scope.
Each answer must not be a server error, must use a status code, content type and body the
document declares, and must come back within the per-request timeout.

No operation is left out. Revoking keys cannot revoke the fuzzer's own key: the key id in
the path is generated, and a 16-hex id that matches is not going to be generated; the
revocation path itself is exercised with real ids in tests/e2e/test_auth.py.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import hypothesis
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from services.bridge.backends import DEFAULT_SERVICES
from services.bridge.openapi import build_openapi
from services.bridge.routes import RouteTable
from tests.e2e.system import RunningSystem

EXAMPLES_PER_OPERATION = 50
REQUEST_TIMEOUT_S = 15.0
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


# The document the bridge serves, built the way the bridge builds it: collection needs it
# before any system runs, and the first test checks that the served one is the same.
DOCUMENT = build_openapi(RouteTable(DEFAULT_SERVICES))
schema = schemathesis.openapi.from_dict(DOCUMENT)


def test_the_fuzzed_document_is_the_one_the_bridge_serves(fuzz_http: httpx.Client) -> None:
    reply = fuzz_http.get("/api/v1/openapi.json")
    assert reply.status_code == 200
    assert reply.json() == json.loads(json.dumps(DOCUMENT))


@schema.parametrize()
@hypothesis.settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,  # the same examples on every run: CI failures reproduce
    deadline=None,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
def test_every_operation_answers_within_its_document(
    case: Any, fuzz_system: RunningSystem, fuzz_key: str
) -> None:
    case.call_and_validate(
        base_url=fuzz_system.http_url,
        headers={"Authorization": f"Bearer {fuzz_key}"},
        checks=CHECKS,
        timeout=REQUEST_TIMEOUT_S,
    )

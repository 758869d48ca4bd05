"""Rules every RPC of every service must keep."""

from __future__ import annotations

import pytest
from google.api import annotations_pb2
from google.protobuf import descriptor

from reachstore.admin.v1 import key_service_pb2
from reachstore.audit.v1 import audit_service_pb2
from reachstore.common.v1 import access_pb2, partial_failure_pb2
from reachstore.ingest.v1 import ingest_service_pb2
from reachstore.query.v1 import query_service_pb2
from reachstore.reach.v1 import reach_service_pb2
from reachstore_server.common.auth import SCOPES

SERVICE_FILES = [
    query_service_pb2,
    ingest_service_pb2,
    key_service_pb2,
    reach_service_pb2,
    audit_service_pb2,
]
METHODS = [
    method
    for module in SERVICE_FILES
    for service in module.DESCRIPTOR.services_by_name.values()
    for method in service.methods
]


def _carries_partial_failures(
    message: descriptor.Descriptor, seen: frozenset[str] = frozenset()
) -> bool:
    """True when the message holds PartialFailure entries, directly or in a nested message."""
    if message.full_name in seen:
        return False
    for field in message.fields:
        if field.message_type is None:
            continue
        if field.message_type.full_name == partial_failure_pb2.PartialFailure.DESCRIPTOR.full_name:
            if field.is_repeated:
                return True
            continue
        if _carries_partial_failures(field.message_type, seen | {message.full_name}):
            return True
    return False


def test_there_are_services_to_check() -> None:
    assert len(METHODS) >= 12


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.full_name)
def test_every_response_carries_partial_failures(method: descriptor.MethodDescriptor) -> None:
    assert _carries_partial_failures(method.output_type), (
        f"{method.output_type.full_name} has no repeated PartialFailure field"
    )


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.full_name)
def test_every_rpc_has_an_http_route_under_api_v1(method: descriptor.MethodDescriptor) -> None:
    rule = method.GetOptions().Extensions[annotations_pb2.http]
    path = getattr(rule, rule.WhichOneof("pattern"))
    assert path.startswith("/api/v1/")


def test_the_checker_rejects_a_response_without_partial_failures() -> None:
    # GetDocumentRequest has no PartialFailure field: the walk must say so.
    assert not _carries_partial_failures(query_service_pb2.GetDocumentRequest.DESCRIPTOR)
    assert _carries_partial_failures(query_service_pb2.QueryResponse.DESCRIPTOR)


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.full_name)
def test_every_rpc_declares_the_scope_it_requires(method: descriptor.MethodDescriptor) -> None:
    assert method.GetOptions().Extensions[access_pb2.required_scope] in set(SCOPES)

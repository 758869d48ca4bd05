"""Every list and map a request carries has a cap, enforced by the real services.

For each one: one entry over the cap is refused as a whole with the documented code, the
field named, and the limit and the count in structured_data; nothing of the refused
request is stored; and a request exactly at the cap is not refused for its size. The
table here is the one in docs/LIMITS.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from reachstore import _errors
from reachstore.admin.v1 import key_service_pb2 as keys_pb
from reachstore.admin.v1 import key_service_pb2_grpc as keys_grpc
from reachstore.audit.v1 import audit_service_pb2 as audit_pb
from reachstore.audit.v1 import audit_service_pb2_grpc as audit_grpc
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore.query.v1 import query_service_pb2 as query_pb
from reachstore.query.v1 import query_service_pb2_grpc as query_grpc
from reachstore.reach.v1 import reach_service_pb2 as reach_pb
from reachstore.reach.v1 import reach_service_pb2_grpc as reach_grpc
from reachstore_server.admin.api.keys import MAX_PATTERNS, MAX_SCOPES
from reachstore_server.audit.api.servicer import MAX_BATCH as MAX_EVENTS
from reachstore_server.common import names
from reachstore_server.reach.api.operator import MAX_STATES
from reachstore_server.reach.planning import MAX_ACTIONS
from tests.e2e.system import RunningSystem
from tests.fuzz.conftest import HOME

TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class Stubs:
    query: query_grpc.QueryServiceStub
    ingest: ingest_grpc.IngestServiceStub
    keys: keys_grpc.KeyServiceStub
    reach: reach_grpc.ReachServiceStub
    audit: audit_grpc.AuditServiceStub
    metadata: list[tuple[str, str]]

    def call(self, method: Callable[..., Any], request: Message) -> Any:
        return method(request, timeout=TIMEOUT_S, metadata=self.metadata)


@pytest.fixture(scope="module")
def stubs(fuzz_system: RunningSystem, fuzz_key: str) -> Iterator[Stubs]:
    base = fuzz_system.grpc_port_base
    channels = [grpc.insecure_channel(f"127.0.0.1:{base + i}") for i in range(4)]
    yield Stubs(
        query_grpc.QueryServiceStub(channels[0]),
        ingest_grpc.IngestServiceStub(channels[1]),
        keys_grpc.KeyServiceStub(channels[1]),
        reach_grpc.ReachServiceStub(channels[2]),
        audit_grpc.AuditServiceStub(channels[3]),
        [("authorization", f"Bearer {fuzz_key}")],
    )
    for channel in channels:
        channel.close()


def _refused(stubs: Stubs, method: Callable[..., Any], request: Message) -> _errors.ReachstoreError:
    with pytest.raises(grpc.RpcError) as caught:
        stubs.call(method, request)
    exc = caught.value
    assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.details()  # type: ignore[attr-defined]
    return _errors.from_rpc_error(exc)


def _over(error: _errors.ReachstoreError, field: str, limit: int, actual: int, code: str) -> None:
    assert error.code == code, error
    assert error.structured_data["field"] == field, error.structured_data
    assert error.structured_data["limit"] == limit, error.structured_data
    assert error.structured_data["actual"] == actual, error.structured_data
    assert field in error.message


def _not_for_size(stubs: Stubs, method: Callable[..., Any], request: Message, field: str) -> None:
    """At the cap: the call may fail for another reason, never for this list's size."""
    try:
        stubs.call(method, request)
    except grpc.RpcError as exc:
        error = _errors.from_rpc_error(exc)
        assert not (
            error.structured_data.get("field") == field and "limit" in error.structured_data
        ), error


def _ns(i: int) -> str:
    return f"ns-{i}"


def test_query_namespaces_entries(stubs: Stubs) -> None:
    cap = names.MAX_NAMESPACE_ENTRIES
    over = query_pb.QueryRequest(namespaces=[HOME] * (cap + 1), query="q")
    _over(_refused(stubs, stubs.query.Query, over), "namespaces", cap, cap + 1, "INVALID_ARGUMENT")
    at = query_pb.QueryRequest(namespaces=[HOME] * cap, query="q")
    assert list(stubs.call(stubs.query.Query, at).meta.namespaces_succeeded) == [HOME]


def test_query_distinct_namespaces(stubs: Stubs) -> None:
    over = query_pb.QueryRequest(namespaces=[_ns(i) for i in range(33)], query="q")
    _over(_refused(stubs, stubs.query.Query, over), "namespaces", 32, 33, "TOO_MANY_NAMESPACES")
    at = query_pb.QueryRequest(namespaces=[_ns(i) for i in range(32)], query="q")
    assert len(stubs.call(stubs.query.Query, at).meta.namespaces_failed) == 32
    # Not allowed to be partial: the 32 failures travel in the error's status trailer,
    # which must stay small enough for gRPC clients to accept it every time.
    strict = query_pb.QueryRequest(
        namespaces=[f"a-rather-long-namespace-name-{i:02d}" for i in range(32)],
        query="q",
        allow_partial=False,
    )
    for _ in range(20):
        with pytest.raises(grpc.RpcError) as caught:
            stubs.call(stubs.query.Query, strict)
        error = _errors.from_rpc_error(caught.value)
        assert error.code == "INCOMPLETE_RESULT_PERMANENT", caught.value.details()  # type: ignore[attr-defined]
        assert len(error.details) + error.structured_data.get("details_omitted", 0) == 32


def test_query_filter(stubs: Stubs) -> None:
    cap = names.MAX_METADATA_KEYS
    over = query_pb.QueryRequest(
        namespaces=[HOME], query="q", filter={f"k{i}": "v" for i in range(cap + 1)}
    )
    _over(_refused(stubs, stubs.query.Query, over), "filter", cap, cap + 1, "INVALID_ARGUMENT")
    at = query_pb.QueryRequest(
        namespaces=[HOME], query="q", filter={f"k{i}": "v" for i in range(cap)}
    )
    _not_for_size(stubs, stubs.query.Query, at, "filter")
    long_key = query_pb.QueryRequest(namespaces=[HOME], query="q", filter={"k" * 65: "v"})
    assert (
        _refused(stubs, stubs.query.Query, long_key).structured_data["field"].startswith("filter.")
    )


def _documents(stubs: Stubs) -> list[str]:
    listed = stubs.call(stubs.query.ListDocuments, query_pb.ListDocumentsRequest(namespace=HOME))
    return [d.document_id for d in listed.documents]


def _not_stored(stubs: Stubs, document_id: str) -> None:
    """No document of a refused request is stored."""
    assert document_id not in _documents(stubs)


def test_document_metadata(stubs: Stubs) -> None:
    cap = names.MAX_METADATA_KEYS
    doc = ingest_pb.DocumentInput(
        document_id="meta-over", text="t", metadata={f"k{i}": "v" for i in range(cap + 1)}
    )
    error = _refused(
        stubs,
        stubs.ingest.CreateDocument,
        ingest_pb.CreateDocumentRequest(namespace=HOME, document=doc),
    )
    _over(error, "document.metadata", cap, cap + 1, "INVALID_ARGUMENT")
    _not_stored(stubs, "meta-over")


def test_batch_documents(stubs: Stubs) -> None:
    cap = names.MAX_BATCH_DOCUMENTS
    docs = [ingest_pb.DocumentInput(document_id=f"b-{i}", text="t") for i in range(cap + 1)]
    request = ingest_pb.BatchCreateDocumentsRequest(namespace=HOME, documents=docs)
    _over(
        _refused(stubs, stubs.ingest.BatchCreateDocuments, request),
        "documents",
        cap,
        cap + 1,
        "BATCH_TOO_LARGE",
    )
    _not_stored(stubs, "b-0")
    empty = ingest_pb.BatchCreateDocumentsRequest(namespace=HOME)
    assert _refused(stubs, stubs.ingest.BatchCreateDocuments, empty).code == "BATCH_EMPTY"


def _key_ids(stubs: Stubs) -> set[str]:
    listed = stubs.call(stubs.keys.ListKeys, keys_pb.ListKeysRequest(page_size=100))
    return {k.key_id for k in listed.keys}


@pytest.mark.parametrize(
    ("field", "cap", "entry"),
    [
        ("scopes", MAX_SCOPES, "read"),
        ("namespaces", MAX_PATTERNS, "ns-*"),
        ("channels", MAX_PATTERNS, "fuzz-*"),
        ("groups", MAX_PATTERNS, "ops"),
    ],
)
def test_key_lists(stubs: Stubs, field: str, cap: int, entry: str) -> None:
    before = _key_ids(stubs)
    over = keys_pb.CreateKeyRequest(name="limits", scopes=["read"])
    getattr(over, field)[:] = [entry] * (cap + 1)
    _over(_refused(stubs, stubs.keys.CreateKey, over), field, cap, cap + 1, "INVALID_ARGUMENT")
    assert _key_ids(stubs) == before
    at = keys_pb.CreateKeyRequest(name="limits", scopes=["read"])
    getattr(at, field)[:] = [entry] * cap
    created = stubs.call(stubs.keys.CreateKey, at)
    stubs.call(stubs.keys.RevokeKey, keys_pb.RevokeKeyRequest(key_id=created.key.key_id))


def test_key_ttl_is_bounded(stubs: Stubs) -> None:
    request = keys_pb.CreateKeyRequest(name="ttl", scopes=["read"], ttl_seconds=2**62)
    assert _refused(stubs, stubs.keys.CreateKey, request).structured_data["field"] == "ttl_seconds"


def _task_count(stubs: Stubs) -> int:
    listed = stubs.call(stubs.reach.ListTasks, reach_pb.ListTasksRequest(page_size=100))
    return len(listed.tasks)


def _action(name: str, depends_on: list[str] | None = None) -> reach_pb.ActionSpec:
    action = reach_pb.ActionSpec(
        name=name, channel="fuzz-hook", action_type="ping", depends_on=depends_on or []
    )
    action.params.update({"ticket": name})
    return action


def test_task_actions(stubs: Stubs) -> None:
    before = _task_count(stubs)
    over = reach_pb.SubmitTaskRequest(
        entity_id="limits", actions=[_action(f"a{i}") for i in range(MAX_ACTIONS + 1)]
    )
    _over(
        _refused(stubs, stubs.reach.SubmitTask, over),
        "actions",
        MAX_ACTIONS,
        MAX_ACTIONS + 1,
        "INVALID_ARGUMENT",
    )
    at = reach_pb.SubmitTaskRequest(
        entity_id="limits",
        validate_only=True,
        actions=[_action(f"a{i}") for i in range(MAX_ACTIONS)],
    )
    assert len(stubs.call(stubs.reach.SubmitTask, at).task.actions) == MAX_ACTIONS
    assert _task_count(stubs) == before


def test_action_depends_on(stubs: Stubs) -> None:
    before = _task_count(stubs)
    over = reach_pb.SubmitTaskRequest(
        entity_id="limits",
        actions=[_action("first"), _action("second", ["first"] * (MAX_ACTIONS + 1))],
    )
    _over(
        _refused(stubs, stubs.reach.SubmitTask, over),
        "actions[1].depends_on",
        MAX_ACTIONS,
        MAX_ACTIONS + 1,
        "INVALID_ARGUMENT",
    )
    assert _task_count(stubs) == before


def test_action_params_size(stubs: Stubs) -> None:
    action = _action("big")
    action.params.update({"note": "n" * (64 * 1024)})
    error = _refused(
        stubs,
        stubs.reach.SubmitTask,
        reach_pb.SubmitTaskRequest(entity_id="limits", actions=[action]),
    )
    assert error.code == "PARAMS_REJECTED"
    assert error.structured_data["field"] == "actions[0].params"


def test_list_actions_states(stubs: Stubs) -> None:
    states = [reach_pb.ACTION_STATE_READY] * (MAX_STATES + 1)
    error = _refused(stubs, stubs.reach.ListActions, reach_pb.ListActionsRequest(states=states))
    assert error.structured_data["field"] == "states"
    at = reach_pb.ListActionsRequest(states=[reach_pb.ACTION_STATE_READY] * MAX_STATES)
    _not_for_size(stubs, stubs.reach.ListActions, at, "states")


def test_audit_events(stubs: Stubs) -> None:
    events = [
        audit_pb.AuditEvent(
            event_id=f"limits-{i}",
            time="2026-12-01T00:00:00+00:00",
            tenant="fuzz",
            service="limits",
            method="Test",
        )
        for i in range(MAX_EVENTS + 1)
    ]
    error = _refused(stubs, stubs.audit.AppendEvents, audit_pb.AppendEventsRequest(events=events))
    _over(error, "events", MAX_EVENTS, MAX_EVENTS + 1, "INVALID_ARGUMENT")
    with pytest.raises(grpc.RpcError) as caught:  # nothing of the batch was stored
        stubs.call(stubs.audit.GetEvent, audit_pb.GetEventRequest(event_id="limits-0"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]

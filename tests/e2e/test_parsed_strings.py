"""Strings the services parse (times, page tokens, integers in a query string, any JSON
text), at the edges of what they can hold: each is a 400 naming its field, never a 500
that tells the caller to retry its own bad input. Driven over HTTP through the bridge and
over gRPC, against one real `reachstore up`."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from reachstore.audit.v1 import audit_service_pb2 as audit_pb
from reachstore.audit.v1 import audit_service_pb2_grpc as audit_grpc
from reachstore.reach.v1 import reach_service_pb2 as reach_pb
from reachstore.reach.v1 import reach_service_pb2_grpc as reach_grpc
from tests.e2e.system import RunningSystem

# Within datetime's range as written, outside it once moved to UTC.
EDGE_TIMES = ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-14:00"]
LISTINGS = [
    "/api/v1/namespaces",
    "/api/v1/namespaces/demo/documents",
    "/api/v1/namespaces:health",
    "/api/v1/keys",
    "/api/v1/audit/events",
    "/api/v1/reach/tasks",
    "/api/v1/reach/actions",
]


def token_of(raw: bytes) -> str:
    """A page token with any content, made the way the services make theirs."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# Tokens whose key is not what any page ever ends on: Unicode digits, more digits than an
# integer parser takes, a lone surrogate and a NUL (neither of which a database can hold).
HOSTILE_TOKENS = {
    "superscript two": token_of('{"after":"²"}'.encode()),
    "5000 digits": token_of(b'{"after":"' + b"9" * 5000 + b'"}'),
    "lone surrogate": token_of(b'{"after":"\\ud800"}'),
    "NUL": token_of(b'{"after":"a\\u0000b"}'),
}


@pytest.fixture(scope="module")
def edges(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    running = RunningSystem(tmp_path_factory.mktemp("parsed-strings"))
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def http(edges: RunningSystem) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=edges.http_url, timeout=30.0) as client:
        yield client


def _refused(reply: httpx.Response, field: str) -> dict[str, Any]:
    """A 400 INVALID_ARGUMENT naming ``field``, not retryable."""
    assert reply.status_code == 400, f"{field}: {reply.status_code} {reply.text[:300]}"
    error = reply.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT", error
    assert error["structured_data"]["field"] == field, error
    assert (error["category"], error["retryable"], error["retry_after_ms"]) == (
        "permanent",
        False,
        None,
    ), error
    assert "retry-after" not in reply.headers
    return dict(error)


@pytest.mark.parametrize("field", ["since", "until"])
@pytest.mark.parametrize("value", EDGE_TIMES)
def test_audit_time_bounds_at_the_edges_of_the_calendar_are_refused(
    http: httpx.Client, field: str, value: str
) -> None:
    _refused(http.get("/api/v1/audit/events", params={field: value}), field)


@pytest.mark.parametrize("value", EDGE_TIMES)
def test_logical_time_at_the_edges_of_the_calendar_is_refused(
    http: httpx.Client, value: str
) -> None:
    action = {"name": "a", "channel": "none", "action_type": "ping"}
    for path, body in (
        ("/api/v1/reach/tasks", {"entity_id": "e", "logical_time": value, "actions": [action]}),
        ("/api/v1/reach:reach", {"entity_id": "e", "logical_time": value, "action": action}),
    ):
        _refused(http.post(path, json=body), "logical_time")


@pytest.mark.parametrize("kind", list(HOSTILE_TOKENS))
def test_audit_page_tokens_that_int_cannot_read_are_refused(http: httpx.Client, kind: str) -> None:
    reply = http.get("/api/v1/audit/events", params={"page_token": HOSTILE_TOKENS[kind]})
    _refused(reply, "page_token")


@pytest.mark.parametrize("path", LISTINGS)
def test_page_tokens_a_database_cannot_hold_are_refused_on_every_listing(
    http: httpx.Client, path: str
) -> None:
    http.post("/api/v1/namespaces", json={"name": "demo"})
    for kind in ("lone surrogate", "NUL"):
        _refused(http.get(path, params={"page_token": HOSTILE_TOKENS[kind]}), "page_token")


@pytest.mark.parametrize("path", LISTINGS)
@pytest.mark.parametrize("value", ["9" * 5000, "²", "-" + "0" * 4999 + "1"])
def test_integers_too_long_to_parse_in_a_query_string_are_refused(
    http: httpx.Client, path: str, value: str
) -> None:
    _refused(http.get(path, params={"page_size": value}), "page_size")


def _raw_post(http: httpx.Client, path: str, body: bytes) -> httpx.Response:
    return http.post(path, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/query", b'{"namespaces":["demo"],"query":"\\ud800"}', "query"),
        ("/api/v1/query", b'{"namespaces":["demo","\\udfff x"],"query":"q"}', "namespaces[1]"),
        (
            "/api/v1/namespaces/demo/documents:batchCreate",
            b'{"documents":[{"text":"ok"},{"text":"a\\ud83d"}]}',
            "documents[1].text",
        ),
        (
            "/api/v1/namespaces/demo/documents:batchCreate",
            b'{"documents":[{"text":"ok","metadata":{"\\ud800k":"v"}}]}',
            "documents[0].metadata",
        ),
        (
            "/api/v1/reach/tasks",
            b'{"entity_id":"e","actions":[{"name":"a","params":{"deep":["\\ude00"]}}]}',
            "actions[0].params.deep[0]",
        ),
        ("/api/v1/namespaces", b'{"\\ud800":1}', "body"),
    ],
)
def test_a_lone_surrogate_in_json_text_is_refused_naming_the_field(
    http: httpx.Client, path: str, body: bytes, field: str
) -> None:
    error = _refused(_raw_post(http, path, body), field)
    assert "surrogate" in error["message"]


def test_a_pair_of_surrogate_escapes_is_one_character_and_accepted(http: httpx.Client) -> None:
    # "\ud83d\ude00" is how JSON spells 😀: valid text, not a lone surrogate.
    reply = _raw_post(http, "/api/v1/query", b'{"namespaces":["demo"],"query":"\\ud83d\\ude00"}')
    assert reply.status_code == 200, reply.text


def _grpc_refused(call: Any, request: Any, field: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=10)
    error = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, error.details())  # type: ignore[attr-defined]
    assert field in (error.details() or ""), (field, error.details())  # type: ignore[attr-defined]


def test_grpc_callers_get_the_same_answers(edges: RunningSystem) -> None:
    audit_addr = f"127.0.0.1:{edges.grpc_port_base + 3}"
    with grpc.insecure_channel(audit_addr) as audit, grpc.insecure_channel(edges.reach_addr) as rc:
        events = audit_grpc.AuditServiceStub(audit).ListEvents
        for value in EDGE_TIMES:
            _grpc_refused(events, audit_pb.ListEventsRequest(since=value), "since")
            _grpc_refused(events, audit_pb.ListEventsRequest(until=value), "until")
            action = reach_pb.ActionSpec(name="a", channel="none", action_type="ping")
            _grpc_refused(
                reach_grpc.ReachServiceStub(rc).SubmitTask,
                reach_pb.SubmitTaskRequest(entity_id="e", logical_time=value, actions=[action]),
                "logical_time",
            )
        for token in HOSTILE_TOKENS.values():
            _grpc_refused(events, audit_pb.ListEventsRequest(page_token=token), "page_token")

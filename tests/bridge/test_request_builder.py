"""Merging body, path variables and query parameters into one request message."""

from __future__ import annotations

from typing import Any

import pytest

from reachstore.query.v1 import query_service_pb2 as query_pb2
from reachstore_server.bridge import json_codec
from reachstore_server.bridge.backends import DEFAULT_SERVICES
from reachstore_server.bridge.request_builder import build_request
from reachstore_server.bridge.routes import Match, RouteTable
from reachstore_server.common import errors

TABLE = RouteTable(DEFAULT_SERVICES)


def _match(method: str, path: str) -> Match:
    match = TABLE.match(method, path)
    assert match.route is not None
    return match


def _build(
    method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None
) -> Any:
    match = _match(method, path)
    assert match.route is not None
    return build_request(match.route, body, match.path_params, query or [])


def _refused(
    method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None
) -> dict[str, Any]:
    with pytest.raises(errors.ReachstoreError) as caught:
        _build(method, path, body, query)
    assert caught.value.code == "INVALID_ARGUMENT"
    return json_codec.message_to_dict(caught.value.failure)["structured_data"]


def test_path_params_fill_the_request() -> None:
    request = _build("POST", "/api/v1/namespaces/demo/documents", {"document": {"text": "x"}})
    assert request.namespace == "demo"
    assert request.document.text == "x"


def test_body_repeating_the_same_path_value_is_fine() -> None:
    request = _build("POST", "/api/v1/namespaces/demo/documents", {"namespace": "demo"})
    assert request.namespace == "demo"


def test_body_contradicting_the_path_is_refused() -> None:
    data = _refused("POST", "/api/v1/namespaces/demo/documents", {"namespace": "other"})
    assert data["field"] == "namespace"
    assert data["path_value"] == "demo"


def test_query_params_are_converted_to_field_types() -> None:
    request = _build(
        "GET",
        "/api/v1/namespaces/demo/documents",
        query=[("page_size", "5"), ("page_token", "abc")],
    )
    assert (request.namespace, request.page_size, request.page_token) == ("demo", 5, "abc")


def test_query_param_with_wrong_type_names_the_field() -> None:
    data = _refused("GET", "/api/v1/namespaces", query=[("page_size", "ten")])
    assert data == {
        "field": "page_size",
        "rule": "expected integer",
        "expected": "integer",
        "got": "ten",
    }


def test_query_param_out_of_range_is_refused() -> None:
    data = _refused("GET", "/api/v1/namespaces", query=[("page_size", str(2**31))])
    assert data["rule"] == "integer out of int32 range"


def test_unknown_query_param_is_refused() -> None:
    assert _refused("GET", "/api/v1/namespaces", query=[("size", "5")]) == {
        "field": "size",
        "rule": "unknown field",
    }


def test_singular_query_param_given_twice_is_refused() -> None:
    data = _refused("GET", "/api/v1/namespaces", query=[("page_size", "1"), ("page_size", "2")])
    assert data["rule"] == "given more than once"


def test_query_param_contradicting_the_path_is_refused() -> None:
    data = _refused("GET", "/api/v1/namespaces/demo/documents", query=[("namespace", "other")])
    assert data["field"] == "namespace"


def test_query_params_on_a_body_route_are_refused() -> None:
    data = _refused("POST", "/api/v1/query", {"query": "q"}, query=[("top_k", "5")])
    assert data["field"] == "top_k"
    assert "JSON body" in data["rule"]


def test_path_param_for_an_integer_field_is_converted_and_checked(sample_file: Any) -> None:
    table = RouteTable([sample_file.services_by_name["SampleService"]])
    match = table.match("GET", "/x/12/abc")
    assert match.route is not None
    query = [("f32", "1.5"), ("mode", "fast_lane")]
    request = build_request(match.route, None, match.path_params, query)
    assert (request.child.u64, request.raw, request.f32, request.mode) == (12, b"i\xb7", 1.5, 1)
    bad = table.match("GET", "/x/minus/abc")
    assert bad.route is not None
    with pytest.raises(errors.ReachstoreError) as caught:
        build_request(bad.route, None, bad.path_params, [])
    assert caught.value.field == "child.u64"


def test_message_and_map_fields_cannot_come_from_the_query(sample_file: Any) -> None:
    table = RouteTable([sample_file.services_by_name["SampleService"]])
    match = table.match("GET", "/x/1/AA")
    assert match.route is not None
    for name in ("data", "by_id"):
        with pytest.raises(errors.ReachstoreError) as caught:
            build_request(match.route, None, match.path_params, [(name, "1")])
        assert caught.value.field == name


def test_boolean_query_param_takes_true_or_false_only() -> None:
    field = query_pb2.QueryRequest.DESCRIPTOR.fields_by_name["allow_partial"]
    assert json_codec.scalar_from_text(field, "false", "allow_partial") is False
    with pytest.raises(errors.ReachstoreError):
        json_codec.scalar_from_text(field, "yes", "allow_partial")


def test_query_params_take_the_lower_camel_case_name_too() -> None:
    request = _build("GET", "/api/v1/namespaces/demo/documents", query=[("pageSize", "5")])
    assert request.page_size == 5


def test_query_param_under_both_names_is_refused() -> None:
    data = _refused(
        "GET",
        "/api/v1/namespaces/demo/documents",
        query=[("page_size", "5"), ("pageSize", "5")],
    )
    assert data["field"] == "pageSize"
    assert data["conflicts_with"] == "page_size"
    assert "given twice" in data["rule"]


def test_camel_case_body_field_contradicting_the_path_is_refused() -> None:
    data = _refused("GET", "/api/v1/tasks/t-1", query=[("taskId", "t-2")])
    assert data["field"] == "taskId"
    body = _refused("POST", "/api/v1/tasks/t-1:cancel", {"taskId": "t-2"})
    assert body["field"] == "task_id"
    assert body["path_value"] == "t-1"
    same = _build("POST", "/api/v1/tasks/t-1:cancel", {"taskId": "t-1"})
    assert same.task_id == "t-1"

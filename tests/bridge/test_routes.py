"""The route table built from google.api.http: templates, verbs, 404 versus 405."""

from __future__ import annotations

from typing import Any

import pytest

from reachstore_server.bridge.backends import DEFAULT_SERVICES
from reachstore_server.bridge.routes import RouteTable, RouteTemplateError


@pytest.fixture(scope="module")
def table() -> RouteTable:
    return RouteTable(DEFAULT_SERVICES)


def test_every_annotated_rpc_gets_exactly_one_route(table: RouteTable) -> None:
    names = sorted(route.method.full_name for route in table.routes)
    expected = sorted(
        method.full_name for service in DEFAULT_SERVICES for method in service.methods
    )
    assert names == expected


@pytest.mark.parametrize(
    ("method", "path", "rpc", "params"),
    [
        ("POST", "/api/v1/query", "Query", {}),
        (
            "GET",
            "/api/v1/namespaces/demo/documents/doc-1",
            "GetDocument",
            {"namespace": "demo", "document_id": "doc-1"},
        ),
        ("GET", "/api/v1/namespaces/demo/documents", "ListDocuments", {"namespace": "demo"}),
        ("POST", "/api/v1/namespaces/demo/documents", "CreateDocument", {"namespace": "demo"}),
        (
            "POST",
            "/api/v1/namespaces/demo/documents:batchCreate",
            "BatchCreateDocuments",
            {"namespace": "demo"},
        ),
        ("POST", "/api/v1/tasks/t-1:cancel", "CancelTask", {"task_id": "t-1"}),
        ("GET", "/api/v1/tasks/t-1", "GetTask", {"task_id": "t-1"}),
        ("DELETE", "/api/v1/namespaces/demo", "DeleteNamespace", {"name": "demo"}),
        ("get", "/api/v1/namespaces", "ListNamespaces", {}),
    ],
)
def test_templates_match_with_path_params(
    table: RouteTable, method: str, path: str, rpc: str, params: dict[str, str]
) -> None:
    match = table.match(method, path)
    assert match.route is not None
    assert match.route.method.name == rpc
    assert match.path_params == params


def test_suffix_verb_is_not_swallowed_by_the_variable(table: RouteTable) -> None:
    match = table.match("POST", "/api/v1/tasks/abc:cancel")
    assert match.route is not None and match.route.method.name == "CancelTask"
    assert match.path_params == {"task_id": "abc"}


def test_colon_inside_a_document_id_stays_in_the_variable(table: RouteTable) -> None:
    match = table.match("GET", "/api/v1/namespaces/demo/documents/a:b")
    assert match.route is not None and match.route.method.name == "GetDocument"
    assert match.path_params["document_id"] == "a:b"


def test_percent_encoded_slash_stays_inside_one_variable(table: RouteTable) -> None:
    match = table.match("GET", "/api/v1/namespaces/demo/documents/a%2Fb%20c")
    assert match.route is not None
    assert match.path_params["document_id"] == "a/b c"


@pytest.mark.parametrize(
    "path", ["/api/v1/nothing", "/api/v1/namespaces/", "/api/v1/tasks/a/b", "/", "/api/v1/query/x"]
)
def test_unknown_path_has_no_route_and_no_allowed_methods(table: RouteTable, path: str) -> None:
    match = table.match("GET", path)
    assert match.route is None
    assert match.allowed == ()


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/api/v1/query", ("POST",)),
        ("PUT", "/api/v1/namespaces/demo", ("DELETE", "GET")),
        ("PATCH", "/api/v1/namespaces/demo/documents", ("GET", "POST")),
        ("GET", "/api/v1/namespaces/demo/documents:batchCreate", ("POST",)),
    ],
)
def test_known_path_with_other_method_lists_allowed_methods(
    table: RouteTable, method: str, path: str, allowed: tuple[str, ...]
) -> None:
    match = table.match(method, path)
    assert match.route is None
    assert match.allowed == allowed


def test_success_status_comes_from_the_method_option(table: RouteTable) -> None:
    statuses = {route.method.name: route.success_status for route in table.routes}
    assert statuses["CreateDocument"] == 202
    assert statuses["Query"] == 200
    assert statuses["BatchCreateDocuments"] == 200


def test_body_star_and_no_body_are_read_from_the_rule(table: RouteTable) -> None:
    bodies = {route.method.name: route.body for route in table.routes}
    assert bodies["Query"] == "*"
    assert bodies["CancelTask"] == "*"
    assert bodies["GetTask"] == ""


def test_grpc_path_names_package_service_and_method(table: RouteTable) -> None:
    route = table.match("POST", "/api/v1/query").route
    assert route is not None
    assert route.grpc_path == "/reachstore.query.v1.QueryService/Query"


def test_dotted_variable_and_rest_of_path_variable(sample_file: Any) -> None:
    table = RouteTable([sample_file.services_by_name["SampleService"]])
    assert [route.method.name for route in table.routes] == ["Nested"]  # NoRule is skipped
    match = table.match("GET", "/x/42/a/b/c")
    assert match.route is not None
    assert match.path_params == {"child.u64": "42", "raw": "a/b/c"}


def test_unsupported_template_fails_at_build_time(sample_file: Any) -> None:
    with pytest.raises(RouteTemplateError, match="unsupported variable pattern"):
        RouteTable([sample_file.services_by_name["BrokenService"]])

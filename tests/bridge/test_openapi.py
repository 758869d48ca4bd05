"""The OpenAPI document generated from the descriptors and the route table."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator

from services.bridge.backends import DEFAULT_SERVICES
from services.bridge.openapi import ERROR_SCHEMA, build_openapi
from services.bridge.routes import RouteTable

TABLE = RouteTable(DEFAULT_SERVICES)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    # Through JSON and back: the document must be plain JSON, not Python objects.
    return json.loads(json.dumps(build_openapi(TABLE)))


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if "$ref" in node else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def test_document_is_openapi_3_1(doc: dict[str, Any]) -> None:
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["title"] == "reachstore"


def test_every_rpc_has_its_path_method_and_operation_id(doc: dict[str, Any]) -> None:
    names = Counter(route.method.name for route in TABLE.routes)
    for route in TABLE.routes:
        operation = doc["paths"][route.template][route.http_method.lower()]
        # An RPC name two services share (GetTask) is prefixed with the service's name.
        expected = route.method.name
        if names[expected] > 1:
            expected = f"{route.service.name}_{expected}"
        assert operation["operationId"] == expected
        assert operation["x-grpc-method"] == route.grpc_path
    assert doc["paths"]["/api/v1/reach/tasks/{task_id}"]["get"]["operationId"] == (
        "ReachService_GetTask"
    )


def test_operation_ids_are_unique(doc: dict[str, Any]) -> None:
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_success_status_per_route(doc: dict[str, Any]) -> None:
    create = doc["paths"]["/api/v1/namespaces/{namespace}/documents"]["post"]
    assert set(create["responses"]) == {"202", "default"}
    query = doc["paths"]["/api/v1/query"]["post"]
    assert query["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/reachstore.query.v1.QueryResponse"
    }
    assert query["responses"]["default"]["content"]["application/json"]["schema"] == {
        "$ref": f"#/components/schemas/{ERROR_SCHEMA}"
    }


def test_path_and_query_parameters_are_declared(doc: dict[str, Any]) -> None:
    get_doc = doc["paths"]["/api/v1/namespaces/{namespace}/documents/{document_id}"]["get"]
    assert [(p["name"], p["in"], p["required"]) for p in get_doc["parameters"]] == [
        ("namespace", "path", True),
        ("document_id", "path", True),
    ]
    listing = doc["paths"]["/api/v1/namespaces/{namespace}/documents"]["get"]
    query_params = {p["name"]: p["schema"] for p in listing["parameters"] if p["in"] == "query"}
    assert query_params == {
        "page_size": {"type": "integer", "format": "int32"},
        "page_token": {"type": "string"},
    }


def test_body_routes_take_the_request_message(doc: dict[str, Any]) -> None:
    body = doc["paths"]["/api/v1/tasks/{task_id}:cancel"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("CancelTaskRequest")
    assert "requestBody" not in doc["paths"]["/api/v1/tasks/{task_id}"]["get"]


def test_every_message_and_enum_has_a_component_and_refs_resolve(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    for ref in _refs(doc):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    for service in DEFAULT_SERVICES:
        for method in service.methods:
            assert method.input_type.full_name in schemas
            assert method.output_type.full_name in schemas
    assert "reachstore.common.v1.PartialFailure" in schemas


def test_enums_are_string_enums_of_lowercase_words(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    assert schemas["reachstore.common.v1.Category"] == {
        "type": "string",
        "enum": ["unspecified", "auth", "permanent", "transient", "timeout", "quota"],
    }
    assert "done_fetch_doc" in schemas["reachstore.ingest.v1.AgentDecisionHint"]["enum"]


def test_field_schemas_follow_the_json_profile(doc: dict[str, Any]) -> None:
    failure = doc["components"]["schemas"]["reachstore.common.v1.PartialFailure"]["properties"]
    assert failure["retry_after_ms"] == {"type": ["integer", "null"], "format": "int64"}
    assert failure["structured_data"] == {"type": "object", "additionalProperties": True}
    task = doc["components"]["schemas"]["reachstore.ingest.v1.Task"]["properties"]
    assert task["error"] == {
        "anyOf": [
            {"$ref": "#/components/schemas/reachstore.common.v1.PartialFailure"},
            {"type": "null"},
        ]
    }
    query = doc["components"]["schemas"]["reachstore.query.v1.QueryRequest"]["properties"]
    assert query["filter"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert query["namespaces"] == {"type": "array", "items": {"type": "string"}}
    assert query["namespace"]["deprecated"] is True


def test_error_body_schema_lists_every_error_field(doc: dict[str, Any]) -> None:
    error = doc["components"]["schemas"][ERROR_SCHEMA]["properties"]["error"]
    assert error["required"] == [
        "code",
        "message",
        "category",
        "retryable",
        "retry_after_ms",
        "structured_data",
        "request_id",
        "details",
    ]


def test_document_is_valid_openapi_3_1(doc: dict[str, Any]) -> None:
    validator = OpenAPIV31SpecValidator(doc)
    problems = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors()
    ]
    assert problems == []


def test_the_validator_notices_a_broken_document(doc: dict[str, Any]) -> None:
    # Without this, a validator that accepts anything would pass the test above.
    broken = copy.deepcopy(doc)
    del broken["paths"]["/api/v1/query"]["post"]["responses"]["200"]["description"]
    assert list(OpenAPIV31SpecValidator(broken).iter_errors())

"""The OpenAPI document generated from the descriptors and the route table."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator

from reachstore_server.bridge.backends import DEFAULT_SERVICES
from reachstore_server.bridge.openapi import ERROR_SCHEMA, build_openapi
from reachstore_server.bridge.proto_comments import ProtoComments
from reachstore_server.bridge.routes import RouteTable

TABLE = RouteTable(DEFAULT_SERVICES)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    # Through JSON and back: the document must be plain JSON, not Python objects.
    return json.loads(json.dumps(build_openapi(TABLE)))


def _bare(node: Any, *, names: bool = False) -> Any:
    """``node`` without its descriptions, for the tests about shapes. ``names``: ``node``
    maps names to schemas (``properties``), where ``description`` may be a field's name."""
    if isinstance(node, dict):
        return {
            key: _bare(value, names=key == "properties" and not names)
            for key, value in node.items()
            if names or key != "description"
        }
    if isinstance(node, list):
        return [_bare(value) for value in node]
    return node


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
    query_params = {
        p["name"]: _bare(p["schema"]) for p in listing["parameters"] if p["in"] == "query"
    }
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
    schemas = _bare(doc["components"]["schemas"])
    assert schemas["reachstore.common.v1.Category"] == {
        "type": "string",
        "enum": ["unspecified", "auth", "permanent", "transient", "timeout", "quota"],
    }
    assert "done_fetch_doc" in schemas["reachstore.ingest.v1.AgentDecisionHint"]["enum"]


def test_field_schemas_follow_the_json_profile(doc: dict[str, Any]) -> None:
    schemas = _bare(doc["components"]["schemas"])
    failure = schemas["reachstore.common.v1.PartialFailure"]["properties"]
    assert failure["retry_after_ms"] == {"type": ["integer", "null"], "format": "int64"}
    assert failure["structured_data"] == {"type": "object", "additionalProperties": True}
    task = schemas["reachstore.ingest.v1.Task"]["properties"]
    assert task["error"] == {
        "anyOf": [
            {"$ref": "#/components/schemas/reachstore.common.v1.PartialFailure"},
            {"type": "null"},
        ]
    }
    query = schemas["reachstore.query.v1.QueryRequest"]["properties"]
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


# --- descriptions from the proto comments -------------------------------------------------

PROTOS = Path(__file__).resolve().parents[2] / "protos"


def _proto_comment(proto: str, declaration: str) -> str:
    """The comment lines right above ``declaration`` in a .proto file, joined as prose."""
    lines = (PROTOS / proto).read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if declaration in line)
    above: list[str] = []
    for line in reversed(lines[:at]):
        if not line.strip().startswith("//"):
            break
        above.insert(0, line.strip().removeprefix("//").strip())
    return " ".join(above)


def test_field_description_is_the_comment_in_the_proto_file(doc: dict[str, Any]) -> None:
    comment = _proto_comment("reachstore/common/v1/partial_failure.proto", "retry_after_ms = 9;")
    assert comment.startswith("How long to wait before retrying")
    failure = doc["components"]["schemas"]["reachstore.common.v1.PartialFailure"]
    assert failure["properties"]["retry_after_ms"]["description"] == comment
    query = doc["components"]["schemas"]["reachstore.query.v1.QueryRequest"]
    assert query["properties"]["top_k"]["description"] == _proto_comment(
        "reachstore/query/v1/query_service.proto", "int32 top_k = 3;"
    )
    # Beside a $ref and inside a nullable anyOf the description stays on the field.
    task = doc["components"]["schemas"]["reachstore.ingest.v1.Task"]["properties"]
    assert task["error"]["description"]
    assert "anyOf" in task["error"]


def test_message_and_operation_descriptions_are_the_proto_comments(doc: dict[str, Any]) -> None:
    query_proto = "reachstore/query/v1/query_service.proto"
    schemas = doc["components"]["schemas"]
    assert schemas["reachstore.query.v1.QueryRequest"]["description"] == _proto_comment(
        query_proto, "message QueryRequest {"
    )
    operation = doc["paths"]["/api/v1/query"]["post"]
    rpc = _proto_comment(query_proto, "rpc Query(QueryRequest)")
    assert operation["summary"] == rpc  # a one-sentence comment is the summary alone
    assert "description" not in operation
    create = doc["paths"]["/api/v1/namespaces/{namespace}/documents"]["post"]
    assert create["summary"] == (
        "Accepts one document for asynchronous ingestion and returns its task."
    )
    assert create["description"].startswith(create["summary"] + " Problems that depend")
    tags = {tag["name"]: tag["description"] for tag in doc["tags"]}
    assert tags["QueryService"] == _proto_comment(query_proto, "service QueryService {")
    assert set(tags) == {route.service.name for route in TABLE.routes}


def test_path_and_query_parameters_carry_their_fields_comments(doc: dict[str, Any]) -> None:
    listing = doc["paths"]["/api/v1/namespaces/{namespace}/documents"]["get"]
    params = {p["name"]: p for p in listing["parameters"]}
    assert params["page_size"]["description"] == _proto_comment(
        "reachstore/query/v1/query_service.proto", "int32 page_size ="
    )
    assert "description" not in params["page_size"]["schema"]
    assert params["namespace"]["description"]


def test_enum_description_lists_each_word_with_its_comment(doc: dict[str, Any]) -> None:
    proto = "reachstore/common/v1/partial_failure.proto"
    category = doc["components"]["schemas"]["reachstore.common.v1.Category"]
    intro, values = category["description"].split("\n\n")
    assert intro == _proto_comment(proto, "enum Category {")
    assert values.splitlines()[1] == "- `auth`: " + _proto_comment(proto, "CATEGORY_AUTH = 1;")
    assert len(values.splitlines()) == len(category["enum"])


def test_every_proto_schema_and_field_is_described(doc: dict[str, Any]) -> None:
    # buf lint (COMMENTS) demands a comment on each; all of them reach the document.
    undescribed = [
        f"{name}.{field}" if field else name
        for name, schema in doc["components"]["schemas"].items()
        if name.startswith("reachstore.") and name != ERROR_SCHEMA
        for field in ["", *schema.get("properties", {})]
        if not (schema["properties"][field] if field else schema).get("description")
    ]
    assert undescribed == []
    operations = [op for item in doc["paths"].values() for op in item.values()]
    assert all(op.get("summary") for op in operations)


def _rpc_summaries_dropped(document: dict[str, Any]) -> dict[str, Any]:
    paths = {
        path: {
            method: {k: v for k, v in op.items() if k != "summary" or "x-grpc-method" not in op}
            for method, op in item.items()
        }
        for path, item in document["paths"].items()
    }
    return {**document, "paths": paths}


def test_without_comments_the_document_is_the_same_minus_descriptions(
    doc: dict[str, Any],
) -> None:
    bare = json.loads(json.dumps(build_openapi(TABLE, comments=ProtoComments())))
    assert _bare(bare["components"]) == bare["components"]  # no schema described
    assert all(set(tag) == {"name"} for tag in bare["tags"])
    assert _bare(_rpc_summaries_dropped(bare)) == _bare(_rpc_summaries_dropped(doc))
    assert not any("summary" in op for op in bare["paths"]["/api/v1/query"].values())
    assert list(OpenAPIV31SpecValidator(bare).iter_errors()) == []

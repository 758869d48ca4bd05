"""An OpenAPI 3.1 document generated from the same descriptors and route table.

Schemas mirror the JSON profile in ``json_codec`` (written down in docs/REST_JSON.md):
proto field names, enums as string enums of lowercase words, ``null`` for unset messages and
absent optional scalars, 64-bit integers as numbers. Descriptions are the protos' leading
comments (``proto_comments``): a service's become its tag's, a method's the operation's
summary (first sentence) and description, a message's, field's and enum's their schema's,
and an enum's values are listed with theirs in the enum's description.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.bridge import json_codec
from reachstore_server.bridge.proto_comments import ProtoComments, bundled_comments
from reachstore_server.bridge.routes import Route, RouteTable

_FD = FieldDescriptor
ERROR_SCHEMA = "reachstore.bridge.Error"
_INFO = (
    "The REST bridge of reachstore's gRPC services. Schemas give the field names responses "
    "print (the proto names); requests may also use each field's lowerCamelCase JSON name, "
    "but not both names of one field. docs/REST_JSON.md describes this JSON profile and "
    "where it differs from canonical proto3 JSON."
)
_SCALARS: dict[int, dict[str, Any]] = {
    _FD.CPPTYPE_INT32: {"type": "integer", "format": "int32"},
    _FD.CPPTYPE_INT64: {"type": "integer", "format": "int64"},
    _FD.CPPTYPE_UINT32: {"type": "integer", "format": "uint32", "minimum": 0},
    _FD.CPPTYPE_UINT64: {"type": "integer", "format": "uint64", "minimum": 0},
    _FD.CPPTYPE_DOUBLE: {"type": "number", "format": "double"},
    _FD.CPPTYPE_FLOAT: {"type": "number", "format": "float"},
    _FD.CPPTYPE_BOOL: {"type": "boolean"},
    _FD.CPPTYPE_STRING: {"type": "string"},
}
_WELL_KNOWN: dict[str, dict[str, Any]] = {
    "google.protobuf.Struct": {"type": "object", "additionalProperties": True},
    "google.protobuf.Value": {},
    "google.protobuf.ListValue": {"type": "array", "items": {}},
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {"type": "string"},
}


def _ref(full_name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{full_name}"}


def _described(schema: dict[str, Any], description: str) -> dict[str, Any]:
    # OpenAPI 3.1 schemas are JSON Schema 2020-12: a description may stand beside a $ref.
    return {**schema, "description": description} if description else schema


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "type" in schema and isinstance(schema["type"], str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


class _SchemaCollector:
    """Walks message types and gathers a schema for each message and enum reached."""

    def __init__(self, comments: ProtoComments) -> None:
        self.comments = comments
        self.schemas: dict[str, dict[str, Any]] = {}

    def message(self, descriptor: Descriptor) -> dict[str, Any]:
        if descriptor.full_name in _WELL_KNOWN:
            return dict(_WELL_KNOWN[descriptor.full_name])
        if descriptor.full_name not in self.schemas:
            self.schemas[descriptor.full_name] = {}  # placeholder first: types may recurse
            properties = {field.name: self.field(field) for field in descriptor.fields}
            self.schemas[descriptor.full_name] = _described(
                {"type": "object", "properties": properties}, self.comments.of(descriptor)
            )
        return _ref(descriptor.full_name)

    def enum(self, enum: EnumDescriptor) -> dict[str, Any]:
        if enum.full_name not in self.schemas:
            schema = {"type": "string", "enum": json_codec.enum_words(enum)}
            self.schemas[enum.full_name] = _described(schema, self._enum_description(enum))
        return _ref(enum.full_name)

    def _enum_description(self, enum: EnumDescriptor) -> str:
        # A string enum has no place for a description per value: list them in the enum's.
        values, numbers = [], set()
        for value in enum.values:
            comment = self.comments.of_value(value)
            if comment and value.number not in numbers:  # an alias shares the first's word
                values.append(f"- `{json_codec.enum_word(enum, value.number)}`: {comment}")
            numbers.add(value.number)
        return "\n\n".join(part for part in (self.comments.of(enum), "\n".join(values)) if part)

    def _single(self, field: FieldDescriptor) -> dict[str, Any]:
        if field.cpp_type == _FD.CPPTYPE_MESSAGE:
            return self.message(field.message_type)
        if field.cpp_type == _FD.CPPTYPE_ENUM:
            return self.enum(field.enum_type)
        if field.type == _FD.TYPE_BYTES:
            return {"type": "string", "contentEncoding": "base64"}
        return dict(_SCALARS[field.cpp_type])

    def field(self, field: FieldDescriptor) -> dict[str, Any]:
        entry = field.message_type
        if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
            schema: dict[str, Any] = {
                "type": "object",
                "additionalProperties": self._single(entry.fields_by_name["value"]),
            }
        elif field.is_repeated:
            schema = {"type": "array", "items": self._single(field)}
        else:
            schema = self._single(field)
            is_struct = entry is not None and entry.full_name == "google.protobuf.Struct"
            if field.has_presence and not is_struct:
                schema = _nullable(schema)  # printed as null when unset
        if field.GetOptions().deprecated:
            schema = {**schema, "deprecated": True}
        return _described(schema, self.comments.of(field))


def _error_schema(collector: _SchemaCollector) -> dict[str, Any]:
    failure = collector.message(pf_pb2.PartialFailure.DESCRIPTOR)
    category = collector.enum(pf_pb2.Category.DESCRIPTOR)
    fields = {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "category": category,
        "retryable": {"type": "boolean"},
        "retry_after_ms": {"type": ["integer", "null"], "format": "int64"},
        "structured_data": {"type": "object", "additionalProperties": True},
        "request_id": {"type": "string"},
        "details": {"type": "array", "items": failure},
    }
    inner = {"type": "object", "required": list(fields), "properties": fields}
    return {"type": "object", "required": ["error"], "properties": {"error": inner}}


def _leaf_field(message: Descriptor, dotted: str) -> FieldDescriptor:
    *parents, last = dotted.split(".")
    for name in parents:
        message = message.fields_by_name[name].message_type
    return message.fields_by_name[last]


def _parameter(name: str, where: str, required: bool, schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter carrying its field's description itself rather than in its schema."""
    schema = dict(schema)
    description = schema.pop("description", "")
    param = {"name": name, "in": where, "required": required, "schema": schema}
    return _described(param, description)


def _parameters(route: Route, collector: _SchemaCollector) -> list[dict[str, Any]]:
    request = route.method.input_type
    params = []
    for name in route.variables:
        field = _leaf_field(request, name)
        params.append(_parameter(name, "path", True, collector.field(field)))
    if route.body == "*":
        return params
    for field in request.fields:
        if field.name in route.variables or field.cpp_type == _FD.CPPTYPE_MESSAGE:
            continue  # messages and maps cannot travel as query parameters
        param = _parameter(field.name, "query", False, collector.field(field))
        if field.is_repeated:
            param["explode"] = True  # repeat the parameter once per value
        params.append(param)
    return params


def _json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _operation(route: Route, operation_id: str, collector: _SchemaCollector) -> dict[str, Any]:
    # Every request message gets a component, also for GET routes whose fields travel as
    # parameters: gRPC and REST callers then share one vocabulary of types.
    request_schema = collector.message(route.method.input_type)
    comments = collector.comments
    operation: dict[str, Any] = {
        "operationId": operation_id,
        **({"summary": summary} if (summary := comments.summary(route.method)) else {}),
        **({"description": text} if (text := comments.of(route.method)) != summary else {}),
        "tags": [route.service.name],
        "x-grpc-method": route.grpc_path,
        "parameters": _parameters(route, collector),
        "responses": {
            str(route.success_status): {
                "description": "Success.",
                "content": _json_content(collector.message(route.method.output_type)),
            },
            "default": {"description": "Error.", "content": _json_content(_ref(ERROR_SCHEMA))},
        },
    }
    if route.body == "*":
        operation["requestBody"] = {
            "required": False,  # an empty body is read as {}
            "content": _json_content(request_schema),
        }
    if route.method.GetOptions().deprecated:
        operation["deprecated"] = True
    return operation


def _operation_ids(routes: tuple[Route, ...]) -> list[str]:
    # operationId is the RPC name; two services with the same RPC name (GetTask in ingest
    # and reach) are told apart by their service name, and extra bindings by a number.
    counts = Counter(route.method.name for route in routes)
    used: set[str] = set()
    ids = []
    for route in routes:
        base = route.method.name
        if counts[base] > 1:
            base = f"{route.service.name}_{base}"
        candidate, n = base, 2
        while candidate in used:
            candidate, n = f"{base}_{n}", n + 1
        used.add(candidate)
        ids.append(candidate)
    return ids


def _plain(operation_id: str, summary: str) -> dict[str, Any]:
    """A bridge-owned GET path (health, readiness, this document)."""
    return {
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "responses": {
                "200": {"description": summary},
                "default": {"description": "Error.", "content": _json_content(_ref(ERROR_SCHEMA))},
            },
        }
    }


def _tags(routes: tuple[Route, ...], comments: ProtoComments) -> list[dict[str, str]]:
    services = {route.service.full_name: route.service for route in routes}
    return [
        _described({"name": service.name}, comments.of(service))
        for _, service in sorted(services.items())
    ]


def build_openapi(
    table: RouteTable,
    *,
    title: str = "reachstore",
    version: str = "v1",
    comments: ProtoComments | None = None,
) -> dict[str, Any]:
    """The OpenAPI 3.1 document for every route of ``table`` plus the bridge's own paths.

    ``comments`` default to the ones shipped with the bridge.
    """
    comments = bundled_comments() if comments is None else comments
    collector = _SchemaCollector(comments)
    error_schema = _error_schema(collector)
    paths: dict[str, dict[str, Any]] = {
        "/healthz": _plain("Healthz", "The bridge process is up."),
        "/readyz": _plain("Readyz", "Every backend service reports SERVING."),
        "/api/v1/openapi.json": _plain("OpenApi", "This document."),
    }
    ordered = tuple(sorted(table.routes, key=lambda r: (r.template, r.http_method)))
    for route, operation_id in zip(ordered, _operation_ids(ordered), strict=True):
        paths.setdefault(route.template, {})[route.http_method.lower()] = _operation(
            route, operation_id, collector
        )
    schemas = dict(sorted(collector.schemas.items()))
    schemas[ERROR_SCHEMA] = error_schema
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": _INFO},
        "tags": _tags(ordered, comments),
        "paths": paths,
        "components": {"schemas": schemas},
    }

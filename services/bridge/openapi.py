"""An OpenAPI 3.1 document generated from the same descriptors and route table.

Schemas mirror the JSON profile in ``json_codec``: proto field names, enums as string enums
of lowercase words, ``null`` for unset messages and absent optional scalars, 64-bit
integers as numbers. The generated Python descriptors carry no source info (protoc strips
comments), so the document has no descriptions from proto comments.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from services.bridge import json_codec
from services.bridge.routes import Route, RouteTable

_FD = FieldDescriptor
ERROR_SCHEMA = "reachstore.bridge.Error"
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


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "type" in schema and isinstance(schema["type"], str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


class _SchemaCollector:
    """Walks message types and gathers a schema for each message and enum reached."""

    def __init__(self) -> None:
        self.schemas: dict[str, dict[str, Any]] = {}

    def message(self, descriptor: Descriptor) -> dict[str, Any]:
        if descriptor.full_name in _WELL_KNOWN:
            return dict(_WELL_KNOWN[descriptor.full_name])
        if descriptor.full_name not in self.schemas:
            self.schemas[descriptor.full_name] = {}  # placeholder first: types may recurse
            properties = {field.name: self.field(field) for field in descriptor.fields}
            self.schemas[descriptor.full_name] = {"type": "object", "properties": properties}
        return _ref(descriptor.full_name)

    def enum(self, enum: EnumDescriptor) -> dict[str, Any]:
        self.schemas.setdefault(
            enum.full_name, {"type": "string", "enum": json_codec.enum_words(enum)}
        )
        return _ref(enum.full_name)

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
        return schema


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


def _parameters(route: Route, collector: _SchemaCollector) -> list[dict[str, Any]]:
    request = route.method.input_type
    params = []
    for name in route.variables:
        field = _leaf_field(request, name)
        schema = collector.field(field)
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
    if route.body == "*":
        return params
    for field in request.fields:
        if field.name in route.variables or field.cpp_type == _FD.CPPTYPE_MESSAGE:
            continue  # messages and maps cannot travel as query parameters
        param: dict[str, Any] = {
            "name": field.name,
            "in": "query",
            "required": False,
            "schema": collector.field(field),
        }
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
    operation: dict[str, Any] = {
        "operationId": operation_id,
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


def build_openapi(
    table: RouteTable, *, title: str = "reachstore", version: str = "v1"
) -> dict[str, Any]:
    """The OpenAPI 3.1 document for every route of ``table`` plus the bridge's own paths."""
    collector = _SchemaCollector()
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
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": schemas},
    }

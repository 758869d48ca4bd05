"""The REST bridge fuzzed from its own OpenAPI document, against a real running system.

Every operation of the document gets examples that fit it and examples that break it
(wrong types, missing fields, out-of-range values), sent with a key that holds every scope.
Each answer must not be a server error, must use a status code, content type and body the
document declares, and must come back within the per-request timeout.

Bodies and query strings are also made hostile where services parse: a third of the
examples have one string (or object key) replaced by a value of ``parsed_strings.py`` (times
at the calendar's edges, Unicode digits, integers longer than ``int()`` reads, hostile page
tokens, lone surrogates in the JSON), and a sweep puts each such value into each string
field and query parameter of every operation in turn, so none is left to chance.

No operation is left out. Revoking keys cannot revoke the fuzzer's own key: the key id in
the path is generated, and a 16-hex id that matches is not going to be generated; the
revocation path itself is exercised with real ids in tests/e2e/test_auth.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from reachstore_server.bridge.backends import DEFAULT_SERVICES
from reachstore_server.bridge.openapi import build_openapi
from reachstore_server.bridge.routes import RouteTable
from tests.e2e.system import RunningSystem
from tests.fuzz.parsed_strings import PARSED, PARSED_JSON

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


# --- parsed strings in generated requests ---------------------------------------------------

Path = tuple[Any, ...]


def _string_places(value: Any, path: Path = ()) -> Iterator[Path]:
    """Where a string could go in a decoded JSON value: each string leaf, and each object
    key (as ``(*path, KEY, key)``)."""
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield (*path, _KEY, key)
            yield from _string_places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _string_places(item, (*path, index))


_KEY = object()  # marks "the key itself" in a path


def _replaced(value: Any, path: Path, new: str) -> Any:
    if not path:
        return new
    head, *rest = path
    if head is _KEY:
        old = rest[0]
        return {(new if k == old else k): v for k, v in value.items()}
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], tuple(rest), new)}
    copy = list(value)
    copy[head] = _replaced(copy[head], tuple(rest), new)
    return copy


def _with_one_parsed(value: Any, values: list[str]) -> st.SearchStrategy[Any]:
    places = list(_string_places(value))
    if not places:
        return st.just(value)
    hostile = st.tuples(st.sampled_from(places), st.sampled_from(values)).map(
        lambda pair: _replaced(value, *pair)
    )
    return st.one_of(st.just(value), st.just(value), hostile)


@schema.hook
def flatmap_body(context: Any, body: Any) -> st.SearchStrategy[Any]:
    return _with_one_parsed(body, PARSED_JSON)


@schema.hook
def flatmap_query(context: Any, query: Any) -> st.SearchStrategy[Any]:
    if not isinstance(query, dict) or not query:
        return st.just(query)
    # A query string is UTF-8: lone surrogates cannot travel there.
    hostile = st.tuples(st.sampled_from(sorted(query)), st.sampled_from(PARSED)).map(
        lambda pair: {**query, pair[0]: pair[1]}
    )
    return st.one_of(st.just(query), st.just(query), hostile)


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


# --- every parsed string in every field, systematically ----------------------------------------


def _schema(ref_or_schema: dict[str, Any]) -> dict[str, Any]:
    ref = ref_or_schema.get("$ref")
    if ref is None:
        return ref_or_schema
    return dict(DOCUMENT["components"]["schemas"][ref.rsplit("/", 1)[-1]])


def _body_leaves(node: dict[str, Any], depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(field path, a minimal body that puts ``PLACEHOLDER`` at it) for the string fields of
    a request schema, the map keys and values, and the items of arrays, three levels deep."""
    node = _schema(node)
    if depth > 3:
        return
    for name, prop in node.get("properties", {}).items():
        prop = _schema(prop)
        kind = prop.get("type")
        if kind == "string":
            yield name, {name: PLACEHOLDER}
        elif kind == "array":
            item = _schema(prop.get("items", {}))
            if item.get("type") == "string":
                yield f"{name}[0]", {name: [PLACEHOLDER]}
            elif item.get("type") == "object":
                for path, inner in _body_leaves(item, depth + 1):
                    yield f"{name}[0].{path}", {name: [inner]}
        elif kind == "object":
            if prop.get("additionalProperties"):
                yield f"{name} (key)", {name: {PLACEHOLDER: "v"}}
                yield f"{name}.k", {name: {"k": PLACEHOLDER}}
            for path, inner in _body_leaves(prop, depth + 1):
                yield f"{name}.{path}", {name: inner}


PLACEHOLDER = "\x01placeholder"


def _put(value: Any, text: str) -> Any:
    if value == PLACEHOLDER:
        return text
    if isinstance(value, dict):
        return {(text if k == PLACEHOLDER else k): _put(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [_put(v, text) for v in value]
    return value


def _operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for template, operations in DOCUMENT["paths"].items():
        for method, operation in operations.items():
            if operation.get("operationId") and template.startswith("/api/"):
                yield method, template, operation


OPERATIONS = sorted(_operations(), key=lambda op: op[2]["operationId"])


def _judge(reply: httpx.Response, where: str) -> None:
    assert reply.status_code < 500, f"{where}: {reply.status_code} {reply.text[:300]}"
    if reply.status_code >= 400:
        error = reply.json()["error"]
        assert error["category"] in {"auth", "permanent", "quota"}, (where, error)
        if error["code"] == "INVALID_ARGUMENT":
            assert error["structured_data"].get("field"), (where, error)


def _takes_parsed_strings(operation: dict[str, Any]) -> bool:
    """Whether a parsed string can reach the operation: a query parameter or a body."""
    query = any(p["in"] == "query" for p in operation.get("parameters", []))
    return query or "requestBody" in operation


# Operations that take only path parameters have no field a parsed string could reach.
PARSING_OPERATIONS = [op for op in OPERATIONS if _takes_parsed_strings(op[2])]


@pytest.mark.parametrize(
    ("method", "template", "operation"),
    PARSING_OPERATIONS,
    ids=[op[2]["operationId"] for op in PARSING_OPERATIONS],
)
def test_each_parsed_string_in_each_field_gets_a_clear_answer(
    method: str, template: str, operation: dict[str, Any], fuzz_http: httpx.Client
) -> None:
    path = template
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            path = path.replace("{" + parameter["name"] + "}", "fuzz-p")
    sent = 0
    for parameter in operation.get("parameters", []):
        if parameter["in"] != "query":
            continue
        for value in PARSED:
            where = f"{method.upper()} {template} ?{parameter['name']}={value[:40]!r}"
            _judge(fuzz_http.request(method, path, params={parameter["name"]: value}), where)
            sent += 1
    if "requestBody" in operation:
        content = operation["requestBody"]["content"]["application/json"]["schema"]
        for field, body in _body_leaves(content):
            for value in PARSED_JSON:
                where = f"{method.upper()} {template} {field}={value[:40]!r}"
                # json.dumps escapes a lone surrogate as JSON does; httpx's json= cannot.
                reply = fuzz_http.request(
                    method,
                    path,
                    content=json.dumps(_put(body, value)).encode(),
                    headers={"Content-Type": "application/json"},
                )
                _judge(reply, where)
                sent += 1
    assert sent, f"{operation['operationId']}: no parsed string was sent"

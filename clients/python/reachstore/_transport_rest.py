"""The REST transport: the same RPCs through the HTTP/JSON bridge, blocking or async.

Each call is built from the method's ``google.api.http`` option - the bridge serves its
routes from the same option, so the two cannot disagree: path variables are filled from
the request's fields, the other fields travel as the JSON body (``body: "*"``) or, for
routes without a body, as query parameters. The answer is parsed back into the RPC's
response message (``_json``), so the conversions to SDK models are the gRPC path's, and
error bodies become the same exceptions as rich gRPC statuses (``_errors``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import grpc
import httpx
from google.api import annotations_pb2
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message

from reachstore import _json
from reachstore._config import USER_AGENT
from reachstore._errors import from_http_error, transport_error
from reachstore._rpc import Rpc
from reachstore._tls import Tls

# `{name}`, `{name=*}` (one segment) or `{name=**}` (the rest of the path).
_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)(?:=([^}]*))?\}")
_VERBS = ("get", "put", "post", "delete", "patch")


@dataclasses.dataclass(frozen=True)
class HttpRule:
    verb: str  # upper case
    template: str
    # "*" (every field not in the path), a field name, or "" (no body: query parameters).
    body: str


@dataclasses.dataclass(frozen=True)
class HttpCall:
    """One HTTP request, ready to send."""

    verb: str
    path: str
    query: tuple[tuple[str, str], ...]
    body: dict[str, Any] | None


@functools.cache
def http_rule(method: MethodDescriptor) -> HttpRule:
    """The method's primary ``google.api.http`` binding."""
    options = method.GetOptions()
    if not options.HasExtension(annotations_pb2.http):
        raise ValueError(f"{method.full_name} has no HTTP route")
    rule = options.Extensions[annotations_pb2.http]
    verb = rule.WhichOneof("pattern")
    if verb not in _VERBS:
        raise ValueError(f"{method.full_name}: unsupported HTTP pattern {verb!r}")
    return HttpRule(verb.upper(), getattr(rule, verb), rule.body)


def _field_text(request: Message, dotted: str) -> str:
    holder: Any = request
    *parents, last = dotted.split(".")
    for name in parents:
        holder = getattr(holder, name)
    field: FieldDescriptor = holder.DESCRIPTOR.fields_by_name[last]
    value = getattr(holder, last)
    if field.cpp_type == FieldDescriptor.CPPTYPE_ENUM:
        return str(field.enum_type.values_by_number[value].name)
    if field.cpp_type == FieldDescriptor.CPPTYPE_BOOL:
        return "true" if value else "false"
    return str(value)


def _pop(data: dict[str, Any], dotted: str) -> None:
    *parents, last = dotted.split(".")
    node: Any = data
    for name in parents:
        node = node.get(name) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def _query_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _as_query(data: Mapping[str, Any], method: MethodDescriptor) -> tuple[tuple[str, str], ...]:
    query: list[tuple[str, str]] = []
    for key, value in data.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                raise ValueError(
                    f"{method.full_name}: {key} is a message and cannot travel as a query parameter"
                )
            query.append((key, _query_text(item)))
    return tuple(query)


def http_call(rpc: Rpc, request: Message) -> HttpCall:
    """The HTTP request that carries ``request`` to ``rpc`` through the bridge."""
    rule = http_rule(rpc.method)
    data = _json.to_json(request)
    bound: list[str] = []

    def fill(found: re.Match[str]) -> str:
        name, pattern = found.group(1), found.group(2)
        bound.append(name)
        text = _field_text(request, name)
        if not text:
            # An empty segment would make another URL (or none): say what is missing.
            raise ValueError(f"{name} must not be empty")
        # `**` may span segments; anything else is one segment, so a "/" inside an id
        # is encoded and stays inside its variable.
        return quote(text, safe="/" if pattern == "**" else "")

    path = _VARIABLE.sub(fill, rule.template)
    for name in bound:
        _pop(data, name)
    if rule.body == "*":
        return HttpCall(rule.verb, path, (), data)
    if rule.body:
        body = data.pop(rule.body, {})
        return HttpCall(rule.verb, path, _as_query(data, rpc.method), body)
    return HttpCall(rule.verb, path, _as_query(data, rpc.method), None)


def read_response(rpc: Rpc, status: int, headers: Mapping[str, str], content: bytes) -> Message:
    """The response message of a 2xx answer; the SDK exception of any other."""
    if not 200 <= status < 300:
        raise from_http_error(status, headers, content)
    try:
        return _json.from_json(json.loads(content) if content else {}, rpc.response_class)
    except ValueError as exc:
        raise transport_error(
            grpc.StatusCode.INTERNAL,
            f"the answer to {rpc.name} is not the JSON of "
            f"{rpc.response_class.DESCRIPTOR.full_name}: {exc}",
        ) from exc


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _failed(rpc: Rpc, exc: httpx.TransportError) -> Exception:
    """What a call that got no answer raises: out of time, or no connection."""
    if isinstance(exc, httpx.TimeoutException):
        return transport_error(
            grpc.StatusCode.DEADLINE_EXCEEDED, f"{rpc.name} did not answer in time ({exc})"
        )
    return transport_error(grpc.StatusCode.UNAVAILABLE, f"{rpc.name}: no answer ({exc})")


def _verify(tls: Tls | None) -> ssl.SSLContext | bool:
    # An https:// URL without a Tls of its own is checked against the system's authorities.
    return tls.ssl_context() if tls is not None else True


class RestTransport:
    """Blocking calls through ``httpx.Client``; safe to share between threads."""

    def __init__(self, base_url: str, api_key: str | None, tls: Tls | None = None) -> None:
        self._http = httpx.Client(base_url=base_url, headers=_headers(api_key), verify=_verify(tls))

    def call(self, rpc: Rpc, request: Message, timeout: float) -> Message:
        call = http_call(rpc, request)
        try:
            response = self._http.request(
                call.verb, call.path, params=call.query or None, json=call.body, timeout=timeout
            )
        except httpx.TransportError as exc:
            raise _failed(rpc, exc) from exc
        return read_response(rpc, response.status_code, response.headers, response.content)

    def close(self) -> None:
        self._http.close()


class AsyncRestTransport:
    """Calls through ``httpx.AsyncClient``."""

    def __init__(self, base_url: str, api_key: str | None, tls: Tls | None = None) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), verify=_verify(tls)
        )

    async def call(self, rpc: Rpc, request: Message, timeout: float) -> Message:
        call = http_call(rpc, request)
        try:
            response = await self._http.request(
                call.verb, call.path, params=call.query or None, json=call.body, timeout=timeout
            )
        except httpx.TransportError as exc:
            raise _failed(rpc, exc) from exc
        return read_response(rpc, response.status_code, response.headers, response.content)

    async def close(self) -> None:
        await self._http.aclose()

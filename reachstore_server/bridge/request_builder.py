"""Builds one request message from the three places HTTP carries fields: body, path, query.

The JSON body is decoded strictly by ``json_codec``; path variables and query parameters
arrive as text and are converted to the field's type with the same error reporting. Query
parameters, like body fields, may use a field's name or its lowerCamelCase JSON name, not
both. A field the caller sets twice with different values (body and path) is refused rather
than silently overridden, because one of the two was a mistake.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from reachstore_server.bridge import json_codec
from reachstore_server.bridge.routes import Route
from reachstore_server.common import errors

_FD = FieldDescriptor


def _leaf(message: Message, dotted: str) -> tuple[Message, FieldDescriptor]:
    """The message holding the last part of ``dotted`` and that part's field descriptor."""
    *parents, last = dotted.split(".")
    holder = message
    for index, name in enumerate(parents):
        field = holder.DESCRIPTOR.fields_by_name.get(name)
        if field is None or field.cpp_type != _FD.CPPTYPE_MESSAGE or field.is_repeated:
            prefix = ".".join(parents[: index + 1])
            raise errors.invalid(prefix, "unknown field")
        holder = getattr(holder, name)
    field = holder.DESCRIPTOR.fields_by_name.get(last)
    if field is None:
        raise errors.invalid(dotted, "unknown field")
    return holder, field


def _body_value(message: Message, body: dict[str, Any] | None, dotted: str) -> Any:
    """What the body gives the field ``dotted`` names, under either of its names."""
    node: Any = body
    descriptor = message.DESCRIPTOR
    for name in dotted.split("."):
        field = descriptor.fields_by_name.get(name)
        if not isinstance(node, dict) or field is None:
            return None
        node, descriptor = json_codec.member(node, field), field.message_type
    return node


def _apply_path(message: Message, body: dict[str, Any] | None, name: str, text: str) -> None:
    holder, field = _leaf(message, name)
    if field.is_repeated or field.cpp_type == _FD.CPPTYPE_MESSAGE:
        raise errors.invalid(name, "a path variable must name a single scalar field")
    value = json_codec.scalar_from_text(field, text, name)
    if _body_value(message, body, name) is not None and getattr(holder, field.name) != value:
        raise errors.invalid(name, "the body sets a different value than the path", path_value=text)
    setattr(holder, field.name, value)


def _group(query: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for key, value in query:
        grouped.setdefault(key, []).append(value)
    return grouped


def _query_fields(
    message: Message, grouped: dict[str, list[str]]
) -> list[tuple[str, FieldDescriptor, list[str]]]:
    """(key as written, field, values) per query key; unknown keys and a field given under
    both of its names refused before anything is set."""
    found = []
    seen: dict[str, str] = {}
    for key, values in grouped.items():
        field = json_codec.field_by_key(message.DESCRIPTOR, key)
        if field is None:
            raise errors.invalid(key, "unknown field")
        if field.name in seen:
            raise json_codec.both_names_error("", field, seen[field.name], key)
        seen[field.name] = key
        found.append((key, field, values))
    return found


def _apply_query(
    message: Message,
    path_params: dict[str, str],
    key: str,
    field: FieldDescriptor,
    values: list[str],
) -> None:
    if field.cpp_type == _FD.CPPTYPE_MESSAGE:
        raise errors.invalid(key, "cannot be set from a query parameter")
    converted = [
        json_codec.scalar_from_text(field, text, f"{key}[{i}]" if field.is_repeated else key)
        for i, text in enumerate(values)
    ]
    if field.is_repeated:
        getattr(message, field.name).extend(converted)
        return
    if len(converted) > 1:
        raise errors.invalid(key, "given more than once", count=len(converted))
    if field.name in path_params and getattr(message, field.name) != converted[0]:
        raise errors.invalid(key, "the query sets a different value than the path")
    setattr(message, field.name, converted[0])


def build_request(
    route: Route,
    body: dict[str, Any] | None,
    path_params: dict[str, str],
    query: Sequence[tuple[str, str]],
) -> Message:
    """The request message for ``route``; raises ``ReachstoreError`` naming the bad field.

    ``body`` is the decoded JSON object (None for routes without a body).
    """
    message = json_codec.message_class(route.method.input_type)()
    if body is not None:
        json_codec.fill_message(message, body)
    for name, text in path_params.items():
        _apply_path(message, body, name, text)
    grouped = _group(query)
    if grouped and route.body == "*":
        # Every field of this route travels in the body; a stray query parameter is most
        # likely a field meant for the body, so say so instead of ignoring it.
        first = next(iter(grouped))
        raise errors.invalid(
            first, "query parameters are not accepted on this route; send fields in the JSON body"
        )
    for key, field, values in _query_fields(message, grouped):
        _apply_query(message, path_params, key, field, values)
    return message

"""Protobuf messages <-> the REST bridge's JSON, so the REST transport yields the very
messages the gRPC transport does and every conversion to SDK models exists once.

Out, ``json_format.MessageToDict`` with proto field names does almost all of it; the one
change is 64-bit integers, which proto3 JSON writes as strings and the bridge (strict,
as it should be) only takes as numbers.

In, the bridge prints enums as lowercase words without their prefix (``"permanent"`` for
``CATEGORY_PERMANENT``), which ``json_format.ParseDict`` does not know; the words are
turned back into numbers first, guided by the descriptors. ``null`` (an absent optional
field, such as ``retry_after_ms`` of a failure that is not retryable) means "unset" to
ParseDict already, and fields this SDK does not know (a newer server) are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from reachstore._convert import enum_tables

_FD = FieldDescriptor
_INT64 = (_FD.CPPTYPE_INT64, _FD.CPPTYPE_UINT64)

_M = TypeVar("_M", bound=Message)


def _is_map(field: FieldDescriptor) -> bool:
    return (
        field.is_repeated
        and field.message_type is not None
        and field.message_type.GetOptions().map_entry
    )


def _plain_message(field: FieldDescriptor) -> bool:
    """A message field whose JSON is an object of its fields (not Struct, Value, ...)."""
    return field.message_type is not None and not field.message_type.full_name.startswith(
        "google.protobuf."
    )


def _walk(
    descriptor: Descriptor,
    data: dict[str, Any],
    leaf: Callable[[FieldDescriptor, Any], Any],
) -> dict[str, Any]:
    """A copy of ``data`` with ``leaf`` applied to every scalar value of a known field,
    recursing into nested messages, lists and maps."""
    out: dict[str, Any] = {}
    for name, value in data.items():
        field = descriptor.fields_by_name.get(name)
        if field is None or value is None:
            out[name] = value
            continue
        if _is_map(field) and isinstance(value, dict):
            value_field = field.message_type.fields_by_name["value"]
            out[name] = {key: _one(value_field, item, leaf) for key, item in value.items()}
        elif field.is_repeated and isinstance(value, list):
            out[name] = [_one(field, item, leaf) for item in value]
        else:
            out[name] = _one(field, value, leaf)
    return out


def _one(field: FieldDescriptor, value: Any, leaf: Callable[[FieldDescriptor, Any], Any]) -> Any:
    if field.cpp_type == _FD.CPPTYPE_MESSAGE:
        if _plain_message(field) and isinstance(value, dict):
            return _walk(field.message_type, value, leaf)
        return value
    return leaf(field, value)


def _int64_as_number(field: FieldDescriptor, value: Any) -> Any:
    if field.cpp_type in _INT64 and isinstance(value, str):
        return int(value)
    return value


_DROP = object()


def _enum_word_as_number(field: FieldDescriptor, value: Any) -> Any:
    if field.cpp_type != _FD.CPPTYPE_ENUM or not isinstance(value, str):
        return value
    if value in field.enum_type.values_by_name:
        return value
    # A word this SDK does not know (a newer server's value) cannot be held by the
    # message; it is left unset rather than failing the whole answer.
    return enum_tables(field.enum_type)[1].get(value, _DROP)


def _without_dropped(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_dropped(v) for k, v in value.items() if v is not _DROP}
    if isinstance(value, list):
        return [_without_dropped(v) for v in value if v is not _DROP]
    return value


def to_json(message: Message) -> dict[str, Any]:
    """A request as the JSON object the bridge accepts (fields left at their defaults are
    omitted, so the server's defaults apply exactly as over gRPC)."""
    data = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return _walk(message.DESCRIPTOR, data, _int64_as_number)


def from_json(data: Any, message_class: type[_M]) -> _M:
    """A message of ``message_class`` from the bridge's JSON (ValueError if it is not an
    object of that shape)."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object for {message_class.DESCRIPTOR.full_name}")
    message = message_class()
    normalized = _without_dropped(_walk(message.DESCRIPTOR, data, _enum_word_as_number))
    try:
        json_format.ParseDict(normalized, message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(str(exc)) from exc
    return message

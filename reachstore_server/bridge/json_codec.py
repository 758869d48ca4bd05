"""The bridge's JSON profile, both ways, driven only by descriptors.

Out (message -> JSON): proto field names; every field printed, zero values included;
unset message fields and absent proto3 ``optional`` scalars as ``null`` (an unset
``google.protobuf.Struct`` prints as ``{}`` so ``structured_data`` is always an object);
enums as lowercase words without the enum's prefix (``CATEGORY_PERMANENT`` ->
``"permanent"``); 64-bit integers as JSON numbers; Struct, maps as plain objects.

In (JSON -> message): strict. A field is accepted by its proto name or its JSON name
(lowerCamelCase: ``top_k`` or ``topK``), as proto3 JSON parsers must; both names of one
field in one object are refused. Every mistake becomes ``errors.invalid(path, rule)`` where
``path`` names the field as the caller wrote it (``documents[2].txt``), so an agent can
fix the request without reading prose.

docs/REST_JSON.md lists where this profile differs from canonical proto3 JSON, and why.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
import struct
from typing import Any

from google.protobuf import json_format, message_factory, struct_pb2
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from reachstore_server.common import errors

_FD = FieldDescriptor
_INT_RANGES: dict[int, tuple[str, int, int]] = {
    _FD.CPPTYPE_INT32: ("int32", -(2**31), 2**31 - 1),
    _FD.CPPTYPE_UINT32: ("uint32", 0, 2**32 - 1),
    _FD.CPPTYPE_INT64: ("int64", -(2**63), 2**63 - 1),
    _FD.CPPTYPE_UINT64: ("uint64", 0, 2**64 - 1),
}
_FLOAT32_MAX = 3.4028234663852886e38
_STRUCT = "google.protobuf.Struct"
_VALUE = "google.protobuf.Value"
_LIST_VALUE = "google.protobuf.ListValue"


# --- enums ------------------------------------------------------------------------------


def _upper_snake(camel: str) -> str:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", camel)
    return spaced.upper()


@functools.cache
def _enum_tables(enum: EnumDescriptor) -> tuple[dict[int, str], dict[str, int]]:
    """(number -> word, accepted spelling -> number) for one enum; cached per type."""
    prefix = _upper_snake(enum.name) + "_"
    words: dict[int, str] = {}
    accepted: dict[str, int] = {}
    for value in enum.values:
        word = value.name.removeprefix(prefix).lower()
        words.setdefault(value.number, word)
        accepted[word] = value.number
        accepted[value.name] = value.number
    return words, accepted


def enum_words(enum: EnumDescriptor) -> list[str]:
    """The lowercase words of ``enum`` in declaration order (used by errors and OpenAPI)."""
    words, _ = _enum_tables(enum)
    return list(dict.fromkeys(words.values()))


def enum_word(enum: EnumDescriptor, number: int) -> str | int:
    words, _ = _enum_tables(enum)
    # An unknown number (a newer server's value) is passed through rather than hidden.
    return words.get(number, number)


# --- message -> JSON ----------------------------------------------------------------------


def _float_out(value: float) -> float | str:
    # JSON has no NaN/Infinity literals; these spellings are the proto3 JSON ones.
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _shortest_float32(value: float) -> float:
    # float32 values widened to Python floats print as 0.10000000149011612; the shortest
    # decimal that maps back to the same float32 is what the sender meant.
    if not math.isfinite(value):
        return value
    for digits in range(6, 10):
        candidate = float(f"{value:.{digits}g}")
        if struct.unpack("f", struct.pack("f", candidate))[0] == value:
            return candidate
    return value


def _scalar_out(field: FieldDescriptor, value: Any) -> Any:
    cpp = field.cpp_type
    if cpp == _FD.CPPTYPE_ENUM:
        return enum_word(field.enum_type, value)
    if cpp == _FD.CPPTYPE_DOUBLE:
        return _float_out(value)
    if cpp == _FD.CPPTYPE_FLOAT:
        return _float_out(_shortest_float32(value))
    if field.type == _FD.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value


def _value_out(field: FieldDescriptor, value: Any) -> Any:
    if field.cpp_type == _FD.CPPTYPE_MESSAGE:
        return message_to_dict(value)
    return _scalar_out(field, value)


def _struct_value_out(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {key: _struct_value_out(item) for key, item in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_struct_value_out(item) for item in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        # Struct keeps every number as a double; 3.0 was almost always sent as 3, and ints
        # up to 2**53 are exact, so give them back as JSON integers.
        if number.is_integer() and abs(number) <= 2**53:
            return int(number)
        return _float_out(number)
    if kind in ("string_value", "bool_value"):
        return getattr(value, kind)
    return None  # null_value or unset


def _map_key_out(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def message_to_dict(message: Message) -> Any:
    """A message in the bridge's JSON profile (a dict, except for well-known value types)."""
    full_name = message.DESCRIPTOR.full_name
    if full_name == _STRUCT:
        return {key: _struct_value_out(item) for key, item in message.fields.items()}
    if full_name == _VALUE:
        return _struct_value_out(message)
    if full_name == _LIST_VALUE:
        return [_struct_value_out(item) for item in message.values]
    if full_name.startswith("google.protobuf."):
        # Timestamp, Duration, wrappers...: their canonical proto3 JSON forms.
        return json_format.MessageToDict(message, preserving_proto_field_name=True)
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {
                _map_key_out(key): _value_out(value_field, item) for key, item in value.items()
            }
        elif field.is_repeated:
            out[field.name] = [_value_out(field, item) for item in value]
        elif field.has_presence and not message.HasField(field.name):
            is_struct = field.message_type is not None and field.message_type.full_name == _STRUCT
            out[field.name] = {} if is_struct else None
        else:
            out[field.name] = _value_out(field, value)
    return out


def _is_map(field: FieldDescriptor) -> bool:
    return (
        field.is_repeated
        and field.message_type is not None
        and field.message_type.GetOptions().map_entry
    )


# --- JSON -> message ----------------------------------------------------------------------


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _wrong_type(path: str, expected: str, value: Any) -> errors.ReachstoreError:
    got = json_type(value)
    return errors.invalid(path, f"expected {expected}, got {got}", expected=expected, got=got)


def _integer(field: FieldDescriptor, value: Any, path: str) -> int:
    # bool is an int in Python, but `true` is not a number in JSON.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong_type(path, "integer", value)
    kind, low, high = _INT_RANGES[field.cpp_type]
    if isinstance(value, float):
        if not math.isfinite(value):  # 1e400 decodes to inf
            raise errors.invalid(
                path, f"integer out of {kind} range", expected="integer", minimum=low, maximum=high
            )
        if not value.is_integer():
            raise errors.invalid(
                path, "expected integer, got a number with a fraction", expected="integer"
            )
        value = int(value)
    if not low <= value <= high:
        raise errors.invalid(
            path, f"integer out of {kind} range", expected="integer", minimum=low, maximum=high
        )
    return value


def _number(field: FieldDescriptor, value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong_type(path, "number", value)
    try:
        number = float(value)
    except OverflowError:
        raise errors.invalid(path, "number out of range", expected="number") from None
    if field.cpp_type == _FD.CPPTYPE_FLOAT and abs(number) > _FLOAT32_MAX:
        raise errors.invalid(path, "number out of float range", expected="number")
    return number


def _enum(field: FieldDescriptor, value: Any, path: str) -> int:
    words = enum_words(field.enum_type)
    _, accepted = _enum_tables(field.enum_type)
    if isinstance(value, str) and value in accepted:
        return accepted[value]
    rule = (
        f"unknown enum word {value!r}"
        if isinstance(value, str)
        else f"expected enum word, got {json_type(value)}"
    )
    raise errors.invalid(path, rule, expected="enum word", allowed=words)


def _bytes(value: Any, path: str) -> bytes:
    if not isinstance(value, str):
        raise _wrong_type(path, "string", value)
    # proto3 JSON accepts standard and URL-safe base64, padded or not.
    standard = value.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise errors.invalid(path, "expected base64 string", expected="base64 string") from None


def scalar_from_json(field: FieldDescriptor, value: Any, path: str) -> Any:
    """One decoded JSON value converted for a scalar field, or an error naming ``path``."""
    cpp = field.cpp_type
    if cpp in _INT_RANGES:
        return _integer(field, value, path)
    if cpp in (_FD.CPPTYPE_DOUBLE, _FD.CPPTYPE_FLOAT):
        return _number(field, value, path)
    if cpp == _FD.CPPTYPE_BOOL:
        if not isinstance(value, bool):
            raise _wrong_type(path, "boolean", value)
        return value
    if cpp == _FD.CPPTYPE_ENUM:
        return _enum(field, value, path)
    if field.type == _FD.TYPE_BYTES:
        return _bytes(value, path)
    if not isinstance(value, str):
        raise _wrong_type(path, "string", value)
    return value


_INT_TEXT = re.compile(r"[+-]?[0-9]+")  # ASCII digits: str.isdigit() also takes "²"
# int() refuses text past 4,300 digits; every integer field's range ends long before this.
_MAX_SIGNIFICANT_DIGITS = 30


def scalar_from_text(field: FieldDescriptor, text: str, path: str) -> Any:
    """A path or query parameter converted for a scalar field, with the same errors."""
    cpp = field.cpp_type
    if cpp in _INT_RANGES:
        if not _INT_TEXT.fullmatch(text):
            raise errors.invalid(path, "expected integer", expected="integer", got=text[:64])
        sign, digits = ("-" if text.startswith("-") else ""), text.lstrip("+-").lstrip("0")
        if len(digits) > _MAX_SIGNIFICANT_DIGITS:
            kind, low, high = _INT_RANGES[cpp]
            raise errors.invalid(
                path, f"integer out of {kind} range", expected="integer", minimum=low, maximum=high
            )
        return _integer(field, int(sign + (digits or "0")), path)
    if cpp in (_FD.CPPTYPE_DOUBLE, _FD.CPPTYPE_FLOAT):
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise errors.invalid(path, "expected number", expected="number", got=text)
        return _number(field, number, path)
    if cpp == _FD.CPPTYPE_BOOL:
        if text not in ("true", "false"):
            raise errors.invalid(
                path, "expected boolean (true or false)", expected="boolean", got=text
            )
        return text == "true"
    return scalar_from_json(field, text, path)


@functools.cache
def _fields_by_key(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    """Every name a field of ``descriptor`` is accepted by: its own and its JSON name."""
    keys = {field.name: field for field in descriptor.fields}
    for field in descriptor.fields:
        keys.setdefault(field.json_name, field)  # never shadows another field's own name
    return keys


def field_by_key(descriptor: Descriptor, key: str) -> FieldDescriptor | None:
    """The field ``key`` names in a JSON object or a query parameter, or None."""
    return _fields_by_key(descriptor).get(key)


def both_names_error(
    path: str, field: FieldDescriptor, first: str, second: str
) -> errors.ReachstoreError:
    """The error for one field given under both of its names."""
    return errors.invalid(
        _join(path, second),
        f"field {field.name} given twice, as {first!r} and {second!r}; proto3 JSON accepts "
        "either its name or its lowerCamelCase JSON name, not both",
        conflicts_with=_join(path, first),
    )


def member(data: dict[str, Any], field: FieldDescriptor) -> Any:
    """The value ``data`` gives ``field`` under either of its names (None when absent)."""
    if field.name in data:
        return data[field.name]
    return data.get(field.json_name)


def _members(
    descriptor: Descriptor, data: dict[Any, Any], path: str
) -> list[tuple[str, FieldDescriptor, Any]]:
    """(name as written, field, value) for every member of ``data``, all checked first."""
    found: list[tuple[str, FieldDescriptor, Any]] = []
    seen: dict[str, str] = {}
    for name, value in data.items():
        field = field_by_key(descriptor, name) if isinstance(name, str) else None
        if field is None:
            raise errors.invalid(_join(path, str(name)), "unknown field")
        if field.name in seen:
            raise both_names_error(path, field, seen[field.name], name)
        seen[field.name] = name
        found.append((name, field, value))
    return found


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _fill_wkt(message: Message, value: Any, path: str) -> None:
    full_name = message.DESCRIPTOR.full_name
    if full_name == _STRUCT and not isinstance(value, dict):
        raise _wrong_type(path, "object", value)
    if full_name == _LIST_VALUE and not isinstance(value, list):
        raise _wrong_type(path, "array", value)
    try:
        json_format.ParseDict(value, message)
    except json_format.ParseError as exc:
        raise errors.invalid(path, f"invalid {full_name}: {exc}") from None
    except OverflowError:
        # A Struct number is a double: an integer of 309 digits or more is none.
        raise errors.invalid(path, f"invalid {full_name}: a number beyond a double") from None


def _fill_map(container: Any, field: FieldDescriptor, value: Any, path: str) -> None:
    if not isinstance(value, dict):
        raise _wrong_type(path, "object", value)
    key_field = field.message_type.fields_by_name["key"]
    value_field = field.message_type.fields_by_name["value"]
    for raw_key, item in value.items():
        item_path = f"{path}.{raw_key}"
        key = (
            raw_key
            if key_field.cpp_type == _FD.CPPTYPE_STRING
            else scalar_from_text(key_field, raw_key, item_path)
        )
        if item is None:
            raise _wrong_type(item_path, _expected(value_field), item)
        if value_field.cpp_type == _FD.CPPTYPE_MESSAGE:
            fill_message(container[key], item, item_path)
        else:
            container[key] = scalar_from_json(value_field, item, item_path)


def _expected(field: FieldDescriptor) -> str:
    if field.cpp_type == _FD.CPPTYPE_MESSAGE:
        return "object"
    names: dict[int, str] = {
        _FD.CPPTYPE_BOOL: "boolean",
        _FD.CPPTYPE_ENUM: "enum word",
        _FD.CPPTYPE_DOUBLE: "number",
        _FD.CPPTYPE_FLOAT: "number",
    }
    return "integer" if field.cpp_type in _INT_RANGES else names.get(field.cpp_type, "string")


def _fill_repeated(message: Message, field: FieldDescriptor, value: Any, path: str) -> None:
    if not isinstance(value, list):
        raise _wrong_type(path, "array", value)
    container = getattr(message, field.name)
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        if item is None:
            raise _wrong_type(item_path, _expected(field), item)
        if field.cpp_type == _FD.CPPTYPE_MESSAGE:
            fill_message(container.add(), item, item_path)
        else:
            container.append(scalar_from_json(field, item, item_path))


def fill_message(message: Message, data: Any, path: str = "") -> None:
    """Sets ``message`` from decoded JSON, strictly; ``path`` prefixes error field names."""
    descriptor: Descriptor = message.DESCRIPTOR
    if descriptor.full_name.startswith("google.protobuf."):
        _fill_wkt(message, data, path or "body")
        return
    if not isinstance(data, dict):
        raise _wrong_type(path or "body", "object", data)
    oneofs_set: dict[str, str] = {}
    for name, field, value in _members(descriptor, data, path):
        field_path = _join(path, name)
        if value is None:  # null means "leave unset", as in proto3 JSON
            continue
        oneof = field.containing_oneof
        if oneof is not None and len(oneof.fields) > 1:
            if oneof.name in oneofs_set:
                raise errors.invalid(
                    field_path,
                    f"only one of the {oneof.name} fields may be set",
                    conflicts_with=_join(path, oneofs_set[oneof.name]),
                )
            oneofs_set[oneof.name] = name
        if _is_map(field):
            _fill_map(getattr(message, field.name), field, value, field_path)
        elif field.is_repeated:
            _fill_repeated(message, field, value, field_path)
        elif field.cpp_type == _FD.CPPTYPE_MESSAGE:
            child = getattr(message, field.name)
            child.SetInParent()  # `{}` still marks the field as present
            fill_message(child, value, field_path)
        else:
            setattr(message, field.name, scalar_from_json(field, value, field_path))


def message_from_dict(descriptor: Descriptor, data: Any) -> Message:
    """A new message of type ``descriptor`` built strictly from decoded JSON."""
    message = message_class(descriptor)()
    fill_message(message, data)
    return message


def message_class(descriptor: Descriptor) -> type[Message]:
    """The generated class for ``descriptor`` (the factory caches it)."""
    return message_factory.GetMessageClass(descriptor)

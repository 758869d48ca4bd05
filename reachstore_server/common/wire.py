"""Naming the field that makes a protobuf request undecodable.

protobuf's parser says *what* is wrong ("String field had bad UTF-8", "Wire format was
corrupt") but not *where*. A caller needs the field, so when a request cannot be parsed
the gRPC layer walks its wire format against the message descriptor and reports the
first field that breaks: a string that is not UTF-8, a sub-message that is corrupt or
nested too deeply, or bytes that end in the middle of a field.
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor

# protobuf's own default recursion limit for parsing.
MAX_DEPTH = 100

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class _Broken(Exception):
    def __init__(self, path: str, rule: str) -> None:
        super().__init__(path, rule)
        self.path = path
        self.rule = rule


def _varint(data: bytes, pos: int, path: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Broken(path, "the wire format ends inside a number")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _walk(descriptor: Descriptor, data: bytes, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _Broken(path, f"nested more than {MAX_DEPTH} levels deep")
    counts: dict[int, int] = {}
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos, path or "request")
        number, wire_type = tag >> 3, tag & 7
        field = descriptor.fields_by_number.get(number)
        where = _where(path, field, number, counts)
        if wire_type == _VARINT:
            _, pos = _varint(data, pos, where)
        elif wire_type in (_FIXED64, _FIXED32):
            pos += 8 if wire_type == _FIXED64 else 4
            if pos > len(data):
                raise _Broken(where, "the wire format ends inside a field")
        elif wire_type == _LENGTH:
            size, pos = _varint(data, pos, where)
            end = pos + size
            if end > len(data):
                raise _Broken(where, "the wire format ends inside a field")
            if field is not None:
                _check_value(field, data[pos:end], where, depth)
            pos = end
        else:
            raise _Broken(where, f"unsupported wire type {wire_type}")


def _where(path: str, field: FieldDescriptor | None, number: int, counts: dict[int, int]) -> str:
    name = field.name if field is not None else f"#{number}"
    full = f"{path}.{name}" if path else name
    if field is not None and field.is_repeated:
        index = counts.get(number, 0)
        counts[number] = index + 1
        return f"{full}[{index}]"
    return full


def _check_value(field: FieldDescriptor, value: bytes, where: str, depth: int) -> None:
    if field.type == FieldDescriptor.TYPE_STRING:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Broken(where, f"not valid UTF-8 at byte {exc.start}") from None
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        _walk(field.message_type, value, where, depth + 1)


def locate(descriptor: Descriptor, data: bytes) -> tuple[str, str]:
    """(field path, what is wrong with it) for an undecodable ``data``; ("request", ...)
    when no single field is to blame."""
    try:
        _walk(descriptor, data, "", 0)
    except _Broken as broken:
        return broken.path, broken.rule
    return "request", "the message is not valid protobuf"

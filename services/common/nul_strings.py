"""Refusing NUL characters in request strings, in one place for every RPC.

PostgreSQL's text type cannot hold U+0000 (psycopg refuses it with a DataError), SQLite
keeps it, and a NUL in a name, a document or a note is never what a caller meant. So a
request carrying one is refused before any handler runs, on both engines alike, naming
the field: INVALID_ARGUMENT, not an INTERNAL error from deep in a write.
"""

from __future__ import annotations

from google.protobuf.message import Message

from services.common import errors

_NUL = "\x00"


def _in_value(value: object, path: str) -> str | None:
    if isinstance(value, str):
        return path if _NUL in value else None
    if isinstance(value, Message):
        return find(value, path)
    return None


def find(message: Message, path: str = "") -> str | None:
    """The path of the first string field of ``message`` that holds a NUL, or None."""
    for field, value in message.ListFields():
        where = f"{path}.{field.name}" if path else field.name
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if isinstance(key, str) and _NUL in key:
                    return f"{where}[{key[:40]!r}]"
                found = _in_value(item, f"{where}.{key}")
                if found is not None:
                    return found
        elif field.is_repeated:
            for index, item in enumerate(value):
                found = _in_value(item, f"{where}[{index}]")
                if found is not None:
                    return found
        else:
            found = _in_value(value, where)
            if found is not None:
                return found
    return None


def check(message: Message) -> None:
    """Raises INVALID_ARGUMENT naming the first string field that holds a NUL."""
    where = find(message)
    if where is not None:
        raise errors.invalid(where, "must not contain NUL (U+0000) characters")

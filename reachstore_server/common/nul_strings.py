"""Refusing NUL characters in request strings, in one place for every RPC.

PostgreSQL's text type cannot hold U+0000 (psycopg refuses it with a DataError), SQLite
keeps it, and a NUL in a name, a document or a note is never what a caller meant. So a
request carrying one is refused before any handler runs, on both engines alike, naming
the field: INVALID_ARGUMENT, not an INTERNAL error from deep in a write.

The one exception is a repeated field whose items succeed or fail one by one (a batch's
documents, per the batch contract): a NUL inside one item fails that item in its handler
(``find`` on the item) and the others go on; a NUL in the rest of the request still
refuses it whole.
"""

from __future__ import annotations

from google.protobuf.message import Message

from reachstore_server.common import errors

_NUL = "\x00"
RULE = "must not contain NUL (U+0000) characters"
# Request type -> its fields whose items are checked one by one by the handler.
PER_ITEM: dict[str, frozenset[str]] = {
    "reachstore.ingest.v1.BatchCreateDocumentsRequest": frozenset({"documents"}),
}


def _in_value(value: object, path: str) -> str | None:
    if isinstance(value, str):
        return path if _NUL in value else None
    if isinstance(value, Message):
        return find(value, path)
    return None


def find(message: Message, path: str = "", skip: frozenset[str] = frozenset()) -> str | None:
    """The path of the first string field of ``message`` that holds a NUL, or None; the
    top-level fields named in ``skip`` are not looked into."""
    for field, value in message.ListFields():
        if field.name in skip:
            continue
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


def _may_hold_nul(message: Message) -> bool:
    """False when no string of ``message`` can hold a NUL: its wire form has no zero byte
    at all (a string's U+0000 is one). Serializing is C code and much cheaper than walking
    every field in Python, which was a sixth of an audit append's time; only a message with
    a zero byte somewhere (a number 0 in a packed field, most doubles) is walked."""
    return b"\x00" in message.SerializeToString()


def check(message: Message) -> None:
    """Raises INVALID_ARGUMENT naming the first string field that holds a NUL, outside the
    fields whose items the handler checks itself (``PER_ITEM``)."""
    if not _may_hold_nul(message):
        return
    where = find(message, skip=PER_ITEM.get(message.DESCRIPTOR.full_name, frozenset()))
    if where is not None:
        raise errors.invalid(where, RULE)


def check_item(item: Message, path: str) -> None:
    """The same check for one item of a ``PER_ITEM`` field, named from ``path``."""
    if not _may_hold_nul(item):
        return
    where = find(item, path)
    if where is not None:
        raise errors.invalid(where, RULE)

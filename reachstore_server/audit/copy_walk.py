"""Walking a stretch of a chain on PostgreSQL as ``COPY … TO STDOUT`` sends it: each row
one line of tab-separated text, read straight off the connection, hashed as bytes.

Why: on a million events, turning every column of every row into a Python string (what a
cursor does) and then JSON-encoding it again for the hash cost more than the hash itself.
A COPY line already holds each value's UTF-8 bytes; for the common line, which holds no
backslash and no control character, the canonical JSON an event's hash covers
(``reachstore_server/audit/chain.py``) is those bytes with every ``"`` escaped, put into a fixed
template. ``COPY`` escapes backslash, tab, newline and carriage return with a backslash,
so in a line with no backslash the tabs are exactly the column breaks, and JSON would
escape nothing in it but ``"`` (the control characters are checked for separately).

Any other line (a backslash anywhere, a control character, a NULL, which COPY writes as
``\\N``) has its values decoded from COPY's escapes and is hashed by ``values_hash``
itself. Either way this is only the quick walk: when a row does not pass, the caller walks
the chain again one event at a time and names the break (``reachstore_server/audit/verify.py``).
The database sends text; every hash is computed here, never in SQL.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import re
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
from psycopg import pq, sql
from sqlalchemy import Engine

from reachstore_server.audit.chain import HASHED_FIELDS, values_hash
from reachstore_server.audit.verify import Stops, Walk

# The columns in the order COPY sends them: the hashed fields, then seq and hash.
_COLUMNS = (*HASHED_FIELDS, "seq", "hash")
_SEQ_AT, _HASH_AT = len(HASHED_FIELDS), len(HASHED_FIELDS) + 1
_PREV_AT = HASHED_FIELDS.index("prev_hash")
_INT_FIELD = HASHED_FIELDS.index("duration_ms")
_TIME_AT = HASHED_FIELDS.index("time")

# canonical_json of the hashed fields as a bytes template: keys sorted, each text value
# between quotes, the integer bare. ``_IN_KEY_ORDER`` picks a line's values in that order.
_SORTED = sorted(range(len(HASHED_FIELDS)), key=lambda i: HASHED_FIELDS[i])
_TEMPLATE = (
    "{"
    + ",".join(f'"{HASHED_FIELDS[i]}":' + ("%b" if i == _INT_FIELD else '"%b"') for i in _SORTED)
    + "}"
).encode("ascii")
_IN_KEY_ORDER = operator.itemgetter(*_SORTED)

# Bytes JSON would escape (below 0x20) other than the tab between columns and the newline
# that ends the line; deleting them changes the length of a line that has any.
_CONTROL = bytes(b for b in range(0x20) if b not in (0x09, 0x0A))

# Lines hashed per batch: enough to make the per-batch checks cheap, few enough to stop
# soon after a break.
_BATCH = 1000

# COPY's text escapes (``\\N`` aside): what follows the backslash, and what it stands for.
_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
# An integer column's text: optional sign, ASCII digits (``str.isdigit`` takes others too).
_DIGITS = re.compile(r"-?[0-9]+", re.ASCII)


def copy_walk(engine: Engine, tenant: str, lo: int, hi: int | None, stops: Stops) -> Walk | None:
    """What ``quick_walk`` says of the events at ``lo``..``hi`` (``hi`` None: to the end)
    of ``tenant``'s chain, read with COPY over one of ``engine``'s connections."""
    raw = engine.raw_connection()
    done = False
    try:
        conn = raw.driver_connection
        assert isinstance(conn, psycopg.Connection), "the engine is PostgreSQL's, via psycopg"
        query = sql.SQL(
            "COPY (SELECT {columns} FROM audit_events WHERE tenant = {tenant} AND seq >= {lo}"
            "{upper} ORDER BY seq) TO STDOUT (ENCODING 'UTF8')"
        ).format(
            columns=sql.SQL(", ").join(map(sql.Identifier, _COLUMNS)),
            tenant=sql.Literal(tenant),
            lo=sql.Literal(lo),
            upper=sql.SQL("") if hi is None else sql.SQL(" AND seq <= {}").format(sql.Literal(hi)),
        )
        if not _typed_as_stored(conn):
            return None  # the walk over rows reads what the columns now hold, and says so
        # Through libpq's own calls (``Connection.pgconn``, which psycopg documents for
        # such use): its cursor's ``Copy`` reads a row at a time through several Python
        # generators, which cost more than hashing the row. This runs in a worker process
        # of its own (``reachstore_server/audit/parallel_walk.py``), so a blocking read is fine.
        pgconn = conn.pgconn
        pgconn.send_query(query.as_bytes(conn))
        _expect(pgconn.get_result(), pq.ExecStatus.COPY_OUT)
        walk = _walk_lines(_copied(pgconn), stops)
        if walk is not None:
            # Every row was read: the COPY's own result says whether they were all sent.
            _expect(pgconn.get_result(), pq.ExecStatus.COMMAND_OK)
            while pgconn.get_result() is not None:
                pass
            done = True
        return walk
    finally:
        if done:
            raw.close()
        else:
            raw.invalidate()  # rows left unread (a break was found) or an error: it goes


# What each column must be for a COPY line to spell its values as they were hashed: text
# for the text fields, and an integer type, whose text is its canonical digits, for
# ``duration_ms`` (and ``seq``, read as a number too). A column retyped (``duration_ms``
# as text can hold "0020", which COPY sends bare as if it were a number) is left to the
# walk over rows.
_TEXT_TYPES = ("text", "character varying")
_INT_TYPES = ("bigint", "integer", "smallint")


def _typed_as_stored(conn: psycopg.Connection[Any]) -> bool:
    rows = conn.execute(
        "SELECT a.attname, a.atttypid::regtype::text FROM pg_attribute a"
        " WHERE a.attrelid = 'audit_events'::regclass AND a.attnum > 0 AND NOT a.attisdropped"
    ).fetchall()
    conn.rollback()
    types = dict(rows)
    return all(
        types.get(name) in (_INT_TYPES if name in ("duration_ms", "seq") else _TEXT_TYPES)
        for name in _COLUMNS
    )


def _expect(result: pq.abc.PGresult | None, status: pq.ExecStatus) -> None:
    if result is None or result.status != status:
        message = result.error_message.decode("utf-8", "replace") if result else "no result"
        raise psycopg.OperationalError(f"reading the chain with COPY failed: {message}")


def _copied(pgconn: pq.abc.PGconn) -> Iterator[memoryview]:
    """The rows of the COPY in progress on ``pgconn``, one line each."""
    read = pgconn.get_copy_data
    while True:
        size, data = read(0)
        if size < 0:
            return
        yield data


def _walk_lines(lines: Iterable[bytes | memoryview], stops: Stops) -> Walk | None:
    wanted, opening = stops.wanted, stops.opening
    hash_at: dict[int, str] = {}
    openers: dict[int, str] = {}
    first: tuple[int, str] | None = None
    prev_seq, prev_hash = 0, b""
    count = 0
    for seq, digest, link, ok, line in _hashed(lines):
        if first is None:
            first = (seq, link.decode("utf-8"))
        elif seq != prev_seq + 1 or link != prev_hash:
            return None
        if not ok:
            return None
        count += 1
        if seq in wanted:
            hash_at[seq] = digest.decode("ascii")
        if seq in opening:
            openers[seq] = str(_decoded(line)[_TIME_AT])
        prev_seq, prev_hash = seq, digest
    if first is None:
        return Walk(0, "", 0, "", 0, {}, {})
    return Walk(first[0], first[1], prev_seq, prev_hash.decode("ascii"), count, hash_at, openers)


def _hashed(lines: Iterable[bytes | memoryview]) -> Iterator[tuple[int, bytes, bytes, bool, bytes]]:
    """(seq, stored hash, link to the previous event, whether the content hashes to the
    stored hash, the line) of each line. Lines are checked for anything JSON would escape
    but ``"`` a batch at a time, which is most of what makes this cheap."""
    sha256 = hashlib.sha256
    template, in_key_order = _TEMPLATE, _IN_KEY_ORDER
    lines = iter(lines)
    while batch := list(map(bytes, itertools.islice(lines, _BATCH))):
        joined = b"".join(batch)
        if _plain(joined):
            escaped = joined[:-1].replace(b'"', b'\\"').split(b"\n")
        else:
            escaped = [line[:-1].replace(b'"', b'\\"') if _plain(line) else b"" for line in batch]
        for line, plain in zip(batch, escaped, strict=True):
            if plain:
                fields = plain.split(b"\t")
                digest = fields[_HASH_AT]
                ok = sha256(template % in_key_order(fields)).hexdigest().encode() == digest
                yield int(fields[_SEQ_AT]), digest, fields[_PREV_AT], ok, line
                continue
            values = _decoded(line)
            position, stored, link = values[_SEQ_AT], values[_HASH_AT], values[_PREV_AT]
            if not (
                isinstance(position, str) and isinstance(stored, str) and isinstance(link, str)
            ):
                # A NULL where none belongs: the walk one event at a time names it.
                yield 0, b"", b"", False, line
                return
            ok = values_hash(tuple(values[:_SEQ_AT])) == stored
            yield int(position), stored.encode(), link.encode(), ok, line


def _plain(text: bytes) -> bool:
    """Whether ``text`` (COPY lines) holds no backslash and no control character but the
    tab between columns and the newline that ends a line."""
    return b"\\" not in text and len(text.translate(None, _CONTROL)) == len(text)


def _decoded(line: bytes) -> list[object]:
    """A COPY text line's values, unescaped (``\\N`` as None, ``duration_ms`` as an int
    when it reads as one). COPY sends the columns asked for, so a line has them all."""
    fields = line[:-1].split(b"\t")
    values: list[object] = []
    for field in fields:
        if field == b"\\N":
            values.append(None)
            continue
        text = field.decode("utf-8")
        if "\\" in text:
            text = _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)
        values.append(text)
    duration = values[_INT_FIELD]
    if isinstance(duration, str) and _DIGITS.fullmatch(duration):
        values[_INT_FIELD] = int(duration)
    return values

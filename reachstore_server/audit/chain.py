"""The hash chain and its signatures: what an event's hash covers, and how a checkpoint
is signed.

Each tenant has its own chain. A tenant's events can then be verified (and shown to that
tenant) without reading anyone else's, and appends of different tenants never wait for
each other; an auditor verifies every chain in turn.

An event's hash is SHA-256 over a canonical JSON encoding of every stored field except
its position, the previous event's hash included. The position is left out on purpose:
the links carry the order, so an event that was moved still verifies on its own and the
break shows as a reorder, not as an edit.
"""

from __future__ import annotations

import hashlib
import hmac
import operator
from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import Any, NamedTuple

from reachstore_server.common.canonical import canonical_json
from reachstore_server.common.config_errors import ConfigError

GENESIS = "0" * 64
HASHED_FIELDS = (
    "event_id",
    "time",
    "tenant",
    "caller_key_id",
    "service",
    "method",
    "idempotency_key",
    "params_json",
    "result_status",
    "error_code",
    "category",
    "duration_ms",
    "trace_id",
    "prev_hash",
)
MIN_KEY_BYTES = 16


def event_hash(event: Mapping[str, Any]) -> str:
    """The hash of an event given as a mapping of (at least) ``HASHED_FIELDS``."""
    return values_hash(tuple(event[field] for field in HASHED_FIELDS))


# ``canonical_json`` of the hashed fields, spelled out: the keys in sorted order with the
# value slots between them, filled by the same C string encoder ``json.dumps`` uses. Built
# once, it makes an event's hash about three times cheaper than ``json.dumps`` of a dict,
# which is most of what verifying a chain costs (bench/bench_audit.py).
_SORTED = sorted(range(len(HASHED_FIELDS)), key=lambda i: HASHED_FIELDS[i])
_TEMPLATE = (
    "".join(
        ("{" if n == 0 else ",") + encode_basestring(HASHED_FIELDS[i]) + ":%s"
        for n, i in enumerate(_SORTED)
    )
    + "}"
)


# Every hashed field is text but ``duration_ms``, an integer; its slot in sorted order.
_INT_FIELD = HASHED_FIELDS.index("duration_ms")
_INT_SLOT = _SORTED.index(_INT_FIELD)
_TEXT_FIELDS = operator.itemgetter(*(i for i in _SORTED if i != _INT_FIELD))


def values_hash(values: tuple[Any, ...]) -> str:
    """The hash of an event given as its ``HASHED_FIELDS`` values, in that order. Text and
    an integer ``duration_ms`` take the fast path; anything else (a NULL someone wrote
    into the table, say) is encoded by ``canonical_json`` itself, so both paths agree."""
    duration = values[_INT_FIELD]
    if type(duration) is int:
        try:
            parts = list(map(encode_basestring, _TEXT_FIELDS(values)))
        except TypeError:  # a value that is not text
            parts = None
        if parts is not None:
            parts.insert(_INT_SLOT, int.__repr__(duration))
            return hashlib.sha256((_TEMPLATE % tuple(parts)).encode("utf-8")).hexdigest()
    try:
        body = canonical_json(dict(zip(HASHED_FIELDS, values, strict=True)))
    except (TypeError, ValueError):
        # A value JSON cannot hold (bytes written into a text column by hand, on SQLite)
        # is one no appender wrote: no hash matches it, so Verify names the row edited
        # instead of failing with it.
        return UNHASHABLE
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


# What ``values_hash`` gives for values no event can hold: never a SHA-256 hex digest.
UNHASHABLE = "unhashable"


# --- appending: the hash of a new event, cut around the previous event's hash -----------------
#
# An appender knows every hashed field of a new event but ``prev_hash`` before it holds
# its tenant's head. ``NewEvent`` carries the canonical JSON of the event cut around that
# one slot, as UTF-8 bytes, so that under the head's lock linking it is one SHA-256 over
# three byte strings (``link``), the same hash ``values_hash`` gives.

STORED_FIELDS = tuple(field for field in HASHED_FIELDS if field != "prev_hash")
_PREV_FIELD = HASHED_FIELDS.index("prev_hash")
_STORED_SORTED = sorted(range(len(STORED_FIELDS)), key=lambda i: STORED_FIELDS[i])
_STORED_INT = STORED_FIELDS.index("duration_ms")
_STORED_INT_SLOT = _STORED_SORTED.index(_STORED_INT)
_STORED_TEXT = operator.itemgetter(*(i for i in _STORED_SORTED if i != _STORED_INT))
_PREV_SLOT = _SORTED.index(_PREV_FIELD)
_PIECES = _TEMPLATE.split("%s")  # the keys, between the value slots; no key holds a "%"
_BEFORE_PREV = "%s".join(_PIECES[: _PREV_SLOT + 1])
_AFTER_PREV = "%s".join(_PIECES[_PREV_SLOT + 1 :])


class NewEvent(NamedTuple):
    """An event to append: its ``STORED_FIELDS`` values in that order, and its canonical
    JSON before and after the ``prev_hash`` value (None for values that are not all text
    and an integer duration, which ``link`` hashes through ``values_hash``)."""

    values: tuple[Any, ...]
    around_prev: tuple[bytes, bytes] | None


def new_event(values: tuple[Any, ...]) -> NewEvent:
    """``values`` (``STORED_FIELDS`` in order) ready to be linked."""
    duration = values[_STORED_INT]
    if type(duration) is int:
        try:
            parts = list(map(encode_basestring, _STORED_TEXT(values)))
        except TypeError:  # a value that is not text
            return NewEvent(values, None)
        parts.insert(_STORED_INT_SLOT, int.__repr__(duration))
        return NewEvent(
            values,
            (
                (_BEFORE_PREV % tuple(parts[:_PREV_SLOT])).encode("utf-8"),
                (_AFTER_PREV % tuple(parts[_PREV_SLOT:])).encode("utf-8"),
            ),
        )
    return NewEvent(values, None)


def link(event: NewEvent, prev_hash: str) -> str:
    """The hash of ``event`` placed after the event whose hash is ``prev_hash``."""
    if event.around_prev is None:
        values = event.values
        return values_hash((*values[:_PREV_FIELD], prev_hash, *values[_PREV_FIELD:]))
    before, after = event.around_prev
    return hashlib.sha256(before + encode_basestring(prev_hash).encode("utf-8") + after).hexdigest()


class Signer:
    """HMAC-SHA256 over a checkpoint's tenant, position, head hash and time.

    HMAC rather than a public-key signature: the only verifier is reachstore itself (the
    audit service and ``reachstore audit verify``), which holds the key anyway; the key
    never sits in the database, so whoever can rewrite the tables cannot sign.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ConfigError(f"REACHSTORE_AUDIT_KEY: at least {MIN_KEY_BYTES} bytes")
        self._key = key
        self.key_id = "hmac-sha256:" + hashlib.sha256(key).hexdigest()[:16]

    def sign(self, tenant: str, seq: int, head_hash: str, signed_at: str) -> str:
        message = canonical_json([tenant, seq, head_hash, signed_at]).encode("utf-8")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def verify(self, tenant: str, seq: int, head_hash: str, signed_at: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(tenant, seq, head_hash, signed_at), signature)

    def __repr__(self) -> str:
        return f"Signer({self.key_id})"


def signer_from_env(env: Mapping[str, str]) -> Signer:
    key = env.get("REACHSTORE_AUDIT_KEY", "")
    if not key:
        raise ConfigError(
            "REACHSTORE_AUDIT_KEY is not set: the audit service needs a key (16+ bytes) to "
            "sign checkpoints (`reachstore up` keeps one in the data folder)"
        )
    return Signer(key.encode("utf-8"))

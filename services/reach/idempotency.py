"""Idempotency keys: the same business intent always yields the same key, so it is sent once.

A key is ``tenant / business entity / action type / digest of the parameters that matter /
logical time window``. The entity and action type say *what* is done to *whom*; the digest
covers only a declared whitelist of parameters, so a fresh trace id or a retry counter in the
request does not turn a resend into a new action; the window says how often the intent may
legitimately recur ("remind this customer at most once a day" is window ``day``).

A key, once made, never changes: ``IdempotencyKey`` is frozen, and its text form is
unambiguous (each free-text part is percent-encoded, so a ``/`` inside an entity id cannot
make two different keys read alike) and parses back to the same key.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

WINDOWS = ("none", "hour", "day", "week")

DIGEST_CHARS = 16

_DIGEST = re.compile(f"[0-9a-f]{{{DIGEST_CHARS}}}")
_BUCKET = re.compile(r"-|\d{4}-\d\d-\d\dT\d\d|\d{4}-\d\d-\d\d|\d{4}-W\d\d", re.ASCII)
# Marks a whitelisted path the parameters do not have: not ``null``, which is a value.
_ABSENT = object()


def window_bucket(at: datetime.datetime, window: str) -> str:
    """The window ``at`` falls in, in UTC: ``-`` for "none" (the intent happens once, ever),
    ``2026-11-30T05`` for "hour", ``2026-11-30`` for "day", ``2026-W48`` for "week" (ISO
    weeks, whose year can differ from the calendar year around the new year). A naive
    datetime is refused: its moment is a guess, and a guess would split or merge windows."""
    if at.tzinfo is None or at.tzinfo.utcoffset(at) is None:
        raise ValueError(f"a timezone-aware datetime is required, got naive {at.isoformat()}")
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}; got {window!r}")
    if window == "none":
        return "-"
    utc = at.astimezone(datetime.UTC)
    day = f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}"
    if window == "hour":
        return f"{day}T{utc.hour:02d}"
    if window == "day":
        return day
    year, week, _ = utc.isocalendar()
    return f"{year:04d}-W{week:02d}"


def params_digest(params: Mapping[str, Any], whitelist: Sequence[str]) -> str:
    """The first 16 hex characters of the SHA-256 of the whitelisted parameters, canonically.

    Each whitelist entry is a dotted path into nested objects (``recipient.email``); a path
    the parameters lack is left out, which differs from a path whose value is null. A path
    cannot reach a key that itself contains a dot. An empty whitelist means every parameter.
    Canonical means: keys sorted, no whitespace, UTF-8, strings and keys in Unicode NFC
    (so "é" typed as one code point or as e + combining accent is one parameter), and
    integral numbers written as integers, since parameters arrive as protobuf Struct
    values, where 3 is 3.0. The whitelist's paths are looked up in the canonical form, so a
    parameter name typed in another Unicode form is still the same parameter. Accepts
    plain JSON-like values and Struct/ListValue alike; NaN, infinities and other types are
    refused (ValueError, TypeError).
    """
    canonical = _canonical(params, "")
    if whitelist:
        picked: Any = {}
        for path in whitelist:
            name = unicodedata.normalize("NFC", path)
            value = _lookup(canonical, name)
            if value is not _ABSENT:
                picked[name] = value
    else:
        picked = canonical
    text = json.dumps(
        picked, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def _lookup(params: Mapping[str, Any], path: str) -> Any:
    if not path or any(not part for part in path.split(".")):
        raise ValueError(f"whitelist entries must be dotted names, got {path!r}")
    value: Any = params
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _canonical(value: Any, path: str) -> Any:
    """``value`` as plain JSON types, numbers normalised; ``path`` names it in errors."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"parameter {path or '.'} is not a finite number: {value!r}")
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"parameter {path or '.'} has a non-string key {key!r}")
            name = unicodedata.normalize("NFC", key)
            if name in out:
                raise ValueError(
                    f"parameter {path or '.'} has two keys that are one in NFC: {name!r}"
                )
            out[name] = _canonical(item, f"{path}.{key}" if path else key)
        return out
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [_canonical(item, f"{path}[{i}]") for i, item in enumerate(value)]
    raise TypeError(f"parameter {path or '.'} has a type a key cannot hold: {type(value)}")


@dataclasses.dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """One action's identity. ``window`` is the bucket from ``window_bucket`` (``-`` for
    none). Text form: ``tenant/entity/action_type/digest/window``, free-text parts
    percent-encoded."""

    tenant: str
    entity_id: str
    action_type: str
    digest: str
    window: str

    def __post_init__(self) -> None:
        for name in ("tenant", "entity_id", "action_type"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if not isinstance(self.digest, str) or not _DIGEST.fullmatch(self.digest):
            raise ValueError(
                f"digest must be {DIGEST_CHARS} lowercase hex digits, got {self.digest!r}"
            )
        if not isinstance(self.window, str) or not _BUCKET.fullmatch(self.window):
            raise ValueError(f"window must be a window bucket, got {self.window!r}")

    def __str__(self) -> str:
        parts = (self.tenant, self.entity_id, self.action_type)
        return "/".join([*(quote(part, safe="") for part in parts), self.digest, self.window])

    @classmethod
    def parse(cls, text: str) -> IdempotencyKey:
        """The key ``text`` renders; only the exact text ``str`` produces is accepted, so one
        key has one spelling (``%2F`` and ``%2f`` would otherwise both be a ``/``)."""
        parts = text.split("/")
        if len(parts) != 5:
            raise ValueError(f"an idempotency key has 5 parts separated by '/', got {text!r}")
        tenant, entity_id, action_type, digest, window = parts
        key = cls(
            unquote(tenant, errors="strict"),
            unquote(entity_id, errors="strict"),
            unquote(action_type, errors="strict"),
            digest,
            window,
        )
        if str(key) != text:
            raise ValueError(f"not an idempotency key in canonical form: {text!r}")
        return key


def build_key(
    tenant: str,
    entity_id: str,
    action_type: str,
    params: Mapping[str, Any],
    whitelist: Sequence[str],
    at: datetime.datetime,
    window: str,
) -> IdempotencyKey:
    """The key of ``action_type`` on ``entity_id`` for ``tenant`` with these parameters, in
    the ``window`` (one of ``WINDOWS``) that ``at`` falls in."""
    return IdempotencyKey(
        tenant,
        unicodedata.normalize("NFC", entity_id),
        action_type,
        params_digest(params, whitelist),
        window_bucket(at, window),
    )

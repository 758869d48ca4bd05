"""Idempotency keys: the same business intent always yields the same key, so it is sent once.

A key is ``tenant / business entity / action type / digest of the parameters that matter /
logical time window``. The entity and action type say *what* is done to *whom*; the digest
covers only a declared whitelist of parameters, so a fresh trace id or a retry counter in the
request does not turn a resend into a new action; the window says how often the intent may
legitimately recur ("remind this customer at most once a day" is window ``day``).

The entity and the digest are keyed hashes (HMAC-SHA256 under the deployment's
``REACHSTORE_PII_SECRET``, the secret that keys PII masking in ``reachstore_server/common/pii.py``):
an entity id is often personal data (an e-mail, a phone number, a name), and so are the
keyed parameters, while a key is stored, shown in answers, written to the audit trail and
sent to receivers. A plain hash would not do: a phone number is guessed by hashing every
phone number. Every replica and every restart holds the same secret, so the same intent
still gets the same key everywhere. ``KeySecrets`` also holds earlier secrets, whose keys
are looked up (never minted) so that a rotation does not turn a re-submission into a new
action (``look_up_keys``); see docs/SECURITY.md, "Idempotency keys".

A key, once made, never changes: ``IdempotencyKey`` is frozen, and its text form is
unambiguous (the tenant and action type are percent-encoded, so a ``/`` inside one cannot
make two different keys read alike) and parses back to the same key.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.common.pii import MIN_SECRET_BYTES
from reachstore_server.common.windows import window_bucket

DIGEST_CHARS = 16
ENTITY_CHARS = 32
# The entity part of a key: "e:" and hex. Before entities were hashed, the part was the
# percent-encoded entity, where ":" is always "%3A": no older key has a part like this.
ENTITY_PREFIX = "e:"

SECRET_VARIABLE = "REACHSTORE_PII_SECRET"
PREVIOUS_VARIABLE = "REACHSTORE_PII_SECRET_PREVIOUS"

_DIGEST = re.compile(f"[0-9a-f]{{{DIGEST_CHARS}}}")
_ENTITY = re.compile(f"{ENTITY_PREFIX}[0-9a-f]{{{ENTITY_CHARS}}}")
_BUCKET = re.compile(r"-|\d{4}-\d\d-\d\dT\d\d|\d{4}-\d\d-\d\d|\d{4}-W\d\d", re.ASCII)
# Marks a whitelisted path the parameters do not have: not ``null``, which is a value.
_ABSENT = object()


def canonical_params(params: Mapping[str, Any], whitelist: Sequence[str]) -> str:
    """The whitelisted parameters as canonical JSON, the text a key's digest is taken of.

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
    return json.dumps(
        picked, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def params_digest(
    params: Mapping[str, Any], whitelist: Sequence[str], secret: bytes, tenant: str
) -> str:
    """The first 16 hex characters of HMAC-SHA256(secret, "reach-params" NUL tenant NUL
    canonical parameters) (``canonical_params``). Keyed: the parameters that matter are
    often a phone number or an e-mail address, which a plain hash would let anyone confirm
    by guessing. The tenant is in it because channels, and so the function, are the whole
    deployment's: without it any tenant could have the digest of a guess made (a
    ``validate_only`` submission sends nothing) and match it against another tenant's keys."""
    text = canonical_params(params, whitelist)
    return _hmac(secret, "reach-params", tenant, text)[:DIGEST_CHARS]


def entity_part(secret: bytes, tenant: str, entity_id: str) -> str:
    """The entity as a key holds it: ``e:`` and the first 32 hex characters of
    HMAC-SHA256(secret, "reach-entity" NUL tenant NUL entity id in NFC). 128 bits, so two
    entities of a tenant never share a part; the tenant is in it, so one entity id in two
    tenants does not read alike either."""
    normalised = unicodedata.normalize("NFC", entity_id)
    return ENTITY_PREFIX + _hmac(secret, "reach-entity", tenant, normalised)[:ENTITY_CHARS]


def _hmac(secret: bytes, *parts: str) -> str:
    # Tenants, entity ids and canonical JSON are printable: NUL cannot occur inside a part.
    return hmac.new(secret, "\x00".join(parts).encode("utf-8"), hashlib.sha256).hexdigest()


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
    """One action's identity. ``entity`` is ``entity_part`` of the entity id (never the id
    itself), ``digest`` that of ``params_digest``, ``window`` the bucket from
    ``window_bucket`` (``-`` for none). Text form: ``tenant/entity/action_type/digest/window``,
    the tenant and action type percent-encoded."""

    tenant: str
    entity: str
    action_type: str
    digest: str
    window: str

    def __post_init__(self) -> None:
        for name in ("tenant", "action_type"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if not isinstance(self.entity, str) or not _ENTITY.fullmatch(self.entity):
            raise ValueError(
                f"entity must be {ENTITY_PREFIX!r} and {ENTITY_CHARS} lowercase hex digits "
                "(entity_part of the entity id), got "
                + (f"{len(self.entity)} characters" if isinstance(self.entity, str) else "a "
                   + type(self.entity).__name__)
            )  # fmt: skip
        if not isinstance(self.digest, str) or not _DIGEST.fullmatch(self.digest):
            raise ValueError(
                f"digest must be {DIGEST_CHARS} lowercase hex digits, got {self.digest!r}"
            )
        if not isinstance(self.window, str) or not _BUCKET.fullmatch(self.window):
            raise ValueError(f"window must be a window bucket, got {self.window!r}")

    def __str__(self) -> str:
        tenant, action_type = (quote(part, safe="") for part in (self.tenant, self.action_type))
        return "/".join([tenant, self.entity, action_type, self.digest, self.window])

    @classmethod
    def parse(cls, text: str) -> IdempotencyKey:
        """The key ``text`` renders; only the exact text ``str`` produces is accepted, so one
        key has one spelling (``%2F`` and ``%2f`` would otherwise both be a ``/``)."""
        parts = text.split("/")
        if len(parts) != 5:
            raise ValueError(f"an idempotency key has 5 parts separated by '/', got {text!r}")
        tenant, entity, action_type, digest, window = parts
        key = cls(
            unquote(tenant, errors="strict"),
            entity,
            unquote(action_type, errors="strict"),
            digest,
            window,
        )
        if str(key) != text:
            raise ValueError(f"not an idempotency key in canonical form: {text!r}")
        return key


class KeySecrets:
    """The secret keys are made under, and earlier ones whose keys are still looked up.

    Deployment-wide: every replica must hold the same ``current`` secret, or the same intent
    gets two keys. ``previous`` lists secrets of before a rotation, newest first: a task
    reserved under one of them is found again (``look_up_keys``), while new keys are made
    under ``current`` only."""

    def __init__(self, current: bytes, previous: Sequence[bytes] = ()) -> None:
        for secret in (current, *previous):
            if len(secret) < MIN_SECRET_BYTES:
                raise ValueError(f"a key secret holds at least {MIN_SECRET_BYTES} bytes")
        self.current = bytes(current)
        self.previous = tuple(bytes(p) for p in previous if p != current)

    def __repr__(self) -> str:
        return f"KeySecrets(previous={len(self.previous)})"  # never the secrets


def previous_secrets(env: Mapping[str, str]) -> tuple[bytes, ...]:
    """``REACHSTORE_PII_SECRET_PREVIOUS``: earlier secrets, separated by commas, newest first
    (empty: none). Each must be as long as the current secret must be; a ``ConfigError``
    names the entry (never its value) otherwise."""
    raw = env.get(PREVIOUS_VARIABLE, "")
    if not raw.strip():
        return ()
    out = []
    for number, entry in enumerate(raw.split(","), 1):
        secret = entry.strip().encode()
        if not secret:
            raise ConfigError(
                f"{PREVIOUS_VARIABLE} has an empty entry (number {number}); list earlier "
                "secrets separated by commas"
            )
        if len(secret) < MIN_SECRET_BYTES:
            raise ConfigError(
                f"{PREVIOUS_VARIABLE} entry {number} must be at least {MIN_SECRET_BYTES} "
                f"bytes, got {len(secret)}"
            )
        out.append(secret)
    return tuple(out)


def key_secrets_from_env(env: Mapping[str, str]) -> KeySecrets:
    """The key secrets of this deployment: ``REACHSTORE_PII_SECRET`` (required: a secret
    made up by each process would give the same intent another key on every replica and
    after every restart) and ``REACHSTORE_PII_SECRET_PREVIOUS``."""
    raw = env.get(SECRET_VARIABLE, "")
    if not raw:
        raise ConfigError(
            f"{SECRET_VARIABLE} is required by reach: idempotency keys are keyed hashes under "
            "it, and every replica and restart must make the same key for the same intent "
            "(`reachstore up` keeps one in the data folder)"
        )
    current = raw.encode()
    if len(current) < MIN_SECRET_BYTES:
        raise ConfigError(
            f"{SECRET_VARIABLE} must be at least {MIN_SECRET_BYTES} bytes, got {len(current)}"
        )
    return KeySecrets(current, previous_secrets(env))


def build_key(
    secret: bytes,
    tenant: str,
    entity_id: str,
    action_type: str,
    params: Mapping[str, Any],
    whitelist: Sequence[str],
    at: datetime.datetime,
    window: str,
) -> IdempotencyKey:
    """The key of ``action_type`` on ``entity_id`` for ``tenant`` with these parameters, in
    the ``window`` (one of ``common.windows.WINDOWS``) that ``at`` falls in, made under
    ``secret``."""
    return IdempotencyKey(
        tenant,
        entity_part(secret, tenant, entity_id),
        action_type,
        params_digest(params, whitelist, secret, tenant),
        window_bucket(at, window),
    )


def look_up_keys(
    secrets: KeySecrets,
    tenant: str,
    entity_id: str,
    action_type: str,
    params: Mapping[str, Any],
    whitelist: Sequence[str],
    at: datetime.datetime,
    window: str,
) -> tuple[str, ...]:
    """The other texts an earlier reservation of the same intent may be stored under: its
    key under each previous secret, and its legacy form (``legacy_key``). Looked up at
    reservation, never stored anew."""
    earlier = [
        str(build_key(old, tenant, entity_id, action_type, params, whitelist, at, window))
        for old in secrets.previous
    ]
    return (*earlier, legacy_key(tenant, entity_id, action_type, params, whitelist, at, window))


def legacy_key(
    tenant: str,
    entity_id: str,
    action_type: str,
    params: Mapping[str, Any],
    whitelist: Sequence[str],
    at: datetime.datetime,
    window: str,
) -> str:
    """The key older releases stored for the same intent: the entity percent-encoded in
    clear and a plain SHA-256 digest. Rows holding such keys stay as they are; a
    re-submission of their intent must still find them (a ``none`` window lasts forever).
    Only ever compared with stored keys, never stored or shown."""
    text = canonical_params(params, whitelist)
    parts = (tenant, unicodedata.normalize("NFC", entity_id), action_type)
    return "/".join(
        [
            *(quote(part, safe="") for part in parts),
            hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS],
            window_bucket(at, window),
        ]
    )

"""Canonical JSON: the one text of an audit event that the outbox bounds and stores
(``reachstore_server/audit_client/outbox.py``) and the audit service hashes
(``reachstore_server/audit/chain.py``). Both sides use this function, so neither imports the other.

The text is ``json.dumps(value, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)``. ``json.dumps`` with arguments builds a new encoder for every call,
about half of its cost on an audit event's parameters; the C encoder it ends in is made
here once and called directly, with the same settings (Python builds without it use
``json.dumps``).
"""

from __future__ import annotations

import json
from json import encoder as _encoder
from typing import Any

_make_c_encoder = getattr(_encoder, "c_make_encoder", None)  # typeshed does not list it
_c_encoder = (
    _make_c_encoder(
        None,  # no check for circular references: JSON data holds none
        json.JSONEncoder(ensure_ascii=False).default,
        _encoder.encode_basestring,
        None,  # no indent
        ":",
        ",",
        True,  # sort_keys
        False,  # skipkeys
        True,  # allow_nan
    )
    if _make_c_encoder is not None
    else None
)


def canonical_json(value: Any) -> str:
    if type(value) is str:  # the C encoder takes containers; json.dumps does this too
        return _encoder.encode_basestring(value)
    if _c_encoder is None:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "".join(_c_encoder(value, 0))

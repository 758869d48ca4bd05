"""Opaque page tokens: the sort key of the last item of the previous page.

A token is the caller's to send back, so it is read as input like any other: its key must
be text a database can compare (no NUL, no lone surrogate), and a position must be an
ASCII number an int64 column holds. Anything else is the same INVALID_ARGUMENT as a token
that does not decode at all.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from reachstore_server.common import errors

_RULE = "must be a next_page_token returned by the previous page"
# A chain position: ASCII digits only (str.isdigit() also takes "²" and "٣"), and no more
# of them than a BIGINT holds.
_POSITION = re.compile(r"[0-9]{1,18}")


def encode_token(last_key: str) -> str:
    raw = json.dumps({"after": last_key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, spelled as a JSON escape
        return False
    return True


def decode_token(token: str, field: str = "page_token") -> str | None:
    """The key to continue after, or None for the first page."""
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))["after"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
        raise errors.invalid(field, _RULE) from None
    if not isinstance(value, str) or not _storable(value):
        raise errors.invalid(field, _RULE)
    return value


def decode_position_token(token: str, field: str = "page_token") -> int:
    """The position to continue after, for listings keyed by a number (0: the first page)."""
    after = decode_token(token, field)
    if after is None:
        return 0
    if not _POSITION.fullmatch(after):
        raise errors.invalid(field, _RULE)
    return int(after)

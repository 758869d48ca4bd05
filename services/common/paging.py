"""Opaque page tokens: the sort key of the last item of the previous page."""

from __future__ import annotations

import base64
import binascii
import json

from services.common import errors


def encode_token(last_key: str) -> str:
    raw = json.dumps({"after": last_key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, field: str = "page_token") -> str | None:
    """The key to continue after, or None for the first page."""
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))["after"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise errors.invalid(
            field, "must be a next_page_token returned by the previous page"
        ) from None
    if not isinstance(value, str):
        raise errors.invalid(field, "must be a next_page_token returned by the previous page")
    return value

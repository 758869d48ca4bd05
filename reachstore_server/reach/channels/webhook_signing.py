"""Standard Webhooks signatures for outgoing webhooks (https://www.standardwebhooks.com).

Every delivery carries three headers, so that a receiver can tell that it came from us
and has not been changed on the way:

- ``webhook-id``: the action's idempotency key. It is the same for every attempt of one
  action, so a receiver may also drop repeats by it;
- ``webhook-timestamp``: integer seconds since the epoch when this attempt is sent. Each
  attempt is signed anew, so a retry an hour later is not refused as a replay (the
  reference libraries accept five minutes either side of their clock);
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`` under
  each secret in use, separated by a space: the current one first and, during a rotation,
  the previous one, so that a receiver holding either secret verifies.

The body signed is the exact bytes sent. Secrets are in the spec's form: ``whsec_`` and the
standard base64 (padding optional) of 24 to 64 random bytes. A raw secret is refused
rather than taken as bytes: a receiver's library given the same text would base64-decode
it, and would fail every delivery with a key nobody can see is different.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac

__all__ = [
    "MAX_KEY_BYTES",
    "MIN_KEY_BYTES",
    "SECRET_PREFIX",
    "SECRET_RULE",
    "WebhookSigner",
    "decode_secret",
    "signature",
]

SECRET_PREFIX = "whsec_"
MIN_KEY_BYTES = 24  # the spec's lower bound (192 bits)
MAX_KEY_BYTES = 64  # and its upper one
SECRET_RULE = (
    f"must hold a Standard Webhooks secret: {SECRET_PREFIX} followed by the base64 of "
    f"{MIN_KEY_BYTES} to {MAX_KEY_BYTES} random bytes"
)


def decode_secret(text: str) -> bytes:
    """The key inside a ``whsec_...`` secret; ValueError saying what is wrong (never
    quoting the secret)."""
    if not text.startswith(SECRET_PREFIX):
        raise ValueError(f"does not start with {SECRET_PREFIX}")
    encoded = text[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"is not base64 after {SECRET_PREFIX}") from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise ValueError(f"holds {len(key)} bytes, not {MIN_KEY_BYTES} to {MAX_KEY_BYTES}")
    return key


def signature(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of a delivery under ``key``."""
    signed = b"%s.%d.%s" % (webhook_id.encode(), timestamp, body)
    mac = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


@dataclasses.dataclass(frozen=True)
class WebhookSigner:
    """Signs deliveries with the current key and, during a rotation, the previous one."""

    current: bytes = dataclasses.field(repr=False)
    previous: bytes | None = dataclasses.field(default=None, repr=False)

    def headers(self, webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        """The three Standard Webhooks headers for ``body`` sent at ``timestamp``."""
        keys = [self.current] if self.previous is None else [self.current, self.previous]
        return {
            "webhook-id": webhook_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": " ".join(
                signature(key, webhook_id, timestamp, body) for key in keys
            ),
        }

"""Standard Webhooks signatures: the signed text, the secret's form, rotation headers."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from reachstore_server.reach.channels import webhook_signing
from reachstore_server.reach.channels.webhook_signing import WebhookSigner, decode_secret, signature

KEY = bytes(range(32))
SECRET = "whsec_" + base64.b64encode(KEY).decode()
OLD_KEY = b"an older key of 24 bytes"
BODY = '{"ticket":"T-7","note":"ünïcode"}'.encode()
ID = "acme/e:0123456789abcdef0123456789abcdef/ticket.assign/d1g3st/day:20240517"


def expected(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def test_the_module_exports_what_the_channel_uses() -> None:
    assert set(webhook_signing.__all__) == {
        "MAX_KEY_BYTES",
        "MIN_KEY_BYTES",
        "SECRET_PREFIX",
        "SECRET_RULE",
        "WebhookSigner",
        "decode_secret",
        "signature",
    }


def test_the_signature_is_hmac_sha256_of_id_timestamp_and_body() -> None:
    assert signature(KEY, ID, 1715900000, BODY) == expected(KEY, ID, 1715900000, BODY)


def test_the_specs_published_vector_is_reproduced() -> None:
    # From the Standard Webhooks specification's test vectors.
    key = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")

    got = signature(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')

    assert got == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_one_byte_more_in_the_body_changes_the_signature() -> None:
    assert signature(KEY, ID, 1, BODY) != signature(KEY, ID, 1, BODY + b" ")
    assert signature(KEY, ID, 1, BODY) != signature(KEY, ID, 2, BODY)
    assert signature(KEY, ID, 1, BODY) != signature(KEY, ID + "x", 1, BODY)


def test_a_signer_sends_the_three_headers_with_one_signature() -> None:
    headers = WebhookSigner(KEY).headers(ID, 1715900000, BODY)

    assert headers == {
        "webhook-id": ID,
        "webhook-timestamp": "1715900000",
        "webhook-signature": expected(KEY, ID, 1715900000, BODY),
    }


def test_during_a_rotation_both_signatures_are_sent_current_first() -> None:
    headers = WebhookSigner(KEY, OLD_KEY).headers(ID, 1715900000, BODY)

    assert headers["webhook-signature"].split(" ") == [
        expected(KEY, ID, 1715900000, BODY),
        expected(OLD_KEY, ID, 1715900000, BODY),
    ]


def test_keys_stay_out_of_the_signers_repr() -> None:
    assert repr(WebhookSigner(KEY, OLD_KEY)) == "WebhookSigner()"


def test_a_secret_in_the_specs_form_decodes_padded_or_not() -> None:
    assert decode_secret(SECRET) == KEY
    assert decode_secret(SECRET.rstrip("=")) == KEY
    assert len(decode_secret("whsec_" + base64.b64encode(b"k" * 64).decode())) == 64


@pytest.mark.parametrize(
    ("secret", "reason"),
    [
        (base64.b64encode(KEY).decode(), "does not start with whsec_"),
        ("correct horse battery staple and more", "does not start with whsec_"),
        ("whsec_not*base64!", "is not base64 after whsec_"),
        ("whsec_" + base64.urlsafe_b64encode(b"\xfb" * 30).decode(), "is not base64"),
        ("whsec_" + base64.b64encode(b"k" * 23).decode(), "holds 23 bytes, not 24 to 64"),
        ("whsec_" + base64.b64encode(b"k" * 65).decode(), "holds 65 bytes, not 24 to 64"),
        ("whsec_", "holds 0 bytes"),
    ],
)
def test_a_secret_not_in_the_specs_form_is_refused_without_quoting_it(
    secret: str, reason: str
) -> None:
    with pytest.raises(ValueError) as caught:
        decode_secret(secret)

    assert str(caught.value).startswith(reason)
    quoted = secret.removeprefix("whsec_")
    assert not quoted or quoted not in str(caught.value)

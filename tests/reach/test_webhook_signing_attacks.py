"""Attacks on signed webhooks from the outside: real receivers on 127.0.0.1 verifying with
the ``standardwebhooks`` package, channels built from settings tables as ``reach`` builds
them, and secrets looked for in every message an operator or caller can read."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import standardwebhooks

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach.channels import build_channel
from reachstore_server.reach.channels.base import Answer, ChannelError, Outgoing, Status
from reachstore_server.reach.channels.webhook import WebhookChannel
from reachstore_server.reach.idempotency import build_key

from .conftest import make_action
from .peers import VerifyingReceiver

SECRET = "whsec_" + base64.b64encode(b"attack: the secret, 32 bytes...").decode()
WHERE = "channels.hook.webhook"


def _submit(channel: WebhookChannel, action: Outgoing) -> Answer | ChannelError:
    async def main() -> Answer | ChannelError:
        try:
            return await channel.submit(action)
        except ChannelError as exc:
            return exc
        finally:
            await channel.close()

    return asyncio.run(main())


@pytest.fixture
def verifying() -> Iterator[VerifyingReceiver]:
    with VerifyingReceiver(SECRET) as receiver:
        yield receiver
    assert not receiver.errors, receiver.errors


def _name_shaped_secret() -> str:
    """A secret in the spec's form (unpadded) that is also a valid variable name: about
    one in four random secrets is, as it holds no '+' or '/'."""
    while True:
        text = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode().rstrip("=")
        if "+" not in text and "/" not in text:
            return text


def test_a_secret_pasted_as_the_variable_name_is_not_echoed_in_the_start_error() -> None:
    """``signing_secret_env = "whsec_..."`` (the secret itself where its variable's name
    belongs) is the commonest slip. The start error goes to the terminal, the service log
    and the orchestrator's events: it must not carry the secret."""
    pasted = _name_shaped_secret()

    with pytest.raises(Exception) as raised:
        build_channel(
            "webhook", {"url": "http://127.0.0.1:9/hook", "signing_secret_env": pasted}, WHERE, {}
        )

    message = str(raised.value)
    assert message.startswith(f"{WHERE}.signing_secret_env:"), message
    assert pasted not in message, message
    assert pasted[len("whsec_") :][:16] not in message, message


def test_a_bearer_token_with_a_trailing_line_break_never_shows_in_an_error(
    verifying: VerifyingReceiver,
) -> None:
    """A token read from a file or a Kubernetes secret often ends in a newline. Such a
    header cannot be sent: were the channel to start, every send would fail with the HTTP
    library's message, which quotes the header, stored on the action and returned by
    GetAction. The channel refuses the value at start, naming the setting, not the value."""
    token = "tok-" + secrets.token_hex(16)
    env = {"HOOK_TOKEN": token + "\n", "HOOK_SIGNING": SECRET}
    table = {"url": verifying.url, "token_env": "HOOK_TOKEN", "signing_secret_env": "HOOK_SIGNING"}

    with pytest.raises(ConfigError) as refused:
        build_channel("webhook", table, WHERE, env)

    assert f"{WHERE}.token_env" in str(refused.value) and "HOOK_TOKEN" in str(refused.value)
    assert token not in str(refused.value), str(refused.value)
    assert verifying.records == []


@pytest.mark.parametrize(
    "value",
    [
        SECRET + "\n",  # a file's trailing newline: the reference library would drop it
        " " + SECRET,
        "whsec_" + base64.urlsafe_b64encode(b"\xfb\xff" * 16).decode(),  # '-', '_' dropped there
        "WHSEC_" + SECRET[len("whsec_") :],
        "whsec_" + "é" * 40,
    ],
    ids=["newline", "space", "urlsafe", "upper-prefix", "non-ascii"],
)
def test_a_value_the_receivers_library_would_read_differently_stops_the_start(
    value: str,
) -> None:
    """The reference library base64-decodes leniently (skipping what is not in the
    alphabet), so a value it reads as some other key must be refused at start, naming the
    field and the variable, never the value."""
    table = {"url": "http://127.0.0.1:9/hook", "signing_secret_env": "HOOK_SIGNING"}

    with pytest.raises(Exception) as raised:
        build_channel("webhook", table, WHERE, {"HOOK_SIGNING": value})

    message = str(raised.value)
    assert message.startswith(f"{WHERE}.signing_secret_env: environment variable HOOK_SIGNING")
    assert value.strip() not in message and value.strip()[6:20] not in message


def test_large_non_ascii_bodies_verify_over_the_wire(verifying: VerifyingReceiver) -> None:
    """The signature is over the bytes sent: multi-byte text, escapes, a body near the
    limit and characters JSON writers disagree on (U+2028, '/', NFD) all verify."""
    params: dict[str, Any] = {
        "note": "ünïcode ✓ \u2028 \u2029 </script> e\u0301 \U0001f600",
        "quote": 'a "quoted" \\ back\\slash',
        "blob": "ж" * 20000,  # 40 000 bytes of UTF-8
    }
    table = {"url": verifying.url, "signing_secret_env": "HOOK_SIGNING", "read_timeout_s": 2}
    channel = build_channel("webhook", table, WHERE, {"HOOK_SIGNING": SECRET})
    assert isinstance(channel, WebhookChannel)

    answer = _submit(channel, make_action(params))

    assert isinstance(answer, Answer) and answer.status is Status.SUCCESS, answer
    [delivery] = verifying.records
    assert standardwebhooks.Webhook(SECRET).verify(delivery.raw, delivery.headers) == params


def test_a_real_actions_webhook_id_holds_no_full_stop() -> None:
    """The spec: the message id must not be user controlled "or at the very least not be
    allowed to include any '.'", as '.' delimits id, timestamp and body in what is
    signed. The id is the action's idempotency key, built from tenant and action type."""
    at = dt.datetime(2026, 11, 30, 5, tzinfo=dt.UTC)
    for window in ("none", "hour", "day", "week"):
        key = str(
            build_key(
                b"k" * 32, "acme-co_1", "order.1", "notify_v2", {"a.b": 1.5}, ["a.b"], at, window
            )
        )
        assert "." not in key, key

"""Channel settings: every mistake stops the start-up with a message naming the key."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.common.tls import TlsFiles
from reachstore_server.reach.channels import (
    EmailChannel,
    EmailOptions,
    GrpcCallChannel,
    GrpcOptions,
    WebhookChannel,
    WebhookOptions,
    build_channel,
)
from reachstore_server.reach.channels.webhook_signing import WebhookSigner

WHERE = "channels.out"
NEW_KEY, OLD_KEY = b"n" * 32, b"o" * 24
ENV = {
    "TOKEN": "s3cret",
    "USER": "reach",
    "PASSWORD": "pw",
    "EMPTY": "",
    "SIGNING": "whsec_" + base64.b64encode(NEW_KEY).decode(),
    "SIGNING_OLD": "whsec_" + base64.b64encode(OLD_KEY).decode(),
    "SIGNING_RAW": "a raw secret of forty characters or more",
    "SIGNING_SHORT": "whsec_" + base64.b64encode(b"k" * 16).decode(),
    "TOKEN_NEWLINE": "s3cret-from-a-file\n",
    "TOKEN_SPACED": " s3cret-pasted",
    "TOKEN_ACCENT": "s3crét",
}
HOOK = {"url": "https://hooks.example.com/in"}
MAIL = {"host": "smtp.example.com", "sender": "reach@example.com"}
RPC = {"target": "tickets.internal:50051", "method": "/peer.v1.Tickets/Assign"}


def error(kind: str, table: Any, env: dict[str, str] = ENV) -> str:
    with pytest.raises(ConfigError) as caught:
        build_channel(kind, table, WHERE, env)
    return str(caught.value)


def test_each_kind_builds_its_channel_with_the_defaults() -> None:
    hook = build_channel("webhook", HOOK, WHERE, {})
    mail = build_channel("email", MAIL, WHERE, {})
    rpc = build_channel("grpc", RPC, WHERE, {})

    assert isinstance(hook, WebhookChannel) and isinstance(mail, EmailChannel)
    assert isinstance(rpc, GrpcCallChannel)
    assert hook.options == WebhookOptions(
        url=HOOK["url"],
        token=None,
        idempotency_header=True,
        status_url=None,
        cancel_url=None,
        connect_timeout_s=3.0,
        read_timeout_s=8.0,
        max_body_bytes=65536,
    )
    assert mail.options == EmailOptions(
        host="smtp.example.com",
        sender="reach@example.com",
        port=25,
        starttls=False,
        timeout_s=8.0,
        message_id_domain="reachstore.local",
    )
    assert rpc.options == GrpcOptions(
        target=RPC["target"],
        method=RPC["method"],
        timeout_s=8.0,
        idempotency_metadata=False,
        tls=TlsFiles(system_trust=True),  # TLS unless told otherwise, the system's trust
    )


def test_every_key_is_read() -> None:
    hook = WebhookOptions.from_table(
        {
            **HOOK,
            "token_env": "TOKEN",
            "idempotency_header": False,
            "status_url": "https://hooks.example.com/t/{external_id}",
            "cancel_url": "https://hooks.example.com/t/{external_id}/cancel",
            "connect_timeout_s": 1,
            "read_timeout_s": 2.5,
            "max_body_bytes": 1024,
            "signing_secret_env": "SIGNING",
            "signing_secret_env_previous": "SIGNING_OLD",
        },
        WHERE,
        ENV,
    )
    mail = EmailOptions.from_table(
        {
            **MAIL,
            "port": 587,
            "starttls": True,
            "username_env": "USER",
            "password_env": "PASSWORD",
            "timeout_s": 5,
            "message_id_domain": "mail.acme.test",
        },
        WHERE,
        ENV,
    )
    rpc = GrpcOptions.from_table(
        {**RPC, "timeout_s": 1.5, "token_env": "TOKEN", "idempotency_metadata": True}, WHERE, ENV
    )

    assert (hook.token, hook.connect_timeout_s, hook.max_body_bytes) == ("s3cret", 1.0, 1024)
    assert hook.signer == WebhookSigner(NEW_KEY, OLD_KEY)
    assert (mail.username, mail.password, mail.port, mail.starttls) == ("reach", "pw", 587, True)
    assert (rpc.token, rpc.timeout_s, rpc.idempotency_metadata) == ("s3cret", 1.5, True)


def test_secrets_stay_out_of_reprs() -> None:
    hook = WebhookOptions.from_table(
        {**HOOK, "token_env": "TOKEN", "signing_secret_env": "SIGNING"}, WHERE, ENV
    )
    mail = EmailOptions.from_table(
        {**MAIL, "username_env": "USER", "password_env": "PASSWORD"}, WHERE, ENV
    )

    assert "s3cret" not in repr(hook)
    assert ENV["SIGNING"].removeprefix("whsec_") not in repr(hook) and "nnnn" not in repr(hook)
    assert "pw'" not in repr(mail) and "reach'" not in repr(mail)


@pytest.mark.parametrize(
    ("kind", "table", "expected"),
    [
        ("webhook", {**HOOK, "read_timout_s": 2}, f"{WHERE}.read_timout_s: unknown key"),
        ("email", {**MAIL, "tls": True}, f"{WHERE}.tls: unknown key"),
        ("grpc", {**RPC, "deadline_s": 1}, f"{WHERE}.deadline_s: unknown key"),
        ("webhook", {}, f"{WHERE}.url: is required"),
        ("webhook", {"url": "ftp://files.example.com/x"}, f"{WHERE}.url: must be an http"),
        ("webhook", {"url": "not a url"}, f"{WHERE}.url:"),
        ("webhook", {**HOOK, "token_env": "UNSET"}, "token_env: environment variable UNSET is not"),
        (
            "webhook",
            {**HOOK, "url": "http://hooks.example.com/t", "token_env": "TOKEN"},
            f"{WHERE}.url: must be https:// with token_env set",
        ),
        (
            "webhook",
            {**HOOK, "status_url": "http://10.0.0.5/t/{external_id}", "token_env": "TOKEN"},
            f"{WHERE}.status_url: must be https:// with token_env set",
        ),
        ("webhook", {**HOOK, "token_env": "EMPTY"}, "token_env: environment variable EMPTY is emp"),
        ("webhook", {**HOOK, "token_env": "s3cret value"}, "token_env: must name an environment"),
        ("webhook", {**HOOK, "status_url": HOOK["url"]}, "status_url: must contain {external_id}"),
        ("webhook", {**HOOK, "cancel_url": "/t/{external_id}"}, "cancel_url: must be an http"),
        ("webhook", {**HOOK, "idempotency_header": "yes"}, "idempotency_header: must be true or"),
        ("webhook", {**HOOK, "connect_timeout_s": "3"}, "connect_timeout_s: must be a number"),
        ("webhook", {**HOOK, "read_timeout_s": 0}, "read_timeout_s: must be a positive"),
        ("webhook", {**HOOK, "read_timeout_s": True}, "read_timeout_s: must be a number"),
        ("webhook", {**HOOK, "max_body_bytes": 1.5}, "max_body_bytes: must be an integer"),
        (
            "webhook",
            {**HOOK, "signing_secret_env": "UNSET"},
            f"{WHERE}.signing_secret_env: environment variable UNSET is not set",
        ),
        (
            "webhook",
            {**HOOK, "signing_secret_env": "SIGNING_RAW"},
            f"{WHERE}.signing_secret_env: environment variable SIGNING_RAW must hold a Standard "
            "Webhooks secret: whsec_ followed by the base64 of 24 to 64 random bytes; its value "
            "does not start with whsec_",
        ),
        (
            "webhook",
            {
                **HOOK,
                "signing_secret_env": "SIGNING",
                "signing_secret_env_previous": "SIGNING_SHORT",
            },
            f"{WHERE}.signing_secret_env_previous: environment variable SIGNING_SHORT must hold",
        ),
        (
            "webhook",
            {**HOOK, "signing_secret_env": "SIGNING", "signing_secret_env_previous": "EMPTY"},
            f"{WHERE}.signing_secret_env_previous: environment variable EMPTY is empty",
        ),
        (
            "webhook",
            {**HOOK, "signing_secret_env_previous": "SIGNING_OLD"},
            f"{WHERE}.signing_secret_env_previous: is set without signing_secret_env",
        ),
        (
            "webhook",
            {**HOOK, "signing_secret_env": "SIGNING", "signing_secret_env_previous": "SIGNING"},
            f"{WHERE}.signing_secret_env_previous: holds the same secret as signing_secret_env",
        ),
        ("webhook", {**HOOK, "signing_secret": "whsec_x"}, f"{WHERE}.signing_secret: unknown key"),
        ("email", {"sender": "a@example.com"}, f"{WHERE}.host: is required"),
        ("email", {"host": "smtp.example.com"}, f"{WHERE}.sender: is required"),
        ("email", {**MAIL, "sender": "Reach <r@example.com>"}, "sender: must be a plain e-mail"),
        ("email", {**MAIL, "port": 70000}, "port: must be between 1 and 65535"),
        ("email", {**MAIL, "username_env": "USER"}, f"{WHERE}.password_env: username_env and"),
        ("email", {**MAIL, "password_env": "PASSWORD"}, f"{WHERE}.username_env: username_env a"),
        ("email", {**MAIL, "username_env": "USER", "password_env": "NOPE"}, "NOPE is not set"),
        ("email", {**MAIL, "message_id_domain": "a b"}, "message_id_domain: must be a domain"),
        ("email", {**MAIL, "tls_ca_file": "/no/such/ca.pem"}, "tls_ca_file: no such file"),
        ("grpc", {"method": RPC["method"]}, f"{WHERE}.target: is required"),
        ("grpc", {**RPC, "target": "tickets.internal"}, "target: must be host:port"),
        ("grpc", {**RPC, "target": "http://t:1"}, "target: must be host:port"),
        ("grpc", {**RPC, "method": "peer.v1.Tickets.Assign"}, "method: must be a full method"),
        ("grpc", {**RPC, "descriptor_set": "/no/such.binpb"}, "descriptor_set: [Errno 2]"),
        ("grpc", {**RPC, "token_env": "UNSET"}, "token_env: environment variable UNSET is not"),
        ("webhook", {**HOOK, "token_env": "TOKEN_NEWLINE"}, "cannot be sent in a header"),
        ("webhook", {**HOOK, "token_env": "TOKEN_SPACED"}, "cannot be sent in a header"),
        ("webhook", {**HOOK, "token_env": "TOKEN_ACCENT"}, "cannot be sent in a header"),
        ("grpc", {**RPC, "token_env": "TOKEN_NEWLINE"}, "cannot be sent in a header"),
        ("grpc", {**RPC, "token_env": "TOKEN_ACCENT"}, "cannot be sent in a header"),
    ],
)
def test_mistakes_name_the_key(kind: str, table: dict[str, Any], expected: str) -> None:
    assert expected in error(kind, table)


def test_a_refused_token_is_never_quoted() -> None:
    for name in ("TOKEN_NEWLINE", "TOKEN_SPACED", "TOKEN_ACCENT"):
        for kind, table in (("webhook", HOOK), ("grpc", RPC)):
            message = error(kind, {**table, "token_env": name})
            assert ENV[name].strip() not in message and name in message, message


def test_a_descriptor_set_that_is_not_one_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.binpb"
    junk.write_bytes(b"\xff\xff\xff not a descriptor set")

    assert f"{WHERE}.descriptor_set:" in error("grpc", {**RPC, "descriptor_set": str(junk)})


def test_an_unknown_kind_or_a_non_table_names_where() -> None:
    assert error("carrier_pigeon", {}) == (
        f"{WHERE}: unknown channel kind 'carrier_pigeon' (known: webhook, email, grpc)"
    )
    assert error("webhook", "https://hooks.example.com") == f"{WHERE}: must be a table, not str"


def test_the_unknown_key_message_lists_the_known_ones() -> None:
    message = error("webhook", {**HOOK, "retries": 3})

    assert "known keys:" in message and "read_timeout_s" in message and "token_env" in message


def test_a_signing_secret_never_shows_in_the_error_about_it() -> None:
    for name in ("SIGNING_RAW", "SIGNING_SHORT"):
        message = error("webhook", {**HOOK, "signing_secret_env": name})

        assert ENV[name] not in message and ENV[name].removeprefix("whsec_") not in message


def test_a_webhook_without_a_signing_secret_is_unsigned_and_warned_about_by_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="reachstore_server.reach.channels.webhook"):
        hook = build_channel("webhook", HOOK, WHERE, ENV)
        signed = build_channel("webhook", {**HOOK, "signing_secret_env": "SIGNING"}, "x.y", ENV)

    assert isinstance(hook, WebhookChannel) and hook.options.signer is None
    assert isinstance(signed, WebhookChannel) and signed.options.signer is not None
    [record] = caplog.records
    assert record.getMessage().startswith(f"{WHERE}: no signing_secret_env, so deliveries are")


def test_a_signed_webhook_gives_the_key_to_the_receiver_even_without_the_header() -> None:
    table = {**HOOK, "idempotency_header": False}

    unsigned = build_channel("webhook", table, WHERE, ENV)
    signed = build_channel("webhook", {**table, "signing_secret_env": "SIGNING"}, WHERE, ENV)

    # As webhook-id: a receiver may de-duplicate by it, so receiver_deduplicates holds.
    assert signed.sends_idempotency_key and not unsigned.sends_idempotency_key

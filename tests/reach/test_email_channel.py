"""The e-mail channel against a real SMTP relay (aiosmtpd) on 127.0.0.1."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach.channels import build_channel
from reachstore_server.reach.channels.base import (
    Answer,
    ChannelError,
    InvalidParams,
    Outgoing,
    Status,
)
from reachstore_server.reach.channels.email import EmailChannel, message_id

from .conftest import make_action
from .peers import SmtpReceiver

MAIL = {"to": "ops@example.com", "subject": "Ticket T-1 assigned", "body": "Hello, ünïcode.\n"}


def channel_for(port: int, env: dict[str, str] | None = None, **settings: Any) -> EmailChannel:
    table = {"host": "127.0.0.1", "port": port, "sender": "reach@example.com", **settings}
    channel = build_channel("email", table, "channels.mail", env or {})
    assert isinstance(channel, EmailChannel)
    return channel


def submit(channel: EmailChannel, action: Outgoing) -> Answer:
    return asyncio.run(channel.submit(action))


def submit_error(channel: EmailChannel, action: Outgoing) -> ChannelError:
    with pytest.raises(ChannelError) as caught:
        submit(channel, action)
    return caught.value


def test_a_message_is_delivered_with_a_message_id_derived_from_the_key(
    smtp_receiver: SmtpReceiver,
) -> None:
    channel = channel_for(smtp_receiver.port)
    action = make_action(MAIL)

    answer = submit(channel, action)

    expected_id = message_id(action.idempotency_key, "reachstore.local")
    assert answer.status is Status.SUCCESS
    assert answer.external_id == expected_id
    assert answer.status_code == 250 and "queued" in answer.snippet
    [mail] = smtp_receiver.messages
    assert mail.mail_from == "reach@example.com"
    assert mail.rcpt_tos == ("ops@example.com",)
    assert mail.subject == "Ticket T-1 assigned"
    assert mail.message_id == expected_id
    assert mail.message["X-Reachstore-Action-Id"] == action.action_id
    assert mail.text == "Hello, ünïcode.\n"
    assert not (channel.can_poll or channel.can_cancel)
    assert channel.sends_idempotency_key  # in the Message-ID


def test_the_same_key_gives_the_same_message_id(smtp_receiver: SmtpReceiver) -> None:
    channel = channel_for(smtp_receiver.port, message_id_domain="mail.acme.test")
    first = make_action(MAIL)

    submit(channel, first)
    submit(channel, make_action(MAIL, idempotency_key=first.idempotency_key))
    submit(channel, make_action(MAIL))

    ids = [m.message_id for m in smtp_receiver.messages]
    assert ids[0] == ids[1] != ids[2]
    assert ids[0].endswith("@mail.acme.test>") and len(ids[0]) == len("<@mail.acme.test>") + 32


def test_several_recipients(smtp_receiver: SmtpReceiver) -> None:
    to = ["a@example.com", "b@example.org"]

    submit(channel_for(smtp_receiver.port), make_action({**MAIL, "to": to}))

    [mail] = smtp_receiver.messages
    assert mail.rcpt_tos == tuple(to)
    assert mail.message["To"] == "a@example.com, b@example.org"


@pytest.mark.parametrize(
    ("params", "field", "rule"),
    [
        ({**MAIL, "subject": "Hi\r\nBcc: all@example.com"}, "subject", "header injection"),
        ({**MAIL, "subject": "Hi\nthere"}, "subject", "header injection"),
        ({**MAIL, "subject": ""}, "subject", "1 to 998"),
        ({**MAIL, "subject": "x" * 999}, "subject", "1 to 998"),
        ({**MAIL, "to": []}, "to", "1 to 50"),
        ({**MAIL, "to": [f"u{i}@example.com" for i in range(51)]}, "to", "1 to 50"),
        ({**MAIL, "to": "ops@example.com\r\nRCPT TO:<x@y.z>"}, "to", "address"),
        ({**MAIL, "to": ["ok@example.com", "Ops <ops@example.com>"]}, "to.1", "address"),
        ({**MAIL, "body": "x" * (256 * 1024 + 1)}, "body", "256 KiB"),
        ({**MAIL, "body": 42}, "body", "text"),
        ({**MAIL, "cc": "x@example.com"}, "cc", "unknown field"),
        ({"subject": "s", "body": "b"}, "to", "address"),
    ],
)
def test_validate_names_the_field_and_rule(params: dict[str, Any], field: str, rule: str) -> None:
    channel = channel_for(25)

    with pytest.raises(InvalidParams) as caught:
        channel.validate(make_action(params))

    assert caught.value.field == field
    assert rule in caught.value.rule


def test_submit_refuses_invalid_params_without_connecting(unreachable_port: int) -> None:
    error = submit_error(channel_for(unreachable_port), make_action({**MAIL, "subject": "a\nb"}))

    assert (error.category, error.code, error.business) == ("permanent", "INVALID_PARAMS", True)


def test_a_refused_recipient_is_permanent_and_nothing_is_sent(
    smtp_receiver: SmtpReceiver,
) -> None:
    smtp_receiver.refuse_rcpt(550, "5.1.1 No such user", address="gone@example.com")
    action = make_action({**MAIL, "to": ["ops@example.com", "gone@example.com"]})

    error = submit_error(channel_for(smtp_receiver.port), action)

    assert (error.category, error.code, error.business) == ("permanent", "RECIPIENT_REFUSED", True)
    assert error.status_code == 550 and "No such user" in error.snippet
    assert error.ambiguous is False
    assert smtp_receiver.messages == []  # not even to the accepted recipient


def test_a_deferred_recipient_is_transient(smtp_receiver: SmtpReceiver) -> None:
    smtp_receiver.refuse_rcpt(450, "4.2.0 Greylisted, try again")

    error = submit_error(channel_for(smtp_receiver.port), make_action(MAIL))

    assert (error.category, error.code, error.status_code) == (
        "transient",
        "SMTP_TEMPORARY_FAILURE",
        450,
    )


@pytest.mark.parametrize(
    ("code", "category", "expected"),
    [(554, "permanent", "SMTP_REJECTED"), (451, "transient", "SMTP_TEMPORARY_FAILURE")],
)
def test_a_refused_message_is_classified_by_code(
    smtp_receiver: SmtpReceiver, code: int, category: str, expected: str
) -> None:
    smtp_receiver.refuse_data(code, "refused by policy")

    error = submit_error(channel_for(smtp_receiver.port), make_action(MAIL))

    assert (error.category, error.code, error.status_code) == (category, expected, code)
    assert error.business is False and error.ambiguous is False


def test_a_relay_that_is_down_is_unreachable_and_not_ambiguous(unreachable_port: int) -> None:
    error = submit_error(channel_for(unreachable_port), make_action(MAIL))

    assert (error.category, error.code, error.ambiguous) == ("transient", "SMTP_UNREACHABLE", False)


def test_no_reply_after_the_message_was_sent_is_an_ambiguous_timeout(
    smtp_receiver: SmtpReceiver,
) -> None:
    smtp_receiver.delay_data(1.0)

    error = submit_error(channel_for(smtp_receiver.port, timeout_s=0.3), make_action(MAIL))

    assert (error.category, error.code, error.ambiguous) == ("timeout", "SMTP_TIMEOUT", True)
    assert len(smtp_receiver.messages) == 1  # the relay has it: hence ambiguous
    assert error.duration_ms >= 250


def test_a_connection_lost_after_the_message_was_sent_is_ambiguous(
    smtp_receiver: SmtpReceiver,
) -> None:
    smtp_receiver.drop_data()

    error = submit_error(channel_for(smtp_receiver.port), make_action(MAIL))

    assert (error.category, error.code, error.ambiguous) == (
        "transient",
        "SMTP_CONNECTION_LOST",
        True,
    )


def test_starttls_against_a_relay_without_it_is_a_clear_error(
    smtp_receiver: SmtpReceiver,
) -> None:
    error = submit_error(channel_for(smtp_receiver.port, starttls=True), make_action(MAIL))

    assert (error.category, error.code) == ("permanent", "SMTP_STARTTLS_UNSUPPORTED")
    assert smtp_receiver.messages == []  # no fall-back to plain text


def test_starttls_with_a_trusted_certificate(tls_cert: tuple[Path, Path]) -> None:
    with SmtpReceiver(tls=tls_cert) as receiver:
        trusted = channel_for(receiver.port, starttls=True, tls_ca_file=str(tls_cert[0]))
        answer = submit(trusted, make_action(MAIL))
        error = submit_error(channel_for(receiver.port, starttls=True), make_action(MAIL))

    assert answer.status is Status.SUCCESS and len(receiver.messages) == 1
    assert (error.category, error.code) == ("permanent", "SMTP_TLS_FAILED")
    assert "certificate" in error.message.lower()


def test_login_with_credentials_from_the_environment(tls_cert: tuple[Path, Path]) -> None:
    env = {"SMTP_USER": "reach", "SMTP_PASSWORD": "s3cret", "WRONG": "nope"}
    ca = str(tls_cert[0])
    with SmtpReceiver(login=("reach", "s3cret"), tls=tls_cert) as receiver:
        # No starttls setting: with credentials it is on by default.
        good = channel_for(
            receiver.port,
            env,
            username_env="SMTP_USER",
            password_env="SMTP_PASSWORD",
            tls_ca_file=ca,
        )
        bad = channel_for(
            receiver.port, env, username_env="SMTP_USER", password_env="WRONG", tls_ca_file=ca
        )
        answer = submit(good, make_action(MAIL))
        error = submit_error(bad, make_action(MAIL))

    assert answer.status is Status.SUCCESS and len(receiver.messages) == 1
    assert (error.category, error.code, error.status_code) == ("auth", "SMTP_AUTH_FAILED", 535)
    # smtplib tries each mechanism the relay offers before giving up.
    first, *rest = [ok for _, ok in receiver.auth_attempts]
    assert first is True and rest and not any(rest)


def test_login_against_a_relay_without_auth_is_an_auth_error(tls_cert: tuple[Path, Path]) -> None:
    env = {"U": "reach", "P": "pw"}
    with SmtpReceiver(tls=tls_cert) as receiver:
        channel = channel_for(
            receiver.port, env, username_env="U", password_env="P", tls_ca_file=str(tls_cert[0])
        )
        error = submit_error(channel, make_action(MAIL))

    assert (error.category, error.code) == ("auth", "SMTP_AUTH_FAILED")


def test_poll_and_cancel_cannot_help() -> None:
    channel = channel_for(25)
    action = make_action(MAIL)

    answer = asyncio.run(channel.poll(action, "<x@y>"))

    assert (answer.status, answer.detail) == (Status.UNKNOWN, "SMTP has no status look-up")
    assert asyncio.run(channel.cancel(action, "<x@y>")) is False


def test_credentials_never_go_without_starttls(smtp_receiver: SmtpReceiver) -> None:
    """A relay that offers no STARTTLS gets no password: the channel stops before AUTH,
    and a setting that asks for login in clear is refused at start."""
    env = {"U": "reach", "P": "pw"}
    error = submit_error(
        channel_for(smtp_receiver.port, env, username_env="U", password_env="P"), make_action(MAIL)
    )
    assert (error.category, error.code) == ("permanent", "SMTP_STARTTLS_UNSUPPORTED")
    assert smtp_receiver.auth_attempts == [] and smtp_receiver.messages == []
    with pytest.raises(ConfigError, match=r"channels\.mail\.starttls: must be true"):
        channel_for(smtp_receiver.port, env, username_env="U", password_env="P", starttls=False)

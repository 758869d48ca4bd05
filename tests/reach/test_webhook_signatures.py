"""Signed webhooks against real receivers on 127.0.0.1 that verify each delivery with the
``standardwebhooks`` package, as a user's receiver would."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import standardwebhooks

from reachstore_server.reach.channels import build_channel
from reachstore_server.reach.channels.base import Answer, ChannelError, Outgoing, Status
from reachstore_server.reach.channels.webhook import WebhookChannel

from .conftest import make_action
from .peers import VerifyingReceiver

NEW = "whsec_" + base64.b64encode(b"the new secret, 32 bytes long..").decode()
OLD = "whsec_" + base64.b64encode(b"the old secret, 24 bytes").decode()
OTHER = "whsec_" + base64.b64encode(b"nobody's secret, 24 byte").decode()
ENV = {"HOOK_SIGNING": NEW, "HOOK_SIGNING_OLD": OLD}


def channel_for(receiver: VerifyingReceiver, **settings: Any) -> WebhookChannel:
    table: dict[str, Any] = {
        "url": receiver.url,
        "read_timeout_s": 0.5,
        "signing_secret_env": "HOOK_SIGNING",
        **settings,
    }
    channel = build_channel("webhook", table, "channels.hook.webhook", ENV)
    assert isinstance(channel, WebhookChannel)
    return channel


def submit_all(channel: WebhookChannel, *actions: Outgoing) -> list[Answer | ChannelError]:
    """Submits each action in turn in one event loop; an error is returned, not raised."""

    async def main() -> list[Answer | ChannelError]:
        answers: list[Answer | ChannelError] = []
        try:
            for action in actions:
                try:
                    answers.append(await channel.submit(action))
                except ChannelError as exc:
                    answers.append(exc)
        finally:
            await channel.close()
        return answers

    return asyncio.run(main())


def receiver(secret: str, **settings: Any) -> Iterator[VerifyingReceiver]:
    with VerifyingReceiver(secret, **settings) as started:
        yield started
    assert not started.errors, started.errors


@pytest.fixture
def new_receiver() -> Iterator[VerifyingReceiver]:
    """Holds only the new (current) secret."""
    yield from receiver(NEW)


@pytest.fixture
def old_receiver() -> Iterator[VerifyingReceiver]:
    """Holds only the old (previous) secret: one not yet told of the rotation."""
    yield from receiver(OLD)


def test_each_delivery_verifies_and_its_id_is_the_actions_idempotency_key(
    new_receiver: VerifyingReceiver,
) -> None:
    actions = [make_action({"ticket": f"T-{n}", "note": "ünïcode ✓"}) for n in range(3)]
    before = int(time.time())

    answers = submit_all(channel_for(new_receiver), *actions)

    after = int(time.time())
    assert [a.status for a in answers if isinstance(a, Answer)] == [Status.SUCCESS] * 3
    assert new_receiver.refused == []
    for action, delivery in zip(actions, new_receiver.records, strict=True):
        headers = delivery.headers
        assert headers["webhook-id"] == action.idempotency_key
        assert before <= int(headers["webhook-timestamp"]) <= after
        assert standardwebhooks.Webhook(NEW).verify(delivery.raw, headers) == dict(action.params)
        assert headers["webhook-signature"].count("v1,") == 1  # no rotation under way


def test_during_a_rotation_receivers_with_either_secret_verify(
    new_receiver: VerifyingReceiver, old_receiver: VerifyingReceiver
) -> None:
    rotating = {"signing_secret_env_previous": "HOOK_SIGNING_OLD"}
    action = make_action()

    to_new = submit_all(channel_for(new_receiver, **rotating), action)
    to_old = submit_all(channel_for(old_receiver, **rotating), action)

    assert [type(a) for a in to_new + to_old] == [Answer, Answer]
    assert new_receiver.refused == [] and old_receiver.refused == []
    [delivery] = old_receiver.records
    assert len(delivery.headers["webhook-signature"].split(" ")) == 2
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(OTHER).verify(delivery.raw, delivery.headers)


def test_after_the_rotation_a_receiver_with_only_the_old_secret_refuses(
    old_receiver: VerifyingReceiver,
) -> None:
    [answer] = submit_all(channel_for(old_receiver), make_action())

    assert isinstance(answer, ChannelError) and answer.code == "RECEIVER_AUTH_FAILED"
    assert old_receiver.refused == ["No matching signature found"]
    assert old_receiver.records == []  # nothing took effect


def test_a_tampered_delivery_is_refused(new_receiver: VerifyingReceiver) -> None:
    submit_all(channel_for(new_receiver), make_action({"ticket": "T-1", "amount": 10}))
    [delivery] = new_receiver.records
    tampered = delivery.raw.replace(b'"amount":10', b'"amount":1000')
    assert tampered != delivery.raw
    later = {**delivery.headers, "webhook-timestamp": str(int(time.time()) + 1)}
    forwarded = {k: v for k, v in delivery.headers.items() if k.startswith("webhook-")}

    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(NEW).verify(tampered, delivery.headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(NEW).verify(delivery.raw, later)
    # And over the wire: the same headers with the changed body get a 401.
    reply = httpx.post(
        new_receiver.url,
        content=tampered,
        headers={**forwarded, "Content-Type": "application/json"},
    )
    assert reply.status_code == 401
    assert new_receiver.refused == ["No matching signature found"]
    assert len(new_receiver.records) == 1


def test_a_retry_of_the_same_action_keeps_its_webhook_id_and_is_signed_again(
    new_receiver: VerifyingReceiver,
) -> None:
    new_receiver.script("status:503")
    action = make_action()

    first, second = submit_all(channel_for(new_receiver), action, action)

    assert isinstance(first, ChannelError) and first.code == "RECEIVER_UNAVAILABLE"
    assert isinstance(second, Answer) and second.status is Status.SUCCESS
    assert [d.headers["webhook-id"] for d in new_receiver.records] == [action.idempotency_key] * 2
    for delivery in new_receiver.records:
        standardwebhooks.Webhook(NEW).verify(delivery.raw, delivery.headers)


class HeaderKeepingReceiver(VerifyingReceiver):
    """Also keeps the headers of status look-ups and cancels."""

    def __init__(self, secret: str) -> None:
        super().__init__(secret)
        self.other_headers: list[dict[str, str]] = []

    def _status(self, handler: Any, task_id: str) -> None:
        self.other_headers.append({k.lower(): v for k, v in handler.headers.items()})
        super()._status(handler, task_id)

    def _cancel(self, handler: Any, task_id: str) -> None:
        self.other_headers.append({k.lower(): v for k, v in handler.headers.items()})
        super()._cancel(handler, task_id)


def test_status_look_ups_and_cancels_are_not_signed_as_deliveries() -> None:
    """A receiver de-duplicating by webhook-id would drop a cancel sent under the
    delivery's id; look-ups and cancels carry the bearer token only."""
    with HeaderKeepingReceiver(NEW) as hooks:
        hooks.script("accept:30")
        channel = channel_for(hooks, status_url=hooks.status_url, cancel_url=hooks.cancel_url)
        action = make_action()

        async def main() -> tuple[Answer, Answer, bool]:
            try:
                accepted = await channel.submit(action)
                looked_up = await channel.poll(action, accepted.external_id)
                return accepted, looked_up, await channel.cancel(action, accepted.external_id)
            finally:
                await channel.close()

        accepted, looked_up, cancelled = asyncio.run(main())

    assert accepted.status is Status.PENDING and looked_up.status is Status.PENDING
    assert cancelled
    assert hooks.records[0].headers["webhook-id"] == action.idempotency_key
    assert len(hooks.other_headers) == 2
    for headers in hooks.other_headers:
        assert not {"webhook-id", "webhook-timestamp", "webhook-signature"} & set(headers)
        assert headers["x-reachstore-action-id"] == action.action_id
    assert not hooks.errors

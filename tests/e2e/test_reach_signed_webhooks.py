"""Signed webhooks end to end: a real reach process, mid-rotation (a current and a previous
signing secret), delivering to real receivers that each hold only one of the two secrets
and refuse (401) any delivery ``standardwebhooks`` does not verify. The first attempt of
each action is answered 503, so the executor's retry is signed too."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import standardwebhooks

from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import state_name
from tests.reach.peers import VerifyingReceiver

pytestmark = pytest.mark.e2e

NEW = "whsec_" + base64.b64encode(b"e2e: the new secret, 32 bytes..").decode()
OLD = "whsec_" + base64.b64encode(b"e2e: the old one, 24 byt").decode()
RETRY = "[channels.{name}.retry]\nbase_s = 0.05\ncap_s = 0.2\nmax_retries = 3\n"
SIGNED = 'signing_secret_env = "E2E_SIGNING"\nsigning_secret_env_previous = "E2E_SIGNING_OLD"\n'


def _channel(name: str, url: str, signing: str) -> str:
    # idempotent: the 503 (ambiguous) may be re-sent, so the retry reaches the receiver.
    extra = "idempotent = true\n" + RETRY.format(name=name)
    return webhook_channel(name, url, extra=extra, webhook_extra=signing)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_receivers_holding_either_secret_verify_every_attempt_under_one_webhook_id(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("E2E_SIGNING", NEW)
    monkeypatch.setenv("E2E_SIGNING_OLD", OLD)
    with VerifyingReceiver(NEW) as to_new, VerifyingReceiver(OLD) as to_old:
        to_new.script("status:503")
        to_old.script("status:503")
        config = write_config(
            tmp_path / "reach.toml",
            _channel("to-new", to_new.url, SIGNED),
            _channel("to-old", to_old.url, SIGNED),
            _channel("unsigned", to_new.url, ""),
        )
        with reach_process(tmp_path, database_url, config) as reach:
            actions = {
                name: settle(
                    reach.stub,
                    submit(reach.stub, name, {"order": "o-1"}, entity=f"order-{name}")
                    .task.actions[0]
                    .action_id,
                    timeout=30,
                )
                for name in ("to-new", "to-old")
            }
            log = reach.log_path.read_text(errors="replace")

    for name, receiver, secret in (("to-new", to_new, NEW), ("to-old", to_old, OLD)):
        action = actions[name]
        assert state_name(action) == "succeeded", (name, action)
        assert receiver.refused == [], (name, receiver.refused)
        assert [d.mode for d in receiver.records] == ["status:503", "ok"], describe(action)
        for delivery in receiver.records:
            assert delivery.headers["webhook-id"] == action.idempotency_key
            assert len(delivery.headers["webhook-signature"].split(" ")) == 2
            body = standardwebhooks.Webhook(secret).verify(delivery.raw, delivery.headers)
            assert body == {"order": "o-1"}
            tampered = delivery.raw.replace(b"o-1", b"o-2")
            with pytest.raises(standardwebhooks.WebhookVerificationError):
                standardwebhooks.Webhook(secret).verify(tampered, delivery.headers)
        assert not receiver.errors
    # The channel left unsigned is named at start.
    assert "channels.unsigned.webhook: no signing_secret_env" in log
    assert "channels.to-new.webhook: no signing_secret_env" not in log

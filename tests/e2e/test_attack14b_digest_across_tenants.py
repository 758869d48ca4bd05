"""The keyed digest of an idempotency key must not be an oracle for another tenant.

An action's key carries a digest of the channel's ``idempotency_params`` (usually who is
reached: a phone number, an e-mail address), keyed under ``REACHSTORE_PII_SECRET`` so that
nobody can confirm a guessed phone number by hashing it (``docs/SECURITY.md``,
"Idempotency keys"). The entity part mixes the tenant into its HMAC "so one entity id in
two tenants does not read alike"; the digest does not. Channels are configured for the
whole deployment, so every tenant that may use a channel holds the same keyed function:
any tenant's caller computes the digest of a guess with ``validate_only`` (nothing is
sent) and compares it with the keys another tenant's trail shows the auditor, or a
receiver shared by both tenants is sent. Two tenants reaching the same person also read
alike to whoever sees both keys, though they are not the same intent.

Driven from outside: a real `up` with keys required, keys made on the command line, the
REST bridge.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.attack_support import cli_key, http_client
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

SECRET = "attack14b-digest-secret-0123456789"
PHONE = "+44 20 7946 0958"
PARAMS = {"phone": PHONE, "text": "your parcel is on its way"}


def _config(receiver: HttpReceiver) -> str:
    return f"""
[channels.sms]
kind = "webhook"
description = "text messages through a provider every tenant uses"
action_types = ["notify"]
idempotency_params = ["phone"]
window = "day"
[channels.sms.webhook]
url = "{receiver.url}"
read_timeout_s = 2
"""


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpReceiver]:
    rx = HttpReceiver(default="status:200").start()
    yield rx
    rx.stop()


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory, receiver: HttpReceiver
) -> Iterator[RunningSystem]:
    folder = tmp_path_factory.mktemp("digest")
    reach_config = folder / "reach.toml"
    reach_config.write_text(_config(receiver))
    running = RunningSystem(
        folder / "data",
        {
            "REACHSTORE_REACH_CONFIG": str(reach_config),
            "REACHSTORE_PII_SECRET": SECRET,
            "REACHSTORE_AUDIT_READS": "true",
            "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
            "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
        },
        extra_args=("--require-keys",),
    )
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


def _submit(http: httpx.Client, entity: str, **extra: Any) -> dict[str, Any]:
    reply = http.post(
        "/api/v1/reach/tasks",
        json={
            "entity_id": entity,
            "actions": [
                {"name": "notify", "channel": "sms", "action_type": "notify", "params": PARAMS}
            ],
            **extra,
        },
    )
    assert reply.status_code in (200, 202), reply.text
    result: dict[str, Any] = reply.json()
    return result


def _key(answer: dict[str, Any]) -> str:
    key: str = answer["task"]["actions"][0]["idempotency_key"]
    return key


def _digest(key: str) -> str:
    return key.split("/")[3]


def _trail_keys(http: httpx.Client, tenant: str, timeout: float = 30.0) -> set[str]:
    """The idempotency keys the auditor reads in ``tenant``'s trail."""
    deadline = time.monotonic() + timeout
    while True:
        reply = http.get("/api/v1/audit/events", params={"tenant": tenant, "page_size": 100})
        assert reply.status_code == 200, reply.text
        found = {e["idempotency_key"] for e in reply.json()["events"] if e.get("idempotency_key")}
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


def test_another_tenant_cannot_confirm_a_guessed_phone_number_from_a_key(
    system: RunningSystem,
) -> None:
    acme = cli_key(system, "acme", "reach")["secret"]
    rival = cli_key(system, "rival", "reach")["secret"]
    auditor = cli_key(system, "audit-office", "read,auditor")["secret"]

    with http_client(system, acme) as http:
        acme_key = _key(_submit(http, "customer-8812"))
    with http_client(system, auditor) as http:
        shown = _trail_keys(http, "acme")
    assert acme_key in shown, shown  # the key is shown outside acme, as documented

    # Another tenant guesses the phone number behind acme's key: a validate_only submit
    # with the guess sends nothing and answers with the key it would have.
    with http_client(system, rival) as http:
        guess = _key(_submit(http, "anything", validate_only=True))
    assert guess.split("/")[0] == "rival"
    assert _digest(guess) != _digest(acme_key), (
        "a tenant confirmed a guessed phone number behind another tenant's idempotency key: "
        f"its validate_only key {guess!r} carries the same keyed digest as acme's "
        f"{acme_key!r}; the digest must be keyed per tenant like the entity part"
    )

"""The system the console's browser tests drive: a real `reachstore up --require-keys`
with one webhook channel to a receiver in this process, a namespace slowed down by fault
injection, and keys made with the command line."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.reach.peers import HttpReceiver

# A look-up of an UNKNOWN action is due only after 10 minutes: within a test it stays
# UNKNOWN until the operator acts (resolves it, or asks for a look-up now).
REACH_CONFIG = """
[engine]
workers = 4
lease_s = 5

[channels.hook]
kind = "webhook"
description = "hook: posts to a test receiver"
action_types = ["notify"]
idempotency_params = ["ticket"]
window = "day"
[channels.hook.webhook]
url = "{url}"
status_url = "{status_url}"
idempotency_header = false
read_timeout_s = 0.5
[channels.hook.retry]
base_s = 0.05
cap_s = 0.2
max_retries = 1
[channels.hook.unknown]
base_s = 600
cap_s = 600
max_polls = 5

[channels.limited]
kind = "webhook"
description = "limited: posts to a test receiver under a quota"
action_types = ["notify"]
idempotency_params = ["ticket"]
quota_per_second = 20
[channels.limited.webhook]
url = "{url}"
status_url = "{status_url}"
idempotency_header = false
connect_timeout_s = 1
read_timeout_s = 2
"""

SLOW_NAMESPACE = "slow"
FAST_NAMESPACE = "fast"


def reach_config(receiver: HttpReceiver) -> str:
    return REACH_CONFIG.format(url=receiver.url, status_url=receiver.status_url)


def submit(client: httpx.Client, entity: str, channel: str = "hook") -> dict[str, Any]:
    reply = client.post(
        "/api/v1/reach/tasks",
        json={
            "entity_id": entity,
            "actions": [
                {
                    "name": "notify",
                    "channel": channel,
                    "action_type": "notify",
                    "params": {"ticket": entity, "contact": "ops@example.com"},
                }
            ],
        },
    )
    assert reply.status_code == 202, reply.text
    return reply.json()["task"]


def wait_action(
    client: httpx.Client, action_id: str, states: set[str], timeout: float = 30.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        action = client.get(f"/api/v1/reach/actions/{action_id}").json()["action"]
        if action["state"] in states:
            return action
        assert time.monotonic() < deadline, f"action {action_id} still {action['state']}"
        time.sleep(0.1)

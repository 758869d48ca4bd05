"""Red team: a 5xx answer is taken for "nothing happened", so a non-idempotent webhook is
sent again and again and ends ``failed`` although every attempt took effect.

``reachstore_server/reach/channels/webhook.py`` classifies 408 and every 5xx as ``transient`` and
NOT ambiguous, and docs/AT_MOST_ONCE.md §1 says "Refusals the receiver stated (an HTTP
status ...) are not ambiguous". But a 5xx is not a refusal: 500 is what a receiver answers
when it crashed after committing (rendering the answer, say), and 502/504 are what the
gateway in front of it (nginx, an API gateway, a load balancer) answers when the upstream
was too slow or hung up, while the upstream goes on and takes effect. The gRPC channel
already treats the equivalents (INTERNAL, UNKNOWN) as ambiguous; the webhook does not.

With the default configuration (``idempotent = false``, no ``receiver_deduplicates``) the
executor retries such an answer ``max_retries`` (4) times, so one action takes effect five
times, and then ends ``failed / retries_exhausted``: "failed" although it took effect.

The fault checker cannot see this: its "5xx" fault never takes effect
(``tests/faults/plan.py``), so it only ever tests the case where the assumption holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import PG_MARKED, state_name
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


class GatewayAfterEffect(HttpReceiver):
    """A receiver that takes the effect of every POST and then answers ``code``, the way a
    gateway answers 504 when its upstream is slow (the upstream still finishes), or an
    application answers 500 when it fails after committing."""

    def __init__(self, code: int) -> None:
        super().__init__()
        self.code = code
        self.effects: list[Any] = []

    def _deliver(self, handler: Any, body: bytes) -> None:
        with self._lock:
            self.effects.append(handler.headers.get("X-Reachstore-Action-Id"))
        handler.answer(self.code, {"error": f"gateway/application error {self.code}"})


@pytest.mark.parametrize("code", [500, 502, 504])
@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_a_5xx_after_the_effect_is_not_resent_and_never_ends_failed(
    tmp_path: Path, database_url: str, code: int
) -> None:
    with GatewayAfterEffect(code) as receiver:
        config = write_config(
            tmp_path / "reach.toml",
            webhook_channel(
                "orders",
                receiver.url,
                extra="[channels.orders.retry]\nbase_s = 0.1\ncap_s = 0.2\n",
            ),
        )
        with reach_process(tmp_path, database_url, config) as reach:
            reply = submit(reach.stub, "orders", {"charge": "order-1"})
            action_id = reply.task.actions[0].action_id
            action = settle(
                reach.stub, action_id, timeout=30, until=frozenset({"ready", "submitting"})
            )
        effects = receiver.effects.count(action_id)

    state = state_name(action)
    print(f"{code}: {effects} effect(s) at the receiver, action {state}\n{describe(action)}")
    # The channel says re-sending is not harmless: the receiver must see it at most once.
    assert effects <= 1, f"{effects} effects of one non-idempotent action\n{describe(action)}"
    # And with a send that may have taken effect, "failed" is never the honest end.
    assert state != "failed", f"ended failed after {effects} effect(s)\n{describe(action)}"

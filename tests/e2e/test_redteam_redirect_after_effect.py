"""Red team: a receiver that answers a POST with ``303 See Other`` (POST/redirect/GET, the
usual way a web application says "created, it is over there") has taken the action's
effect, yet reach records the action ``failed``.

``channels/webhook.py`` classifies every 3xx as ``permanent`` / ``RECEIVER_REDIRECTED``
and not ambiguous, and the executor settles it ``failed`` at once. A redirect is not a
refusal: "failed" tells the agent the action did not happen, and it will do it again
another way. The fault checker's ``failed_without_refusal`` property (last receipt status
below 400) would catch it, but its receivers never answer 3xx.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import PG_MARKED, state_name
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


class CreatedThenRedirect(HttpReceiver):
    """Creates what was posted, then answers 303 with a Location, as web frameworks do."""

    def __init__(self) -> None:
        super().__init__()
        self.effects: list[Any] = []

    def _deliver(self, handler: Any, body: bytes) -> None:
        with self._lock:
            self.effects.append(handler.headers.get("X-Reachstore-Action-Id"))
            number = len(self.effects)
        handler.answer(303, {"id": f"task-{number}"}, {"Location": f"/tasks/task-{number}"})


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_a_redirect_after_the_effect_does_not_end_failed(tmp_path: Path, database_url: str) -> None:
    with CreatedThenRedirect() as receiver:
        config = write_config(tmp_path / "reach.toml", webhook_channel("orders", receiver.url))
        with reach_process(tmp_path, database_url, config) as reach:
            reply = submit(reach.stub, "orders", {"charge": "order-1"})
            action_id = reply.task.actions[0].action_id
            action = settle(reach.stub, action_id, 30, until=frozenset({"ready", "submitting"}))
        effects = receiver.effects.count(action_id)

    state = state_name(action)
    print(f"{effects} effect(s) at the receiver, action {state}\n{describe(action)}")
    assert effects == 1
    assert state != "failed", f"failed although the receiver took effect\n{describe(action)}"

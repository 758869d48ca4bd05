"""Red team: an alert is given up for good after five failed deliveries, and the five come
back to back, so an alert receiver that is away for a second (a restart, a deploy that
answers 503 meanwhile) loses every alert raised in that second. Nothing tries again.

docs/AT_MOST_ONCE.md §5: "alerts are at least once, because a lost alert is the silent
failure they exist to prevent." ``Executor._deliver_pending_alerts`` claims one alert at a
time; a failed delivery releases the claim at once (``mark_alert``), so the next turn of
the same loop claims the same alert again, immediately, until ``delivery_attempts``
reaches ``ALERT_MAX_ATTEMPTS`` (5). ``claim_alerts`` never takes an alert with five
attempts again. Here an action goes to review (the very event an operator must hear of)
while the alert receiver answers 503 for two seconds; it then answers 200, and the alert
never arrives.

The fault checker's alert receiver never fails (``tests/faults/receivers.py``), so it
only checks alerts for duplicates, never for loss.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import PG_MARKED, state_name
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

AWAY_S = 2.0


class Restarting(HttpReceiver):
    """An alert receiver that answers 503 until ``up_at`` (monotonic), then takes every
    alert with 200."""

    up_at = float("inf")

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0
        self.taken: list[Any] = []

    def _deliver(self, handler: Any, body: bytes) -> None:
        if time.monotonic() < self.up_at:
            with self._lock:
                self.refused += 1
            handler.answer(503, {"error": "restarting"})
            return
        with self._lock:
            self.taken.append(handler.headers.get("Idempotency-Key"))
        handler.answer(200, {"ok": True})


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_an_alert_survives_a_two_second_outage_of_its_receiver(
    tmp_path: Path, database_url: str
) -> None:
    with HttpReceiver(default="drop_after_effect") as orders, Restarting() as alerts:
        config = write_config(
            tmp_path / "reach.toml",
            webhook_channel(
                "orders", orders.url, extra="[channels.orders.unknown]\nbase_s = 0.2\n"
            ),
            webhook_channel("alerts", alerts.url),
            engine='alert_channel = "alerts"',
        )
        with reach_process(tmp_path, database_url, config) as reach:
            alerts.up_at = time.monotonic() + AWAY_S
            reply = submit(reach.stub, "orders", {"charge": "order-1"})
            action = settle(reach.stub, reply.task.actions[0].action_id, 20)
            assert state_name(action) == "needs_review", describe(action)  # an alert is due
            # Two alert sweeps (every 10 s) after the receiver is back.
            deadline = time.monotonic() + AWAY_S + 22
            while not alerts.taken and time.monotonic() < deadline:
                time.sleep(0.5)
        engine = sqlalchemy.create_engine(database_url)
        with engine.connect() as conn:
            stored = conn.execute(
                sqlalchemy.text("SELECT kind, delivered, delivery_attempts FROM reach_alerts")
            ).all()
        engine.dispose()

    print(f"alert receiver refused {alerts.refused}, took {alerts.taken}; stored {stored}")
    assert alerts.taken, (
        f"the alert never arrived: {alerts.refused} refusals within {AWAY_S:g} s, then "
        f"nothing although the receiver was back; stored (kind, delivered, attempts): {stored}"
    )

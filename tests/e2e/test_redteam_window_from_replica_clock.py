"""Red team: the idempotency window is read from each reach replica's own wall clock, so
two replicas whose clocks are 20 s apart (the fault checker's own skew) mint two keys for
the same request when it is retried across a window boundary, and the action takes
effect twice.

docs/AT_MOST_ONCE.md §3 says every time that processes compare is on the database's
clock, "never on a worker's", and §4 that "the window ... is taken from the server's
clock when the task is reserved". But ``ReachServicer.SubmitTask`` hands
``dt.datetime.now(dt.UTC)`` of the replica that got the call to ``plan_task``: the window
bucket is that replica's wall clock. An agent whose first SubmitTask went unanswered (the
usual reason to retry) retries through the load balancer, lands on the other replica, and
gets a new task whose key names the next hour (or day): a second send of one intent.

Here both replicas run under libfaketime (as the checker's skewed worker does), 20 s
apart, placed so that the boundary falls between them; the request carries neither a
``logical_time`` nor a caller key, as a plain ``Reach`` call does. The checker has the
same skew and the ``twice_per_intent`` property, but its channels use the ``day`` window
and a 20 s skew straddles midnight for 20 s a day, so it practically never sees this.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

from tests.e2e.redteam import describe, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import state_name
from tests.faults.cluster import Worker
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

SKEW_S = 20  # between the two replicas: the fault checker's default


def next_boundary(window: str, after: dt.datetime) -> dt.datetime:
    start = after.replace(minute=0, second=0, microsecond=0)
    if window == "day":
        start = start.replace(hour=0)
        return start + dt.timedelta(days=1)
    return start + dt.timedelta(hours=1)


@pytest.mark.parametrize("window", ["hour", "day"])
def test_two_replicas_20s_apart_mint_one_key_for_one_request(tmp_path: Path, window: str) -> None:
    database_url = f"sqlite:///{tmp_path / 'reach.db'}"
    with HttpReceiver() as receiver:
        config = write_config(
            tmp_path / "reach.toml",
            webhook_channel("orders", receiver.url, extra=f'window = "{window}"\n'),
        )
        # Replica A's clock reads 5 s before the boundary at `at` (real time), replica B's
        # 20 s later than A's.
        at = time.time() + 25
        boundary = next_boundary(window, dt.datetime.fromtimestamp(at, dt.UTC)).timestamp()
        offset = round(boundary - 5 - at)
        a = Worker(tmp_path, database_url, config, "replica-a", skew_s=offset)
        b = Worker(tmp_path, database_url, config, "replica-b", skew_s=offset + SKEW_S)
        try:
            a.start()
            b.start()
            assert time.time() < at, "the replicas took too long to start"
            time.sleep(at - time.time())
            first = submit(a.stub, "orders", {"charge": "order-1"})
            again = submit(b.stub, "orders", {"charge": "order-1"})  # the caller's retry
            actions = [settle(a.stub, r.task.actions[0].action_id, 20) for r in (first, again)]
        finally:
            for worker in (a, b):
                worker.stop()
        effects = receiver.effects_total()

    keys = {r.task.actions[0].idempotency_key for r in (first, again)}
    print(f"keys {sorted(keys)}; deduplicated {again.deduplicated}; {effects} effect(s)")
    for action in actions:
        print(describe(action), state_name(action))
    assert again.deduplicated and len(keys) == 1, f"one request, two keys: {sorted(keys)}"
    assert effects == 1, f"{effects} effects of one intent on a non-idempotent channel"

"""Reach must say how far behind it is (docs/OPERATIONS.md, "Load shedding": "how far
behind it is shows per channel in its metrics"), and its gauge
``reachstore_reach_behind_seconds{channel}`` does not.

The gauge is the age of the oldest action whose ``next_at`` has passed
(``ReachStore.behind_by_channel``). But a worker that claims an action sets its ``next_at``
to the end of its lease, and an action waiting for its channel's rate either sleeps under
that lease or is handed back with ``next_at`` moved to when the next token is due. So every
action a worker holds, which under a slow channel is every action in the queue once the
queue fits the workers, drops out of the gauge: a real `reachstore up`, a channel sending
0.7 actions a second and 14 actions submitted at once, and after several seconds, with half
of them still unsent and due since they were submitted, the gauge reads nothing behind.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import grpc
import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from tests.e2e.metrics_scrape import scrape, value
from tests.e2e.system import RunningSystem
from tests.e2e.test_reach_crash import action_spec
from tests.reach.peers import HttpReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

ACTIONS = 14
QUOTA_PER_S = 1.0  # sent at 70 % of it: 0.7 a second


def _unsent(stub: pb_grpc.ReachServiceStub, task_ids: list[str]) -> int:
    left = 0
    for task_id in task_ids:
        task = stub.GetTask(pb.GetTaskRequest(task_id=task_id), timeout=10).task
        left += sum(1 for a in task.actions if a.state == pb.ACTION_STATE_READY)
    return left


def test_the_behind_gauge_counts_actions_waiting_for_their_channels_rate(
    tmp_path: Path,
) -> None:
    config = tmp_path / "reach.toml"
    with HttpReceiver() as receiver:
        config.write_text(
            f"""
[channels.slow]
kind = "webhook"
description = "a receiver that allows one call a second"
action_types = ["notify"]
idempotency_params = ["n"]
quota_per_second = {QUOTA_PER_S}
[channels.slow.webhook]
url = "{receiver.url}"
""",
            encoding="utf-8",
        )
        system = RunningSystem(tmp_path / "data", {"REACHSTORE_REACH_CONFIG": str(config)})
        system.start()
        try:
            with grpc.insecure_channel(system.reach_addr) as channel:
                stub = pb_grpc.ReachServiceStub(channel)
                submitted = time.monotonic()
                task_ids = [
                    stub.SubmitTask(
                        pb.SubmitTaskRequest(
                            entity_id=f"E-{uuid.uuid4().hex[:8]}",
                            actions=[action_spec("a0", "slow", {"n": n})],
                        ),
                        timeout=15,
                    ).task.task_id
                    for n in range(ACTIONS)
                ]
                time.sleep(8)
                unsent = _unsent(stub, task_ids)
                behind = value(
                    scrape(system, "reach"), "reachstore_reach_behind_seconds", channel="slow"
                )
                waited = time.monotonic() - submitted
        finally:
            assert system.stop() == 0
    seen = (
        f"{unsent} of {ACTIONS} actions unsent after {waited:.1f} s, all due since they "
        f"were submitted; reachstore_reach_behind_seconds{{channel=slow}} = {behind}"
    )
    assert unsent >= 3, seen  # the channel's rate holds them back: the queue is behind
    # The oldest unsent action has been due since it was submitted.
    assert behind >= waited / 2, seen

"""The kind of a task_failed alert when the task fails through a SKIPPED required action
(reachstore_server/reach/store.py ``_Batch.change``: "the kind of the failure that failed
the task: this action's when it is one of them, else the first one's").

Attack: a task of two actions, an optional ``check`` whose receiver refuses the order
(HTTP 400: a business refusal) and a required ``ship`` that depends on it. The refusal
skips ``ship``, which fails the task. The only failure behind the task's failure is the
receiver's refusal, a business matter; but the alert takes its kind from the first lost
required action, the skipped ``ship``, whose failure kind is empty, read as "technical".

Guarantee (issue 20, item 2): "Business failures to the business, technical failures to
operations": the task_failed alert carries kind ``business`` and goes to the business's
alert channel, not to operations.

Control: the same with ``check`` required (the refused action is itself one of the lost
required actions) must and does go to the business.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from tests.e2e.redteam import describe, reach_process, settle, webhook_channel, write_config
from tests.e2e.test_reach_crash import PG_MARKED, action_spec, state_name
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

FAST = "[channels.{name}.retry]\nmax_retries = 0\n"


def _alerts_of(receiver: HttpReceiver, task_id: str) -> list[dict[str, object]]:
    return [d.body for d in receiver.records if d.body and d.body.get("task_id") == task_id]


def _wait_any(receivers: list[HttpReceiver], task_id: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(_alerts_of(r, task_id) for r in receivers):
            return
        time.sleep(0.2)


def _run(tmp_path: Path, database_url: str, check_required: bool) -> tuple[list, list]:
    with (
        HttpReceiver(default="status:400") as refusing,
        HttpReceiver() as shipping,
        HttpReceiver() as business,
        HttpReceiver() as operations,
    ):
        config = write_config(
            tmp_path / "reach.toml",
            webhook_channel("orders", refusing.url, extra=FAST.format(name="orders")),
            webhook_channel("shipping", shipping.url, extra=FAST.format(name="shipping")),
            webhook_channel("biz-alerts", business.url),
            webhook_channel("ops-alerts", operations.url),
            engine='[engine.alert_channels]\nbusiness = "biz-alerts"\ntechnical = "ops-alerts"\n',
        )
        with reach_process(tmp_path, database_url, config) as reach:
            check = action_spec("check", "orders", {"order": "o-7", "step": "check"})
            if not check_required:
                check.requirement = pb.REQUIREMENT_OPTIONAL
            ship = action_spec("ship", "shipping", {"order": "o-7", "step": "ship"}, "check")
            reply = reach.stub.SubmitTask(
                pb.SubmitTaskRequest(entity_id="order-7", actions=[check, ship]), timeout=15
            )
            by_name = {a.name: a for a in reply.task.actions}
            refused = settle(reach.stub, by_name["check"].action_id, 20)
            assert state_name(refused) == "failed", describe(refused)
            skipped = settle(reach.stub, by_name["ship"].action_id, 20)
            assert state_name(skipped) == "skipped", describe(skipped)
            task_id = reply.task.task_id
            _wait_any([business, operations], task_id)
            time.sleep(1.5)  # a copy to the other receiver has time to arrive
            assert shipping.records == [], "the skipped shipment was sent"
            return _alerts_of(business, task_id), _alerts_of(operations, task_id)


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_refused_optional_step_that_skips_a_required_one_alerts_the_business(
    tmp_path: Path, database_url: str
) -> None:
    to_business, to_operations = _run(tmp_path, database_url, check_required=False)
    assert [a["failure_kind"] for a in to_business] == ["business"] and to_operations == [], (
        "a task failed only by the receiver's refusal (400) alerted as "
        f"{[a['failure_kind'] for a in to_operations]} to operations, "
        f"{[a['failure_kind'] for a in to_business]} to the business"
    )


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_control_refused_required_step_alerts_the_business(
    tmp_path: Path, database_url: str
) -> None:
    to_business, to_operations = _run(tmp_path, database_url, check_required=True)
    assert [a["failure_kind"] for a in to_business] == ["business"]
    assert to_operations == []

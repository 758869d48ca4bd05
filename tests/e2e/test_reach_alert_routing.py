"""Business failures to the business, technical failures to operations: a real reach
service with ``engine.alert_channels`` sends each alert to the receiver of its failure's
kind, and only there (README "Reach", alerts)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import PG_MARKED, state_name
from tests.reach.peers import HttpReceiver, closed_port

pytestmark = pytest.mark.e2e

FAST = "[channels.{name}.retry]\nmax_retries = 0\n"


def _alerts_of(receiver: HttpReceiver, task_id: str) -> list[dict[str, object]]:
    return [d.body for d in receiver.records if d.body and d.body.get("task_id") == task_id]


def _wait_for(receiver: HttpReceiver, task_id: str, timeout: float = 20) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while not _alerts_of(receiver, task_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alerts_of(receiver, task_id)


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_each_alert_goes_to_the_channel_of_its_failure_kind(
    tmp_path: Path, database_url: str
) -> None:
    with (
        HttpReceiver(default="status:400") as refusing,
        HttpReceiver() as business,
        HttpReceiver() as operations,
        HttpReceiver() as fallback,
        closed_port() as nowhere,
    ):
        config = write_config(
            tmp_path / "reach.toml",
            webhook_channel("orders", refusing.url, extra=FAST.format(name="orders")),
            webhook_channel(
                "outage", f"http://127.0.0.1:{nowhere}/", extra=FAST.format(name="outage")
            ),
            webhook_channel("biz-alerts", business.url),
            webhook_channel("ops-alerts", operations.url),
            webhook_channel("all-alerts", fallback.url),
            engine='alert_channel = "all-alerts"\n'
            '[engine.alert_channels]\nbusiness = "biz-alerts"\ntechnical = "ops-alerts"\n',
        )
        with reach_process(tmp_path, database_url, config) as reach:
            refused = submit(reach.stub, "orders", {"order": "o-1"}, entity="order-1")
            lost = submit(reach.stub, "outage", {"order": "o-2"}, entity="order-2")
            for reply in (refused, lost):
                action = settle(reach.stub, reply.task.actions[0].action_id, 20)
                assert state_name(action) == "failed", describe(action)
            to_business = _wait_for(business, refused.task.task_id)
            to_operations = _wait_for(operations, lost.task.task_id)
            # Give a misrouted copy the time to arrive as well before looking for one.
            time.sleep(1)
            assert [a["failure_kind"] for a in to_business] == ["business"]
            assert [a["kind"] for a in to_business] == ["task_failed"]
            assert [a["failure_kind"] for a in to_operations] == ["technical"]
            assert _alerts_of(business, lost.task.task_id) == []
            assert _alerts_of(operations, refused.task.task_id) == []
            assert fallback.records == []

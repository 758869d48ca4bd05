"""Business failures to the business, technical failures to operations: a real reach
service with ``engine.alert_channels`` sends each alert to the receiver of its failure's
kind, and only there (README "Reach", alerts)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy

from reachstore.reach.v1 import reach_service_pb2 as pb
from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import PG_MARKED, action_spec, state_name
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


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_a_business_refusal_after_a_technical_failure_still_reaches_the_business(
    tmp_path: Path, database_url: str
) -> None:
    """One task, two independent required actions: the first fails for a technical reason
    (its receiver is away), which fails the task; a second later has its order refused.
    The refusal is the business's to hear of, although the task had already failed."""
    with (
        HttpReceiver(default="status:400") as refusing,
        HttpReceiver() as business,
        HttpReceiver() as operations,
        closed_port() as nowhere,
    ):
        refusing.script("status:408")  # first a transient answer: the refusal comes later
        config = write_config(
            tmp_path / "reach.toml",
            webhook_channel(
                "orders", refusing.url, extra="[channels.orders.retry]\nbase_s = 1\ncap_s = 1\n"
            ),
            webhook_channel(
                "outage", f"http://127.0.0.1:{nowhere}/", extra=FAST.format(name="outage")
            ),
            webhook_channel("biz-alerts", business.url),
            webhook_channel("ops-alerts", operations.url),
            engine='[engine.alert_channels]\nbusiness = "biz-alerts"\ntechnical = "ops-alerts"\n',
        )
        with reach_process(tmp_path, database_url, config) as reach:
            reply = reach.stub.SubmitTask(
                pb.SubmitTaskRequest(
                    entity_id="order-9",
                    actions=[
                        action_spec("ship", "outage", {"order": "o-9", "step": "ship"}),
                        action_spec("confirm", "orders", {"order": "o-9", "step": "confirm"}),
                    ],
                ),
                timeout=15,
            )
            for action in reply.task.actions:
                settled = settle(reach.stub, action.action_id, 20)
                assert state_name(settled) == "failed", describe(settled)
            task_id = reply.task.task_id
            to_operations = _wait_for(operations, task_id)
            to_business = _wait_for(business, task_id)
            time.sleep(1)
            assert [a["failure_kind"] for a in to_operations] == ["technical"]
            assert [a["failure_kind"] for a in to_business] == ["business"], (
                "the order's refusal, after the task had failed technically, never reached "
                "the business"
            )
            assert "confirm" in str(to_business[0]["message"])


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_an_alert_is_not_given_up_after_a_few_minutes_of_its_receiver_being_away(
    tmp_path: Path, database_url: str
) -> None:
    """The alert receiver refuses every delivery for a while; the alert's record is then
    moved on, by SQL on the database, to where five tries (2 s, 6 s, 18 s, 54 s: about
    80 s) would have left it. When the receiver is back, the alert must still arrive."""
    with (
        HttpReceiver(default="status:503") as operations,
        closed_port() as nowhere,
    ):
        config = write_config(
            tmp_path / "reach.toml",
            webhook_channel(
                "outage", f"http://127.0.0.1:{nowhere}/", extra=FAST.format(name="outage")
            ),
            webhook_channel("ops-alerts", operations.url),
            engine='alert_channel = "ops-alerts"\n',
        )
        with reach_process(tmp_path, database_url, config) as reach:
            reply = submit(reach.stub, "outage", {"order": "o-3"}, entity="order-3")
            action = settle(reach.stub, reply.task.actions[0].action_id, 20)
            assert state_name(action) == "failed", describe(action)
            deadline = time.monotonic() + 20
            while not _alerts_of(operations, reply.task.task_id) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _alerts_of(operations, reply.task.task_id), "the alert was never tried"
            engine = sqlalchemy.create_engine(database_url)
            try:
                with engine.begin() as conn:
                    moved = conn.execute(
                        sqlalchemy.text(
                            "UPDATE reach_alerts SET delivery_attempts = 5, "
                            "claimed_until = NULL WHERE task_id = :task AND NOT delivered"
                        ),
                        {"task": reply.task.task_id},
                    ).rowcount
                assert moved == 1
            finally:
                engine.dispose()
            operations.set_default("ok")
            deadline = time.monotonic() + 30
            delivered: list[dict[str, object]] = []
            while not delivered and time.monotonic() < deadline:
                delivered = [
                    d.body
                    for d in operations.records
                    if d.body and d.body.get("task_id") == reply.task.task_id and d.mode == "ok"
                ]
                time.sleep(0.5)
            assert delivered, "after five refused tries the alert was given up"

"""A late duplicate of a task whose keys were archived is refused by the running reach
service and never reaches the receiver a second time (docs/AT_MOST_ONCE.md, "Dedupe
records"), on SQLite and PostgreSQL.

The 90 days pass in the test's hands: the move is the one the service's sweeper makes
(``ReachStore.archive_expired``), run on the service's database with a moment 91 days on.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import grpc
import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore_server.reach.store import ReachStore
from reachstore_server.storage.engine import make_engine, make_sessions
from tests.e2e.test_reach_crash import (
    ReachProcess,
    action_spec,
    error_reason,
    state_name,
    wait_until_quiet,
)
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

CONFIG = """
[engine]
workers = 4
lease_s = 5

[channels.once]
kind = "webhook"
description = "posts to the test receiver once per intent, ever"
action_types = ["notify"]
idempotency_params = ["ticket"]
window = "none"

[channels.once.webhook]
url = "{url}"
read_timeout_s = 1
"""


def _task(caller_key: str = "") -> pb.SubmitTaskRequest:
    return pb.SubmitTaskRequest(
        entity_id="ticket-archive",
        idempotency_key=caller_key,
        actions=[action_spec("tell", "once", {"ticket": "T-9", "note": "hello"})],
    )


def test_a_late_duplicate_after_the_archive_is_refused_and_not_delivered_again(
    tmp_path: Path, database_url: str
) -> None:
    config = tmp_path / "reach.toml"
    receiver = HttpReceiver()
    reach = ReachProcess(tmp_path, database_url, config, "archive-0")
    engine = make_engine(database_url)
    try:
        with receiver:
            config.write_text(CONFIG.format(url=receiver.url), encoding="utf-8")
            reach.start()
            first = reach.stub.SubmitTask(_task(), timeout=10)
            [done] = wait_until_quiet(reach.stub, timeout=30)
            assert [state_name(a) for a in done.actions] == ["succeeded"]
            key = first.task.actions[0].idempotency_key
            assert receiver.deliveries(key) == 1

            # Before the retention has passed nothing moves, and a duplicate is the task.
            store = ReachStore(make_sessions(engine))
            now = dt.datetime.now(dt.UTC)
            assert store.archive_expired(now + dt.timedelta(days=89), 90).tasks == 0
            again = reach.stub.SubmitTask(_task(), timeout=10)
            assert again.deduplicated and again.task.task_id == first.task.task_id

            assert store.archive_expired(now + dt.timedelta(days=91), 90).tasks == 1
            with pytest.raises(grpc.RpcError) as refused:
                reach.stub.SubmitTask(_task(), timeout=10)
            assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
            reason, failure = error_reason(refused.value)
            assert reason == "ACTION_ALREADY_RESERVED"
            assert failure is not None and failure.structured_data["archived"] is True
            [held] = failure.structured_data["actions"]
            assert held["reserved_action_id"] == first.task.actions[0].action_id
            assert held["final_state"] == "succeeded"
            # The archived task is gone from the live answers, and nothing new was made.
            assert wait_until_quiet(reach.stub, timeout=5) == []
            with pytest.raises(grpc.RpcError) as gone:
                reach.stub.GetTask(pb.GetTaskRequest(task_id=first.task.task_id), timeout=10)
            assert gone.value.code() == grpc.StatusCode.NOT_FOUND
        receiver_errors = list(receiver.errors)
    finally:
        reach.stop()
        engine.dispose()
    assert not receiver_errors, receiver_errors
    assert receiver.deliveries(key) == 1
    assert receiver.total() == 1

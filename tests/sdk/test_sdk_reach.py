"""Reach through the client against a scripted ReachService, over gRPC and REST: what is
sent for a submission, and how waiting for a task follows its versions."""

from __future__ import annotations

import time

import pytest
from google.protobuf import struct_pb2
from sdk_support import Category, Served, failure_pb

from reachstore import ActionInput, Client, ReachTask, TaskWaitTimeoutError
from reachstore.reach.v1 import reach_service_pb2 as pb


def _action(name: str, state: int, **extra: object) -> pb.Action:
    return pb.Action(action_id=f"a-{name}", name=name, state=state, **extra)


def _task(version: int, state: int, *actions: pb.Action) -> pb.Task:
    return pb.Task(version=version, state=state, actions=actions, poll_after_ms=100)


def test_a_submission_sends_every_action_as_written(client: Client, served: Served) -> None:
    task = client.submit_task(
        "WO-1",
        [
            ActionInput("dispatch", "hook", "dispatch", {"ticket": "WO-1", "items": [1, 2]}),
            {
                "name": "notify",
                "channel": "mail",
                "action_type": "notify",
                "params": {"to": ["ops@example.com"]},
                "depends_on": ["dispatch"],
                "requirement": "optional",
            },
        ],
        idempotency_key="WO-1/open",
        logical_time="2026-01-02T03:04:05Z",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
    )

    sent = served.reach.requests[-1]
    assert isinstance(sent, pb.SubmitTaskRequest)
    assert (sent.entity_id, sent.idempotency_key, sent.logical_time, sent.trace_id) == (
        "WO-1",
        "WO-1/open",
        "2026-01-02T03:04:05Z",
        "4bf92f3577b34da6a3ce929d0e0e4736",
    )
    dispatch, notify = sent.actions
    assert dispatch.requirement == pb.REQUIREMENT_REQUIRED
    expected = struct_pb2.Struct()
    expected.update({"ticket": "WO-1", "items": [1, 2]})
    assert dispatch.params == expected
    assert (list(notify.depends_on), notify.requirement) == (["dispatch"], pb.REQUIREMENT_OPTIONAL)

    assert (task.task_id, task.state, task.version, task.deduplicated) == (
        "rt-1",
        "pending",
        1,
        False,
    )
    assert [(a.name, a.state, a.requirement) for a in task.actions] == [
        ("dispatch", "ready", "required"),
        ("notify", "ready", "optional"),
    ]
    assert task.action("dispatch").params == {"ticket": "WO-1", "items": [1, 2]}
    again = client.submit_task(
        "WO-1", [ActionInput("dispatch", "hook", "dispatch")], idempotency_key="WO-1/open"
    )
    assert again.deduplicated


def test_the_one_call_form_returns_where_to_follow_the_action(
    client: Client, served: Served
) -> None:
    result = client.reach(
        {"name": "ping", "channel": "hook", "action_type": "notify"}, entity_id="E-9"
    )
    assert (result.task_id, result.action_id, result.state, result.deduplicated) == (
        "rt-1",
        "a-0",
        "ready",
        False,
    )
    sent = served.reach.requests[-1]
    assert isinstance(sent, pb.ReachRequest) and sent.entity_id == "E-9"


def test_mistakes_in_actions_are_refused_before_anything_is_sent(
    client: Client, served: Served
) -> None:
    # The REST body's spelling of an enum reads the same.
    client.submit_task(
        "E",
        [{"name": "a", "channel": "c", "action_type": "t", "requirement": "REQUIREMENT_OPTIONAL"}],
    )
    assert served.reach.requests.pop().actions[0].requirement == pb.REQUIREMENT_OPTIONAL
    with pytest.raises(ValueError, match="requirement"):
        client.submit_task(
            "E", [{"name": "a", "channel": "c", "action_type": "t", "requirement": "maybe"}]
        )
    with pytest.raises(ValueError, match="depends_om"):
        client.submit_task(
            "E", [{"name": "a", "channel": "c", "action_type": "t", "depends_om": []}]
        )
    with pytest.raises(TypeError, match="list of actions"):
        client.submit_task("E", ActionInput("a", "c", "t"))
    with pytest.raises(ValueError, match="state"):
        client.list_reach_tasks(state="finished")
    with pytest.raises(ValueError, match="outcome"):
        client.resolve_action("a-1", "done", "checked")
    assert served.reach.requests == []


def test_waiting_long_polls_from_version_to_version_until_the_task_is_done(
    client: Client, served: Served
) -> None:
    served.reach.task_script = [
        _task(1, pb.TASK_STATE_PENDING, _action("x", pb.ACTION_STATE_READY)),
        _task(2, pb.TASK_STATE_RUNNING, _action("x", pb.ACTION_STATE_PENDING)),
        _task(4, pb.TASK_STATE_SUCCEEDED, _action("x", pb.ACTION_STATE_SUCCEEDED)),
    ]
    task = client.wait_for_reach_task("rt-7", timeout=20)

    assert isinstance(task, ReachTask) and (task.task_id, task.state) == ("rt-7", "succeeded")
    polls = [(r.wait_ms, r.known_version) for r in served.reach.requests]
    # An immediate look first, then each call waits for the next change of version.
    assert polls[0] == (0, 0)
    assert [version for _, version in polls[1:]] == [1, 2]
    assert all(15_000 <= wait <= 20_000 for wait, _ in polls[1:])


def test_waiting_ends_when_every_action_is_final_or_needs_a_person(
    client: Client, served: Served
) -> None:
    review = failure_pb("REVIEW_REQUIRED", Category.CATEGORY_PERMANENT, action_id="a-y")
    served.reach.task_script = [
        _task(
            5,
            pb.TASK_STATE_RUNNING,
            _action("x", pb.ACTION_STATE_SUCCEEDED),
            _action("y", pb.ACTION_STATE_NEEDS_REVIEW, failure=review),
        )
    ]
    task = client.wait_for_reach_task("rt-8", timeout=5)

    assert (task.state, task.done, task.settled) == ("running", False, True)
    assert task.action("y").needs_review and task.action("y").failure is not None
    assert [f["error_code"] for f in task.partial_failures] == ["REVIEW_REQUIRED"]
    assert len(served.reach.requests) == 1


def test_a_wait_that_runs_out_raises_with_the_last_state_on_time(
    client: Client, served: Served
) -> None:
    served.reach.task_script = [
        _task(1, pb.TASK_STATE_RUNNING, _action("x", pb.ACTION_STATE_UNKNOWN))
    ]
    started = time.monotonic()

    with pytest.raises(TaskWaitTimeoutError) as caught:
        client.wait_for_reach_task("rt-9", timeout=0.4)

    assert 0.35 <= time.monotonic() - started < 2
    error = caught.value
    assert isinstance(error.task, ReachTask) and error.task.state == "running"
    assert (error.code, error.retryable, error.retry_after_ms) == ("DEADLINE_EXCEEDED", True, 100)
    assert error.structured_data == {"task_id": "rt-9", "state": "running", "waited_ms": 400}

"""Helpers for the red-team tests of reach (``test_redteam_*``): one real reach process
(or two) on a real database, a configuration written as TOML text, and the action read
back over gRPC once it has stopped moving.

Nothing here stands in for reach: the processes are ``python -m reachstore_server.reach.main``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from tests.e2e.test_reach_crash import ReachProcess, action_spec, state_name

# States a worker still moves on its own.
MOVING = frozenset({"blocked", "ready", "submitting", "pending", "unknown"})


def webhook_channel(name: str, url: str, *, extra: str = "", webhook_extra: str = "") -> str:
    """A webhook channel as a new user writes one: only what is required, every safety
    setting left at its default (not idempotent, receiver not said to de-duplicate)."""
    return f"""
[channels.{name}]
kind = "webhook"
description = "{name}"
action_types = ["notify"]
{extra}
[channels.{name}.webhook]
url = "{url}"
{webhook_extra}
"""


def write_config(path: Path, *channels: str, engine: str = "") -> Path:
    path.write_text((f"[engine]\n{engine}\n" if engine else "") + "".join(channels), "utf-8")
    return path


@contextlib.contextmanager
def reach_process(
    workdir: Path, database_url: str, config: Path, name: str = "rt-0"
) -> Iterator[ReachProcess]:
    process = ReachProcess(workdir, database_url, config, name)
    try:
        yield process.start()
    finally:
        process.stop()


def submit(
    stub: pb_grpc.ReachServiceStub,
    channel: str,
    params: dict[str, Any],
    entity: str = "order-1",
    **fields: Any,
) -> pb.SubmitTaskResponse:
    return stub.SubmitTask(
        pb.SubmitTaskRequest(
            entity_id=entity, actions=[action_spec("a0", channel, params)], **fields
        ),
        timeout=15,
    )


def settle(
    stub: pb_grpc.ReachServiceStub, action_id: str, timeout: float, until: frozenset[str] = MOVING
) -> pb.Action:
    """The action once its state is outside ``until`` (or as it is after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        action = stub.GetAction(pb.GetActionRequest(action_id=action_id), timeout=10).action
        if state_name(action) not in until or time.monotonic() > deadline:
            return action
        time.sleep(0.2)


def describe(action: pb.Action) -> str:
    lines = [f"action {action.action_id}: {state_name(action)}, {action.attempts} attempt(s)"]
    for entry in action.history:
        lines.append(f"  history -> {pb.ActionState.Name(entry.to_state)} ({entry.reason})")
    for r in action.receipts:
        lines.append(f"  receipt {r.attempt} {r.operation}: {r.outcome} {r.status_code}")
    return "\n".join(lines)

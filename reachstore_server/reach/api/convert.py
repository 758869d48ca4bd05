"""Rows of the reach tables to the messages of ``reach.v1``, and requests to specs."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format, struct_pb2

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore_server.common import errors
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.reach import states as st
from reachstore_server.reach.planning import ActionSpec, TaskSpec
from reachstore_server.storage.reach_models import (
    ReachActionRow,
    ReachHistoryRow,
    ReachReceiptRow,
    ReachTaskRow,
)

# Unfinished tasks: when to ask again (long-poll with wait_ms to be told sooner).
POLL_AFTER_MS = 1000

_TASK_STATES = {
    st.TASK_PENDING: pb.TASK_STATE_PENDING,
    st.TASK_RUNNING: pb.TASK_STATE_RUNNING,
    st.TASK_SUCCEEDED: pb.TASK_STATE_SUCCEEDED,
    st.TASK_FAILED: pb.TASK_STATE_FAILED,
}
TASK_STATE_NAMES = {v: k for k, v in _TASK_STATES.items()}
_ACTION_STATES = {
    name: pb.ActionState.Value(f"ACTION_STATE_{name.upper()}") for name in st.ACTION_STATES
}
_KINDS = {"business": pb.FAILURE_KIND_BUSINESS, "technical": pb.FAILURE_KIND_TECHNICAL}
# An action in one of these states is reported among a response's partial failures.
REPORTED = frozenset({st.FAILED, st.SKIPPED, st.CANCELLED, st.UNKNOWN, st.NEEDS_REVIEW})


def action_state(name: str) -> pb.ActionState:
    return _ACTION_STATES.get(name, pb.ACTION_STATE_UNSPECIFIED)


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


def task_spec(request: pb.SubmitTaskRequest) -> TaskSpec:
    return TaskSpec(
        entity_id=request.entity_id,
        idempotency_key=request.idempotency_key,
        logical_time=request.logical_time,
        trace_id=request.trace_id,
        actions=tuple(action_spec(a) for a in request.actions),
    )


def action_spec(message: pb.ActionSpec) -> ActionSpec:
    return ActionSpec(
        name=message.name,
        channel=message.channel,
        action_type=message.action_type,
        params=json_format.MessageToDict(message.params),
        depends_on=tuple(message.depends_on),
        required=message.requirement != pb.REQUIREMENT_OPTIONAL,
    )


def failure_of(row: ReachActionRow, now: float | None = None) -> pf_pb2.PartialFailure | None:
    """The action's failure as a PartialFailure, with retry advice that matches its state:
    a final failure is not retryable (its key is spent: the same task would find it
    again); an unknown or retrying action says when it is next looked at."""
    if not row.failure_json:
        return None
    data = json.loads(row.failure_json)
    spec = errors.lookup(data["code"])
    extra = dict(data.get("data") or {})
    extra["failure_kind"] = row.failure_kind or "technical"
    extra["state"] = row.state
    failure = errors.make_failure(
        spec,
        data.get("message") or spec.description,
        action_id=row.action_id,
        structured_data=extra,
    )
    if row.state in (st.READY, st.UNKNOWN, st.PENDING) and row.next_at is not None:
        wait = max(0, int((row.next_at - (now or time.time())) * 1000))
        failure.retryable = True
        failure.retry_after_ms = wait
    elif row.state in st.FINAL or row.state == st.NEEDS_REVIEW:
        failure.retryable = False
        failure.ClearField("retry_after_ms")
    return failure


def action_to_pb(
    row: ReachActionRow,
    receipts: Sequence[ReachReceiptRow] = (),
    history: Sequence[ReachHistoryRow] = (),
) -> pb.Action:
    message = pb.Action(
        action_id=row.action_id,
        task_id=row.task_id,
        name=row.name,
        channel=row.channel,
        action_type=row.action_type,
        params=struct(json.loads(row.params_json)),
        depends_on=json.loads(row.depends_on_json),
        requirement=pb.REQUIREMENT_REQUIRED if row.required else pb.REQUIREMENT_OPTIONAL,
        idempotency_key=row.idem_key,
        window=row.window,
        state=action_state(row.state),
        attempts=row.attempts,
        polls=row.polls,
        external_id=row.external_id,
        failure_kind=_KINDS.get(row.failure_kind, pb.FAILURE_KIND_UNSPECIFIED),
        created_at=rfc3339(row.created_at),
        updated_at=rfc3339(row.updated_at),
        finished_at=rfc3339(row.finished_at) if row.finished_at else "",
    )
    if row.next_at is not None and row.state in (st.READY, st.PENDING, st.UNKNOWN):
        message.next_attempt_at = _epoch_rfc3339(row.next_at)
    failure = failure_of(row)
    if failure is not None:
        message.failure.CopyFrom(failure)
    if row.resolution_json:
        r = json.loads(row.resolution_json)
        message.resolution.CopyFrom(
            pb.ActionResolution(
                outcome=pb.Resolution.Value(f"RESOLUTION_{r['outcome'].upper()}"),
                note=r["note"],
                resolved_by=r["resolved_by"],
                resolved_at=r["resolved_at"],
            )
        )
    for receipt in receipts:
        message.receipts.add(
            attempt=receipt.attempt,
            operation=receipt.operation,
            external_id=receipt.external_id,
            status_code=receipt.status_code,
            snippet=receipt.snippet,
            duration_ms=receipt.duration_ms,
            outcome=receipt.outcome,
            created_at=rfc3339(receipt.created_at),
        )
    for entry in history:
        message.history.add(
            at=rfc3339(entry.at),
            from_state=action_state(entry.from_state),
            to_state=action_state(entry.to_state),
            reason=entry.reason,
            details=struct(json.loads(entry.details_json)),
        )
    return message


def task_to_pb(task: ReachTaskRow, actions: Sequence[ReachActionRow]) -> pb.Task:
    message = pb.Task(
        task_id=task.task_id,
        entity_id=task.entity_id,
        idempotency_key=task.caller_key or "",
        logical_time=rfc3339(task.logical_time),
        state=_TASK_STATES[task.state],
        trace_id=task.trace_id,
        submitted_by=task.submitted_by,
        version=task.version,
        actions=[action_to_pb(a) for a in actions],
        created_at=rfc3339(task.created_at),
        updated_at=rfc3339(task.updated_at),
        finished_at=rfc3339(task.finished_at) if task.finished_at else "",
    )
    if task.state not in st.TASK_FINAL:
        message.poll_after_ms = POLL_AFTER_MS
    return message


def reported_failures(actions: Sequence[ReachActionRow]) -> list[pf_pb2.PartialFailure]:
    """One entry per action that failed, did not run, or has an open outcome."""
    found = []
    for row in actions:
        if row.state in REPORTED:
            failure = failure_of(row)
            if failure is not None:
                found.append(failure)
    return found


def _epoch_rfc3339(epoch: float) -> str:
    import datetime as dt

    return rfc3339(dt.datetime.fromtimestamp(epoch, dt.UTC))

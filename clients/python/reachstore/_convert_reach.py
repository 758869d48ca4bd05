"""Reach protobuf messages <-> SDK models (see ``_convert`` for the rules they share)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from reachstore._convert import (
    dict_to_struct,
    enum_arg,
    enum_word,
    failure_from_pb,
    strings_arg,
    struct_to_dict,
)
from reachstore._reach_models import (
    ActionInput,
    CancelResult,
    Channel,
    HistoryEntry,
    ReachAction,
    ReachResult,
    ReachTask,
    Receipt,
    Resolution,
    UnknownReview,
    UnknownReviewEntry,
    UnknownReviewGroup,
)
from reachstore.reach.v1 import reach_service_pb2 as pb

TASK_STATE = pb.TaskState.DESCRIPTOR
ACTION_STATE = pb.ActionState.DESCRIPTOR
REQUIREMENT = pb.Requirement.DESCRIPTOR
FAILURE_KIND = pb.FailureKind.DESCRIPTOR
RESOLUTION = pb.Resolution.DESCRIPTOR

# --- arguments -> requests ------------------------------------------------------------------

_ACTION_KEYS = frozenset({"name", "channel", "action_type", "params", "depends_on", "requirement"})


def action_spec_to_pb(action: ActionInput | Mapping[str, Any]) -> pb.ActionSpec:
    """An ActionInput (or a dict with the same keys) as its proto. Unknown dict keys are
    refused: a misspelt ``depends_om`` silently dropped would send the action too early."""
    if isinstance(action, ActionInput):
        fields: Mapping[str, Any] = {
            "name": action.name,
            "channel": action.channel,
            "action_type": action.action_type,
            "params": action.params,
            "depends_on": action.depends_on,
            "requirement": action.requirement,
        }
    elif isinstance(action, Mapping):
        unknown = set(action) - _ACTION_KEYS
        if unknown:
            raise ValueError(
                f"unknown action keys {sorted(unknown)}; allowed: {sorted(_ACTION_KEYS)}"
            )
        fields = action
    else:
        raise TypeError(f"an action must be an ActionInput or a dict, got {type(action).__name__}")
    name = fields.get("name", "")
    return pb.ActionSpec(
        name=name,
        channel=fields.get("channel", ""),
        action_type=fields.get("action_type", ""),
        params=dict_to_struct(fields.get("params"), f"params of action {name!r}"),
        depends_on=strings_arg(fields.get("depends_on"), f"depends_on of action {name!r}"),
        requirement=cast(
            pb.Requirement,
            enum_arg(REQUIREMENT, fields.get("requirement") or "required", "requirement"),
        ),
    )


def task_state_arg(state: str | None) -> pb.TaskState:
    return cast(pb.TaskState, enum_arg(TASK_STATE, state, "state") if state else 0)


def resolution_arg(outcome: str) -> pb.Resolution:
    """``"succeeded"`` or ``"failed"`` as the Resolution number."""
    return cast(pb.Resolution, enum_arg(RESOLUTION, outcome, "outcome"))


# --- responses -> models -----------------------------------------------------------------------


def _failures(failures: Any) -> list[Any]:
    return [failure_from_pb(f) for f in failures]


def receipt_from_pb(receipt: pb.Receipt) -> Receipt:
    return Receipt(
        attempt=receipt.attempt,
        operation=receipt.operation,
        external_id=receipt.external_id,
        status_code=receipt.status_code,
        snippet=receipt.snippet,
        duration_ms=receipt.duration_ms,
        outcome=receipt.outcome,
        created_at=receipt.created_at,
    )


def history_from_pb(entry: pb.HistoryEntry) -> HistoryEntry:
    return HistoryEntry(
        at=entry.at,
        from_state=enum_word(ACTION_STATE, entry.from_state),
        to_state=enum_word(ACTION_STATE, entry.to_state),
        reason=entry.reason,
        details=struct_to_dict(entry.details),
    )


def action_from_pb(action: pb.Action) -> ReachAction:
    resolution = action.resolution
    return ReachAction(
        action_id=action.action_id,
        task_id=action.task_id,
        name=action.name,
        channel=action.channel,
        action_type=action.action_type,
        params=struct_to_dict(action.params),
        depends_on=list(action.depends_on),
        # Unset means required, as the server treats it.
        requirement=enum_word(REQUIREMENT, action.requirement or pb.REQUIREMENT_REQUIRED),
        idempotency_key=action.idempotency_key,
        window=action.window,
        state=enum_word(ACTION_STATE, action.state),
        attempts=action.attempts,
        polls=action.polls,
        external_id=action.external_id,
        failure=failure_from_pb(action.failure) if action.HasField("failure") else None,
        failure_kind=enum_word(FAILURE_KIND, action.failure_kind),
        next_attempt_at=action.next_attempt_at,
        resolution=Resolution(
            outcome=enum_word(RESOLUTION, resolution.outcome),
            note=resolution.note,
            resolved_by=resolution.resolved_by,
            resolved_at=resolution.resolved_at,
        )
        if action.HasField("resolution")
        else None,
        receipts=[receipt_from_pb(r) for r in action.receipts],
        history=[history_from_pb(h) for h in action.history],
        created_at=action.created_at,
        updated_at=action.updated_at,
        finished_at=action.finished_at,
    )


def task_from_pb(
    task: pb.Task,
    partial_failures: Any = (),
    *,
    deduplicated: bool = False,
    validated_only: bool = False,
) -> ReachTask:
    return ReachTask(
        task_id=task.task_id,
        entity_id=task.entity_id,
        idempotency_key=task.idempotency_key,
        logical_time=task.logical_time,
        state=enum_word(TASK_STATE, task.state),
        trace_id=task.trace_id,
        submitted_by=task.submitted_by,
        version=task.version,
        actions=[action_from_pb(a) for a in task.actions],
        created_at=task.created_at,
        updated_at=task.updated_at,
        finished_at=task.finished_at,
        poll_after_ms=task.poll_after_ms if task.HasField("poll_after_ms") else None,
        partial_failures=_failures(partial_failures),
        deduplicated=deduplicated,
        validated_only=validated_only,
    )


def submitted_from_pb(response: pb.SubmitTaskResponse) -> ReachTask:
    return task_from_pb(
        response.task,
        response.partial_failures,
        deduplicated=response.deduplicated,
        validated_only=response.validated_only,
    )


def reach_result_from_pb(response: pb.ReachResponse) -> ReachResult:
    return ReachResult(
        task_id=response.task_id,
        action_id=response.action_id,
        idempotency_key=response.idempotency_key,
        state=enum_word(ACTION_STATE, response.state),
        deduplicated=response.deduplicated,
    )


def cancel_result_from_pb(response: pb.CancelActionResponse) -> CancelResult:
    return CancelResult(
        action=action_from_pb(response.action),
        cancelled=response.cancelled,
        partial_failures=_failures(response.partial_failures),
    )


def channel_from_pb(channel: pb.Channel) -> Channel:
    return Channel(
        name=channel.name,
        kind=channel.kind,
        description=channel.description,
        side_effect=channel.side_effect,
        action_types=list(channel.action_types),
        parameters_schema=struct_to_dict(channel.parameters_schema),
        rules=list(channel.rules),
        idempotent=channel.idempotent,
        honours_idempotency_key=channel.honours_idempotency_key,
        can_poll=channel.can_poll,
        can_cancel=channel.can_cancel,
        send_rate_per_second=channel.send_rate_per_second,
        breaker_state=channel.breaker_state,
        window=channel.window,
    )


def unknown_review_from_pb(response: pb.GetUnknownReviewResponse) -> UnknownReview:
    return UnknownReview(
        groups=[
            UnknownReviewGroup(
                channel=group.channel,
                settled_by=group.settled_by,
                state=enum_word(ACTION_STATE, group.state),
                count=group.count,
                actions=[
                    UnknownReviewEntry(
                        action_id=entry.action_id,
                        task_id=entry.task_id,
                        name=entry.name,
                        entered_unknown_at=entry.entered_unknown_at,
                        settled_at=entry.settled_at,
                        resolved_by=entry.resolved_by,
                        note=entry.note,
                    )
                    for entry in group.actions
                ],
            )
            for group in response.groups
        ],
        total=response.total,
        since=response.since,
        generated_at=response.generated_at,
    )

"""Value types of reach: tasks made of actions, their receipts, history and channels.

States are the lowercase words the REST bridge prints (``"pending"``, ``"needs_review"``);
times are RFC 3339 UTC strings exactly as the server sent them, empty when not reached.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from reachstore._models import Failure

# Action states after which nothing more happens to an action by itself.
FINAL_ACTION_STATES = frozenset({"succeeded", "failed", "cancelled", "skipped"})
# Waiting for a person: re-checking could not settle it, an operator must resolve it.
REVIEW_ACTION_STATES = frozenset({"needs_review"})
FINISHED_TASK_STATES = frozenset({"succeeded", "failed"})


@dataclasses.dataclass(frozen=True)
class ActionInput:
    """One action of a task, as submitted. ``submit_task`` also takes a dict with the
    same keys.

    ``requirement`` is ``"required"`` (the task fails when this action does) or
    ``"optional"``; ``depends_on`` names actions of the same task that must succeed first.
    """

    name: str
    channel: str
    action_type: str
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    depends_on: Sequence[str] = ()
    requirement: str = "required"


@dataclasses.dataclass(frozen=True)
class Receipt:
    """The receiver's answer to one attempt or look-up."""

    attempt: int
    # "submit", "poll" or "cancel".
    operation: str
    external_id: str
    # HTTP status, SMTP reply code or gRPC status code; 0 when no answer came.
    status_code: int
    # At most 512 characters of the answer, personal data masked.
    snippet: str
    duration_ms: int
    # "accepted", "succeeded", "failed", "pending", "unknown" or "error".
    outcome: str
    created_at: str


@dataclasses.dataclass(frozen=True)
class HistoryEntry:
    """One state change of an action, with its reason (``"retry_scheduled"``, ...)."""

    at: str
    from_state: str
    to_state: str
    reason: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)


@dataclasses.dataclass(frozen=True)
class Resolution:
    """How an operator closed an action: ``outcome`` is ``"succeeded"`` or ``"failed"``."""

    outcome: str
    note: str
    resolved_by: str
    resolved_at: str


@dataclasses.dataclass(frozen=True)
class ReachAction:
    """One action: what was asked, where it stands, and why it failed if it did.

    ``failure`` carries the category, code and retry advice of a failed, unknown or
    under-review action; ``failure_kind`` says whose problem it is (``"business"`` or
    ``"technical"``; ``"unspecified"`` without a failure). ``receipts`` and ``history``
    are filled by ``get_action`` only.
    """

    action_id: str
    task_id: str
    name: str
    channel: str
    action_type: str
    params: dict[str, Any] = dataclasses.field(hash=False)
    depends_on: list[str] = dataclasses.field(hash=False)
    requirement: str
    idempotency_key: str
    window: str
    state: str
    attempts: int
    polls: int
    external_id: str
    failure: Failure | None
    failure_kind: str
    next_attempt_at: str
    resolution: Resolution | None
    receipts: list[Receipt] = dataclasses.field(hash=False)
    history: list[HistoryEntry] = dataclasses.field(hash=False)
    created_at: str
    updated_at: str
    finished_at: str

    @property
    def final(self) -> bool:
        """True once the action succeeded, failed, was cancelled or skipped."""
        return self.state in FINAL_ACTION_STATES

    @property
    def needs_review(self) -> bool:
        """True when a person must resolve it (``resolve_action``)."""
        return self.state in REVIEW_ACTION_STATES


@dataclasses.dataclass(frozen=True)
class ReachTask:
    """A task and its actions.

    ``state`` is ``pending``, ``running``, ``succeeded`` or ``failed``; a task fails as
    soon as a required action fails, while independent actions may still run.
    ``partial_failures`` (from ``get_reach_task``) has one entry per action that failed,
    is unknown or waits for review. ``deduplicated`` and ``validated_only`` describe a
    submission: the same task had been reserved before, or nothing was reserved because
    ``validate_only`` was set.
    """

    task_id: str
    entity_id: str
    idempotency_key: str
    logical_time: str
    state: str
    trace_id: str
    submitted_by: str
    # Grows with every change to the task or its actions; see get_reach_task's wait.
    version: int
    actions: list[ReachAction] = dataclasses.field(hash=False)
    created_at: str
    updated_at: str
    finished_at: str
    poll_after_ms: int | None
    partial_failures: list[Failure] = dataclasses.field(default_factory=list, hash=False)
    deduplicated: bool = False
    validated_only: bool = False

    @property
    def done(self) -> bool:
        """True once the task succeeded or failed."""
        return self.state in FINISHED_TASK_STATES

    @property
    def settled(self) -> bool:
        """True when waiting longer changes nothing without a person: the task is done,
        or every action is final or waits for review."""
        if self.done:
            return True
        return bool(self.actions) and all(a.final or a.needs_review for a in self.actions)

    def action(self, name: str) -> ReachAction:
        """The action of this task called ``name`` (KeyError if there is none)."""
        for action in self.actions:
            if action.name == name:
                return action
        raise KeyError(name)


@dataclasses.dataclass(frozen=True)
class ReachResult:
    """What the one-call ``reach`` reserved: follow it with ``wait_for_reach_task``."""

    task_id: str
    action_id: str
    idempotency_key: str
    # The action's state right after reservation.
    state: str
    # True when the same action had been reserved before.
    deduplicated: bool


@dataclasses.dataclass(frozen=True)
class CancelResult:
    """What cancelling did. When ``cancelled`` is false, ``partial_failures`` says why
    (``ACTION_ALREADY_FINISHED``, ``ACTION_IN_FLIGHT`` - retryable -, ``CANCEL_NOT_SUPPORTED``)."""

    action: ReachAction
    cancelled: bool
    partial_failures: list[Failure] = dataclasses.field(default_factory=list, hash=False)


@dataclasses.dataclass(frozen=True)
class Channel:
    """A channel, described as a tool an agent can call."""

    name: str
    # "webhook", "email" or "grpc".
    kind: str
    description: str
    side_effect: str
    action_types: list[str] = dataclasses.field(hash=False)
    # JSON Schema of its parameters.
    parameters_schema: dict[str, Any] = dataclasses.field(hash=False)
    rules: list[str] = dataclasses.field(hash=False)
    idempotent: bool
    honours_idempotency_key: bool
    can_poll: bool
    can_cancel: bool
    send_rate_per_second: float
    # "closed", "open" or "half_open", in the process that answered.
    breaker_state: str
    # How often one intent may recur: "none", "hour", "day" or "week" ("" from a server
    # older than the field).
    window: str = ""


@dataclasses.dataclass(frozen=True)
class UnknownReviewEntry:
    """One action that entered UNKNOWN in the review's period."""

    action_id: str
    task_id: str
    name: str
    # RFC 3339 UTC.
    entered_unknown_at: str
    # RFC 3339 UTC; "" while still open.
    settled_at: str
    # The key id of the person who resolved it, and their note; "" otherwise.
    resolved_by: str
    note: str


@dataclasses.dataclass(frozen=True)
class UnknownReviewGroup:
    """The actions of one channel settled the same way and ending in the same state."""

    channel: str
    # "lookup", "operator", "cancelled" or "open".
    settled_by: str
    # Their state now ("succeeded", "failed", "needs_review", ...).
    state: str
    count: int
    # At most 100, by when they entered UNKNOWN; ``count`` is the whole number.
    actions: list[UnknownReviewEntry] = dataclasses.field(hash=False)


@dataclasses.dataclass(frozen=True)
class UnknownReview:
    """Every action that passed through UNKNOWN since ``since``, grouped by channel and
    by how it was settled: the weekly read of docs/AT_MOST_ONCE.md's price."""

    groups: list[UnknownReviewGroup] = dataclasses.field(hash=False)
    total: int
    since: str
    generated_at: str

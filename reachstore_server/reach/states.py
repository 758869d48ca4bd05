"""Task and action states as stored, and the rules that connect them.

Stored as lowercase words (the proto enums' suffixes), so a row reads the same in SQL as
in the API. ``task_state`` is the one place that decides a task's state from its actions.
"""

from __future__ import annotations

from collections.abc import Iterable

# Actions.
BLOCKED = "blocked"
READY = "ready"
SUBMITTING = "submitting"
PENDING = "pending"
SUCCEEDED = "succeeded"
FAILED = "failed"
UNKNOWN = "unknown"
NEEDS_REVIEW = "needs_review"
CANCELLED = "cancelled"
SKIPPED = "skipped"

ACTION_STATES = (
    BLOCKED,
    READY,
    SUBMITTING,
    PENDING,
    SUCCEEDED,
    FAILED,
    UNKNOWN,
    NEEDS_REVIEW,
    CANCELLED,
    SKIPPED,
)
# No worker will touch these again; only an operator may still close UNKNOWN/NEEDS_REVIEW.
FINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, SKIPPED})
# The action did not and will not take effect: what depends on it is skipped.
DID_NOT_HAPPEN = frozenset({FAILED, CANCELLED, SKIPPED})
# States a worker claims when they are due (``next_at``): a send, a look-up, or the
# lease of a send whose worker vanished.
DUE_STATES = (READY, PENDING, UNKNOWN, SUBMITTING)
RESOLVABLE = frozenset({UNKNOWN, NEEDS_REVIEW})

# Failures, recorded on each failed action and its alerts: the business's (the receiver
# refused the request itself: a 4xx, a broken rule) or operations' (the way to the receiver
# failed: timeouts, 5xx, an open breaker). ``engine.alert_channels`` routes each kind.
BUSINESS = "business"
TECHNICAL = "technical"
FAILURE_KINDS = (BUSINESS, TECHNICAL)

# Tasks.
TASK_PENDING = "pending"
TASK_RUNNING = "running"
TASK_SUCCEEDED = "succeeded"
TASK_FAILED = "failed"
TASK_STATES = (TASK_PENDING, TASK_RUNNING, TASK_SUCCEEDED, TASK_FAILED)
TASK_FINAL = frozenset({TASK_SUCCEEDED, TASK_FAILED})


def task_state(actions: Iterable[tuple[str, bool, int]]) -> str:
    """A task's state from its actions' (state, required, attempts) triples.

    Failed as soon as a required action cannot succeed any more (independent actions may
    still be running); succeeded only when every required action succeeded and every
    action has finished; pending while nothing has been sent or settled yet.
    """
    rows = list(actions)
    if any(required and state in DID_NOT_HAPPEN for state, required, _ in rows):
        return TASK_FAILED
    if all(state in FINAL for state, _, _ in rows) and all(
        state == SUCCEEDED for state, required, _ in rows if required
    ):
        return TASK_SUCCEEDED
    if all(state in (BLOCKED, READY) and attempts == 0 for state, _, attempts in rows):
        return TASK_PENDING
    return TASK_RUNNING

"""Reach operations: submitting tasks and single actions, following them, settling them.

Each method returns a flow (see ``_flow``); the clients' methods of the same names run
them and carry the user-facing documentation.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from reachstore import _convert_reach as convert
from reachstore._errors import DeadlineError, TaskWaitTimeoutError
from reachstore._flow import Flow, sleep
from reachstore._ops_common import OperationsBase
from reachstore._ops_storage import wait_timeout_error
from reachstore._paging import Page, Pages
from reachstore._reach_models import (
    ActionInput,
    CancelResult,
    Channel,
    ReachAction,
    ReachResult,
    ReachTask,
    UnknownReview,
)
from reachstore.reach.v1 import reach_service_pb2 as pb

# The longest wait GetTask accepts in one call.
MAX_WAIT_MS = 30_000
# A long poll asks the server to answer this much before the caller's deadline, so the
# answer arrives in time rather than the deadline cutting the call.
LONG_POLL_MARGIN_S = 0.5
# Between quick polls, when too little time is left for a long one.
SHORT_POLL_MS = 100

ActionArg = ActionInput | Mapping[str, Any]


class ReachOperations(OperationsBase):
    def submit_task(
        self,
        entity_id: str,
        actions: Sequence[ActionArg],
        idempotency_key: str | None,
        logical_time: str | None,
        validate_only: bool,
        trace_id: str | None,
        timeout: float | None,
    ) -> Flow[ReachTask]:
        if isinstance(actions, (Mapping, ActionInput)):
            raise TypeError("actions must be a list of actions; pass [action] for one")
        request = pb.SubmitTaskRequest(
            entity_id=entity_id,
            idempotency_key=idempotency_key or "",
            logical_time=logical_time or "",
            actions=[convert.action_spec_to_pb(a) for a in actions],
            validate_only=validate_only,
            trace_id=trace_id or "",
        )
        response = yield from self._call(
            "ReachService.SubmitTask", request, pb.SubmitTaskResponse, timeout
        )
        return convert.submitted_from_pb(response)

    def reach(
        self,
        action: ActionArg,
        entity_id: str,
        idempotency_key: str | None,
        logical_time: str | None,
        trace_id: str | None,
        timeout: float | None,
    ) -> Flow[ReachResult]:
        request = pb.ReachRequest(
            action=convert.action_spec_to_pb(action),
            entity_id=entity_id,
            idempotency_key=idempotency_key or "",
            logical_time=logical_time or "",
            trace_id=trace_id or "",
        )
        response = yield from self._call("ReachService.Reach", request, pb.ReachResponse, timeout)
        return convert.reach_result_from_pb(response)

    def get_reach_task(
        self, task_id: str, wait_ms: int, known_version: int, timeout: float | None
    ) -> Flow[ReachTask]:
        if timeout is None and wait_ms > 0:
            # The server holds the call for up to wait_ms; the usual deadline is for the rest.
            timeout = self.timeout + wait_ms / 1000
        response = yield from self._call(
            "ReachService.GetTask",
            pb.GetTaskRequest(task_id=task_id, wait_ms=wait_ms, known_version=known_version),
            pb.GetTaskResponse,
            timeout,
        )
        return convert.task_from_pb(response.task, response.partial_failures)

    def wait_for_reach_task(
        self, task: str | ReachTask | ReachResult, timeout: float
    ) -> Flow[ReachTask]:
        task_id = task if isinstance(task, str) else task.task_id
        deadline = time.monotonic() + timeout
        last: ReachTask | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _reach_wait_timeout(task_id, timeout, last)
            # The first look is immediate (the task may already be settled, which a long
            # poll would sit out); after that, each call waits for the next change.
            wait_ms = 0
            if last is not None:
                wait_ms = max(0, min(MAX_WAIT_MS, int((remaining - LONG_POLL_MARGIN_S) * 1000)))
            budget = remaining if wait_ms else min(self.timeout, remaining)
            try:
                last = yield from self.get_reach_task(
                    task_id, wait_ms, last.version if last else 0, budget
                )
            except DeadlineError as exc:
                if budget >= remaining:
                    raise _reach_wait_timeout(task_id, timeout, last) from exc
                raise
            if last.settled:
                return last
            if not wait_ms and time.monotonic() < deadline - SHORT_POLL_MS / 1000:
                # Too little time for a long poll: look again shortly instead of spinning.
                yield from sleep(SHORT_POLL_MS / 1000)

    def task_pages(
        self,
        state: str | None,
        channel: str | None,
        entity_id: str | None,
        page_size: int,
        timeout: float | None,
    ) -> Pages[ReachTask]:
        # Checked now, so a wrong state fails at the call rather than at the first item.
        state_number = convert.task_state_arg(state)

        def page(token: str) -> Flow[Page[ReachTask]]:
            request = pb.ListTasksRequest(
                state=state_number,
                channel=channel or "",
                entity_id=entity_id or "",
                page_size=page_size,
                page_token=token,
            )
            response = yield from self._call(
                "ReachService.ListTasks", request, pb.ListTasksResponse, timeout
            )
            return Page([convert.task_from_pb(t) for t in response.tasks], response.next_page_token)

        return page

    def get_action(self, action_id: str, timeout: float | None) -> Flow[ReachAction]:
        response = yield from self._call(
            "ReachService.GetAction",
            pb.GetActionRequest(action_id=action_id),
            pb.GetActionResponse,
            timeout,
        )
        return convert.action_from_pb(response.action)

    def cancel_action(self, action_id: str, timeout: float | None) -> Flow[CancelResult]:
        response = yield from self._call(
            "ReachService.CancelAction",
            pb.CancelActionRequest(action_id=action_id),
            pb.CancelActionResponse,
            timeout,
        )
        return convert.cancel_result_from_pb(response)

    def resolve_action(
        self, action_id: str, outcome: str, note: str, timeout: float | None
    ) -> Flow[ReachAction]:
        request = pb.ResolveActionRequest(
            action_id=action_id, outcome=convert.resolution_arg(outcome), note=note
        )
        response = yield from self._call(
            "ReachService.ResolveAction", request, pb.ResolveActionResponse, timeout
        )
        return convert.action_from_pb(response.action)

    def list_channels(self, timeout: float | None) -> Flow[list[Channel]]:
        response = yield from self._call(
            "ReachService.ListChannels", pb.ListChannelsRequest(), pb.ListChannelsResponse, timeout
        )
        return [convert.channel_from_pb(c) for c in response.channels]

    def unknown_review(
        self, since_s: int, channel: str | None, timeout: float | None
    ) -> Flow[UnknownReview]:
        request = pb.GetUnknownReviewRequest(since_s=since_s, channel=channel or "")
        response = yield from self._call(
            "ReachService.GetUnknownReview", request, pb.GetUnknownReviewResponse, timeout
        )
        return convert.unknown_review_from_pb(response)


def _reach_wait_timeout(
    task_id: str, timeout: float, last: ReachTask | None
) -> TaskWaitTimeoutError:
    failure = wait_timeout_error(
        "reach task",
        task_id,
        timeout,
        last.state if last else None,
        last.poll_after_ms if last else None,
    )
    return TaskWaitTimeoutError(failure, task=last)

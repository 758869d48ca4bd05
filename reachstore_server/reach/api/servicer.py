"""ReachService: reserve tasks, report on them, cancel and resolve actions.

Handlers only check, reserve and read; the executor (same process) sends. Every read is
scoped to the caller's tenant, and a task or action of another tenant is simply not found;
nor is one with an action outside the key's channel allow-list (``visibility.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from reachstore_server.audit_client import outbox
from reachstore_server.common import errors, names, otel, paging
from reachstore_server.common.auth import Caller
from reachstore_server.common.identity import caller
from reachstore_server.common.pii import Masker
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.common.tracing import trace_from_metadata
from reachstore_server.reach import states as st
from reachstore_server.reach.api import convert, visibility
from reachstore_server.reach.api.operator import (
    OperatorCalls,
    action_not_found,
    archived_action,
    replica_name,
)
from reachstore_server.reach.channels.base import Channel, Outgoing
from reachstore_server.reach.config import ReachConfig
from reachstore_server.reach.idempotency import KeySecrets
from reachstore_server.reach.metrics import ReachMetrics
from reachstore_server.reach.planning import MAX_ACTIONS, plan_task
from reachstore_server.reach.policy.breaker import CircuitBreaker
from reachstore_server.reach.store import Change, ReachStore, Settled, TaskPlan
from reachstore_server.reach.watch import TaskChanges
from reachstore_server.storage.reach_models import ReachActionRow

MAX_WAIT_MS = 30_000
MAX_NOTE = 2000
_UNSENT = (st.BLOCKED, st.READY)
_SENT_OPEN = (st.PENDING, st.UNKNOWN, st.NEEDS_REVIEW)


class ReachServicer(OperatorCalls, pb_grpc.ReachServiceServicer):
    def __init__(
        self,
        store: ReachStore,
        config: ReachConfig,
        channels: Mapping[str, Channel],
        breakers: Mapping[str, CircuitBreaker],
        wake: Callable[[], None],
        changes: TaskChanges,
        *,
        key_secrets: KeySecrets,
        metrics: ReachMetrics | None = None,
        replica: str = "",
        masker: Masker | None = None,
    ) -> None:
        self._store = store
        self._key_secrets = key_secrets
        self._config = config
        self._channels = channels
        self._breakers = breakers
        self._wake = wake
        self._changes = changes
        self._metrics = metrics
        self._replica = replica_name(replica)
        self._masker = masker

    # --- submitting ------------------------------------------------------------------------

    async def SubmitTask(
        self, request: pb.SubmitTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubmitTaskResponse:
        # Counted before the actions are decoded: an oversized list costs nothing.
        names.check_count(request.actions, "actions", MAX_ACTIONS, "actions")
        # The window is the server's, and "the server" is every replica at once: the
        # database's clock, so two replicas whose clocks differ mint the same key.
        spec = convert.task_spec(request)
        who = caller(context)
        trace = trace_from_metadata(tuple(context.invocation_metadata() or ()))

        def plan_at(now: float) -> TaskPlan:
            plan = plan_task(
                spec,
                who,
                self._config,
                self._channels,
                trace,
                dt.datetime.fromtimestamp(now, dt.UTC),
                key_secrets=self._key_secrets,
            )
            # The call's audit event names the keys it reserves (or would reserve).
            outbox.annotate(plan.caller_key or " ".join(a.idem_key for a in plan.actions))
            return plan

        if not request.validate_only:
            # The clock is read inside the reservation's transaction.
            reserved = await asyncio.to_thread(self._store.reserve_planned, plan_at)
            if not reserved.deduplicated:
                # The span the task's sends name as their parent (``otel.task_span``).
                otel.task_span(reserved.task.task_id, reserved.task.trace_id)
                self._wake()
            return pb.SubmitTaskResponse(
                task=convert.task_to_pb(reserved.task, reserved.actions),
                deduplicated=reserved.deduplicated,
            )
        plan = plan_at(await asyncio.to_thread(self._store.clock))
        preview = pb.Task(
            entity_id=plan.entity_id,
            idempotency_key=plan.caller_key or "",
            logical_time=rfc3339(plan.logical_time),
            state=pb.TASK_STATE_PENDING,
            trace_id=plan.trace_id,
            submitted_by=plan.submitted_by,
        )
        for a in plan.actions:
            preview.actions.add(
                name=a.name,
                channel=a.channel,
                action_type=a.action_type,
                params=convert.struct(a.params),
                depends_on=a.depends_on,
                requirement=pb.REQUIREMENT_REQUIRED if a.required else pb.REQUIREMENT_OPTIONAL,
                idempotency_key=a.idem_key,
                window=a.window,
                state=pb.ACTION_STATE_BLOCKED if a.depends_on else pb.ACTION_STATE_READY,
            )
        return pb.SubmitTaskResponse(task=preview, validated_only=True)

    async def Reach(
        self, request: pb.ReachRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReachResponse:
        action = pb.ActionSpec()
        action.CopyFrom(request.action)
        if not action.name:
            action.name = (
                action.action_type if names.is_namespace_name(action.action_type) else "action"
            )
        submitted = await self.SubmitTask(
            pb.SubmitTaskRequest(
                entity_id=request.entity_id,
                idempotency_key=request.idempotency_key,
                logical_time=request.logical_time,
                trace_id=request.trace_id,
                actions=[action],
            ),
            context,
        )
        only = submitted.task.actions[0]
        return pb.ReachResponse(
            task_id=submitted.task.task_id,
            action_id=only.action_id,
            idempotency_key=only.idempotency_key,
            state=only.state,
            deduplicated=submitted.deduplicated,
        )

    # --- reading ---------------------------------------------------------------------------

    async def GetTask(
        self, request: pb.GetTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTaskResponse:
        who = caller(context)
        if not 0 <= request.wait_ms <= MAX_WAIT_MS:
            raise errors.invalid("wait_ms", f"0 to {MAX_WAIT_MS} milliseconds")
        if request.wait_ms:
            # A hidden task is not waited on: like a missing one, it is answered at once.
            if who.channels and await self._find_task(who, request.task_id) is None:
                raise _task_not_found(request.task_id)
            found = await self._wait_for_change(
                who, request.task_id, request.known_version, request.wait_ms
            )
        else:
            found = None
        if found is None:
            found = await self._find_task(who, request.task_id)
        if found is None:
            raise _task_not_found(request.task_id)
        task, actions = found
        return pb.GetTaskResponse(
            task=convert.task_to_pb(task, actions),
            partial_failures=convert.reported_failures(actions),
        )

    async def _find_task(self, who: Caller, task_id: str) -> visibility.FoundTask | None:
        return await asyncio.to_thread(visibility.find_task, self._store, who, task_id)

    async def _wait_for_change(
        self, who: Caller, task_id: str, known: int, wait_ms: int
    ) -> visibility.FoundTask | None:
        """Returns when the task's version differs from ``known`` (or from its version now),
        when it is finished, or when ``wait_ms`` has passed. Reads the store, so a change
        made by any reach process ends the wait. Woken by a change of this process, it
        reads the whole task at once and answers it (one read, not a version and then the
        task); None: the caller reads it."""
        tenant = who.tenant
        deadline = time.monotonic() + wait_ms / 1000

        def version() -> Any:
            return self._changes.shared(
                task_id, ("version", tenant), lambda: self._store.task_version(tenant, task_id)
            )

        with self._changes.watching(task_id) as changed:
            first = await version()
            if first is None:
                return None  # the caller gets the not-found answer at once
            version_now, state = first
            baseline = known or version_now
            while version_now == baseline and state not in st.TASK_FINAL:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if await self._changes.wait(changed, left):
                    whole = await self._changes.shared(
                        task_id, ("task", tenant), lambda: self._store.get_task(tenant, task_id)
                    )
                    found = (
                        whole
                        if whole is not None and visibility.task_visible(who, whole[1])
                        else None
                    )
                    if found is None:
                        return None
                    version_now, state = found[0].version, found[0].state
                    if version_now != baseline or state in st.TASK_FINAL:
                        return found
                    continue
                current = await version()
                if current is None:
                    return None
                version_now, state = current
        return None

    async def ListTasks(
        self, request: pb.ListTasksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTasksResponse:
        who = caller(context)
        tenant = who.tenant
        size = names.page_size(request.page_size)
        before = paging.decode_token(request.page_token)
        state = convert.TASK_STATE_NAMES.get(request.state, "")
        if request.state and not state:
            raise errors.invalid("state", "a TaskState value")
        rows = await asyncio.to_thread(
            self._store.list_tasks,
            tenant,
            state,
            request.channel[:64],
            request.entity_id[:256],
            size + 1,
            before,
        )
        page = rows[:size]
        token = paging.encode_token(page[-1][0].task_id) if len(rows) > size else ""
        # Tasks the key may not see are left out, so a page may come back short.
        shown = [(t, a) for t, a in page if visibility.task_visible(who, a)]
        return pb.ListTasksResponse(
            tasks=[convert.task_to_pb(t, a) for t, a in shown], next_page_token=token
        )

    async def GetAction(
        self, request: pb.GetActionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetActionResponse:
        found = await asyncio.to_thread(
            visibility.find_action, self._store, caller(context), request.action_id
        )
        if found is None:
            archived = await asyncio.to_thread(
                visibility.find_archived_action, self._store, caller(context), request.action_id
            )
            if archived is not None:
                raise archived_action(archived)
            raise action_not_found(request.action_id)
        row, receipts, history = found
        failures = convert.reported_failures([row])
        return pb.GetActionResponse(
            action=convert.action_to_pb(row, receipts, history), partial_failures=failures
        )

    async def ListChannels(
        self, request: pb.ListChannelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListChannelsResponse:
        who = caller(context)
        response = pb.ListChannelsResponse()
        for name, cfg in sorted(self._config.channels.items()):
            if not who.may_reach(name):
                continue
            channel = self._channels[name]
            response.channels.add(
                name=name,
                kind=cfg.kind,
                description=cfg.description,
                side_effect=cfg.side_effect,
                action_types=cfg.action_types,
                parameters_schema=convert.struct(dict(cfg.rules.schema)),
                rules=cfg.rules.rule_messages,
                idempotent=cfg.idempotent,
                honours_idempotency_key=cfg.receiver_deduplicates,
                can_poll=channel.can_poll,
                can_cancel=channel.can_cancel,
                send_rate_per_second=cfg.send_rate_per_second,
                breaker_state=self._breakers[name].state,
                window=cfg.window,
            )
        return response

    # --- changing --------------------------------------------------------------------------

    async def CancelAction(
        self, request: pb.CancelActionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelActionResponse:
        who = caller(context)
        found = await asyncio.to_thread(visibility.find_action, self._store, who, request.action_id)
        if found is None:
            raise action_not_found(request.action_id)
        row = found[0]
        cancelled = _cancel_change("cancelled_by_caller", who.key_id)
        if row.state == st.CANCELLED:
            return await self._cancel_answer(who.tenant, row.action_id, True, None)
        if row.state in st.FINAL:
            reason = errors.make_failure(
                errors.ACTION_ALREADY_FINISHED,
                f"the action already finished as {row.state}",
                action_id=row.action_id,
                structured_data={"state": row.state},
            )
            return await self._cancel_answer(who.tenant, row.action_id, False, reason)
        if row.state in _UNSENT:
            done = await self._settle_unleased(who.tenant, row, _UNSENT, cancelled, never_sent=True)
            if done.applied:
                return await self._cancel_answer(who.tenant, row.action_id, True, None)
            if row.ambiguous_sends:
                return await self._stop_uncertain(who.tenant, row, who.key_id, _UNSENT)
            return await self._cancel_answer(
                who.tenant, row.action_id, False, _in_flight(row.action_id)
            )
        if row.state == st.SUBMITTING:
            return await self._cancel_answer(
                who.tenant, row.action_id, False, _in_flight(row.action_id)
            )
        channel = self._channels.get(row.channel)
        accepted = False
        if channel is not None and channel.can_cancel and row.external_id:
            outgoing = Outgoing(
                row.action_id,
                row.idem_key,
                row.action_type,
                json.loads(row.params_json),
                "",
                row.tenant,
                "",
            )
            accepted = await channel.cancel(outgoing, row.external_id)
        if not accepted:
            reason = errors.make_failure(
                errors.CANCEL_NOT_SUPPORTED,
                "the action was already sent and its receiver did not cancel it",
                action_id=row.action_id,
                structured_data={
                    "state": row.state,
                    "channel_can_cancel": bool(channel and channel.can_cancel),
                },
            )
            return await self._cancel_answer(who.tenant, row.action_id, False, reason)
        if row.ambiguous_sends and row.attempts > 1:
            # The receiver cancelled the send it knows by this id; an earlier one may have
            # taken effect all the same.
            return await self._stop_uncertain(who.tenant, row, who.key_id, _SENT_OPEN)
        cancelled.reason = "cancelled_at_receiver"
        done = await self._settle_unleased(who.tenant, row, _SENT_OPEN, cancelled)
        lost = None if done.applied else _in_flight(row.action_id)
        return await self._cancel_answer(who.tenant, row.action_id, done.applied, lost)

    async def _stop_uncertain(
        self, tenant: str, row: ReachActionRow, by: str, expected: tuple[str, ...]
    ) -> pb.CancelActionResponse:
        """A cancel of an action one of whose sends may have taken effect (it waits to be
        re-sent, or the receiver cancelled only the latest send): "cancelled" would say it
        did not happen, which nobody knows. No more attempts are made; it goes to UNKNOWN,
        to be looked up or reviewed."""
        stop = Change(
            st.UNKNOWN,
            "cancel_after_uncertain_send",
            {"by": by},
            due_in=0.0,
            failure={
                "code": errors.OUTCOME_UNKNOWN.code,
                "message": "outcome unknown: cancelled after a send that may have taken effect",
                "retry_after_ms": 1000,
                "data": {"cause": "cancel_after_uncertain_send"},
            },
            failure_kind="technical",
        )
        done = await self._settle_unleased(tenant, row, expected, stop)
        if not done.applied:
            return await self._cancel_answer(
                tenant, row.action_id, False, _in_flight(row.action_id)
            )
        reason = errors.make_failure(
            errors.CANCEL_NOT_SUPPORTED,
            "an earlier send may have taken effect: no more attempts are made, and the "
            "action is looked up and, if undecided, goes to review",
            action_id=row.action_id,
            structured_data={"state": st.UNKNOWN, "ambiguous_sends": row.ambiguous_sends},
        )
        return await self._cancel_answer(tenant, row.action_id, False, reason)

    async def _settle_unleased(
        self,
        tenant: str,
        row: ReachActionRow,
        expected: tuple[str, ...],
        change: Change,
        *,
        never_sent: bool = False,
    ) -> Settled:
        settled = await asyncio.to_thread(
            functools.partial(
                self._store.settle_unleased,
                tenant,
                row.action_id,
                expected,
                change,
                never_sent=never_sent,
            )
        )
        if settled.applied:
            self._changes.notify(row.task_id)
        return settled

    async def _cancel_answer(
        self,
        tenant: str,
        action_id: str,
        cancelled: bool,
        reason: pf_pb2.PartialFailure | None,
    ) -> pb.CancelActionResponse:
        found = await asyncio.to_thread(self._store.get_action, tenant, action_id)
        assert found is not None
        response = pb.CancelActionResponse(
            action=convert.action_to_pb(found[0]), cancelled=cancelled
        )
        if reason is not None:
            response.partial_failures.append(reason)
        return response

    async def ResolveAction(
        self, request: pb.ResolveActionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResolveActionResponse:
        who = caller(context)
        if request.outcome not in (pb.RESOLUTION_SUCCEEDED, pb.RESOLUTION_FAILED):
            raise errors.invalid("outcome", "RESOLUTION_SUCCEEDED or RESOLUTION_FAILED")
        note = request.note.strip()
        if not 1 <= len(note) <= MAX_NOTE:
            raise errors.invalid("note", f"1 to {MAX_NOTE} characters: what was checked")
        found = await asyncio.to_thread(visibility.find_action, self._store, who, request.action_id)
        if found is None:
            raise action_not_found(request.action_id)
        row = found[0]
        if row.state not in st.RESOLVABLE:
            raise errors.ReachstoreError(
                errors.ACTION_NOT_RESOLVABLE,
                f"the action is {row.state}; only unknown or needs_review can be resolved",
                structured_data={"state": row.state, "action_id": row.action_id},
            )
        succeeded = request.outcome == pb.RESOLUTION_SUCCEEDED
        outcome = "succeeded" if succeeded else "failed"
        change = Change(
            st.SUCCEEDED if succeeded else st.FAILED,
            f"resolved_{outcome}",
            {"note": note, "resolved_by": who.key_id},
            resolution={
                "outcome": outcome,
                "note": note,
                "resolved_by": who.key_id,
                "resolved_at": rfc3339(dt.datetime.now(dt.UTC)),
            },
        )
        if not succeeded:
            change.failure = {
                "code": errors.RESOLVED_FAILED.code,
                "message": f"resolved as failed: {note[:200]}",
                "data": {"final": True},
            }
            change.failure_kind = row.failure_kind or "technical"
        done = await self._settle_unleased(who.tenant, row, tuple(st.RESOLVABLE), change)
        if not done.applied:
            raise errors.ReachstoreError(
                errors.ACTION_IN_FLIGHT,
                "the action is being looked up right now; resolve it again in a moment",
                structured_data={"action_id": row.action_id},
            )
        after = await asyncio.to_thread(self._store.get_action, who.tenant, row.action_id)
        assert after is not None
        return pb.ResolveActionResponse(action=convert.action_to_pb(*after))


def _cancel_change(reason: str, by: str) -> Change:
    return Change(
        st.CANCELLED,
        reason,
        {"by": by},
        failure={
            "code": errors.ACTION_CANCELLED.code,
            "message": "cancelled on request",
            "data": {"final": True},
        },
        failure_kind="business",
    )


def _in_flight(action_id: str) -> pf_pb2.PartialFailure:
    return errors.make_failure(
        errors.ACTION_IN_FLIGHT,
        "the action is being sent or looked up right now; try again in a moment",
        action_id=action_id,
    )


def _task_not_found(task_id: str) -> errors.ReachstoreError:
    return errors.ReachstoreError(
        errors.REACH_TASK_NOT_FOUND, structured_data={"task_id": task_id[:64]}
    )

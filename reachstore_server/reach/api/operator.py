"""The operator's calls of ReachService: the review queue, an immediate re-check,
per-channel health with its alert baselines, and the weekly UNKNOWN review.

A mixin of ``ReachServicer`` (it uses the servicer's store, channels, breakers and wake-up),
kept apart because these calls serve the people running reach, not the agents using it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable, Mapping

import grpc

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore_server.common import errors, names, paging
from reachstore_server.common.config import process_name
from reachstore_server.common.identity import caller
from reachstore_server.common.pii import Masker
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.reach import baseline, health, unknown_review
from reachstore_server.reach import states as st
from reachstore_server.reach.api import convert, visibility
from reachstore_server.reach.channels.base import Channel
from reachstore_server.reach.config import ReachConfig
from reachstore_server.reach.metrics import ReachMetrics
from reachstore_server.reach.policy.breaker import CircuitBreaker
from reachstore_server.reach.store import Change, ReachStore, Settled
from reachstore_server.storage.models import TENANT_LEN
from reachstore_server.storage.reach_models import ReachActionRow, ReachArchivedKeyRow

MAX_STATES = 10
MAX_AGE_S = 365 * 24 * 3600
# The UNKNOWN review's period: a week by default (the weekly read), up to 90 days.
DEFAULT_REVIEW_S = 7 * 24 * 3600
MIN_REVIEW_S = 3600
MAX_REVIEW_S = 90 * 24 * 3600
_STATE_BY_ENUM = {convert.action_state(name): name for name in st.ACTION_STATES}


def replica_name(worker_id: str = "") -> str:
    """How a reach process names itself in answers that hold per-process figures."""
    return worker_id or process_name()


def action_not_found(action_id: str) -> errors.ReachstoreError:
    return errors.ReachstoreError(
        errors.ACTION_NOT_FOUND, structured_data={"action_id": action_id[:64]}
    )


def archived_action(row: ReachArchivedKeyRow) -> errors.ReachstoreError:
    """An action whose rows left the live tables after the dedupe retention: still not
    found (its receipts and history are gone), but said to be archived, with how it ended."""
    finished = rfc3339(row.finished_at) if row.finished_at else ""
    return errors.ReachstoreError(
        errors.ACTION_NOT_FOUND,
        f"action {row.action_id} was archived after the dedupe retention "
        f"(engine.dedupe_retention_days) on {rfc3339(row.archived_at)}; it ended {row.state}"
        f"{' on ' + finished if finished else ''}, and its key still refuses duplicates",
        structured_data={
            "action_id": row.action_id,
            "reason": "archived",
            "state": row.state,
            "finished_at": finished,
            "archived_at": rfc3339(row.archived_at),
        },
    )


class OperatorCalls:
    """ListActions, RecheckAction, GetChannelHealth and GetUnknownReview (operator scope,
    from the protos)."""

    _store: ReachStore
    _config: ReachConfig
    _channels: Mapping[str, Channel]
    _breakers: Mapping[str, CircuitBreaker]
    _wake: Callable[[], None]
    _metrics: ReachMetrics | None
    _replica: str
    _masker: Masker | None

    async def _settle_unleased(
        self, tenant: str, row: ReachActionRow, expected: tuple[str, ...], change: Change
    ) -> Settled:
        raise NotImplementedError  # provided by ReachServicer

    # --- the review queue -------------------------------------------------------------------

    async def ListActions(
        self, request: pb.ListActionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListActionsResponse:
        who = caller(context)
        if len(request.tenant) > TENANT_LEN:
            raise errors.invalid("tenant", f"at most {TENANT_LEN} characters")
        tenant = request.tenant or who.tenant
        if tenant != who.tenant and "auditor" not in who.scopes:
            raise errors.ReachstoreError(
                errors.AUTH_SCOPE_MISSING,
                "listing another tenant's actions needs the 'auditor' scope as well",
                structured_data={"required_scope": "auditor", "field": "tenant"},
            )
        names.check_count(request.states, "states", MAX_STATES)
        wanted = []
        for i, value in enumerate(request.states):
            name = _STATE_BY_ENUM.get(value)
            if name is None:
                raise errors.invalid(f"states[{i}]", "an ActionState value other than UNSPECIFIED")
            wanted.append(name)
        if len(request.channel) > 64:
            raise errors.invalid("channel", "at most 64 characters")
        for field in ("min_age_s", "max_age_s"):
            if not 0 <= getattr(request, field) <= MAX_AGE_S:
                raise errors.invalid(field, f"0 to {MAX_AGE_S} seconds (0: no bound)")
        if request.max_age_s and request.max_age_s < request.min_age_s:
            raise errors.invalid("max_age_s", "must not be below min_age_s")
        size = names.page_size(request.page_size)
        after = paging.decode_token(request.page_token)
        now = dt.datetime.now(dt.UTC)
        before = now - dt.timedelta(seconds=request.min_age_s) if request.min_age_s else None
        since = now - dt.timedelta(seconds=request.max_age_s) if request.max_age_s else None
        rows = await asyncio.to_thread(
            self._store.list_actions,
            tenant,
            wanted,
            request.channel,
            since,
            before,
            size + 1,
            after,
        )
        page = rows[:size]
        token = paging.encode_token(page[-1].action_id) if len(rows) > size else ""
        # Actions of tasks the key may not see are left out: a page may come back short.
        page = await asyncio.to_thread(visibility.visible_actions, self._store, who, page)
        return pb.ListActionsResponse(
            actions=[self._masked(row) for row in page],
            next_page_token=token,
            tenant=tenant,
            partial_failures=convert.reported_failures(page),
        )

    def _masked(self, row: ReachActionRow) -> pb.Action:
        """The action with its parameters masked, for a queue many people look at."""
        action = convert.action_to_pb(row)
        if self._masker is not None:
            action.params.Clear()
            action.params.update(self._masker.mask_value(json.loads(row.params_json)))
        return action

    async def RecheckAction(
        self, request: pb.RecheckActionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecheckActionResponse:
        who = caller(context)
        if not request.action_id:
            raise errors.invalid("action_id", "is required")
        found = await asyncio.to_thread(visibility.find_action, self._store, who, request.action_id)
        if found is None:
            raise action_not_found(request.action_id)
        row = found[0]
        if row.state not in st.RESOLVABLE:
            raise errors.ReachstoreError(
                errors.ACTION_NOT_RECHECKABLE,
                f"the action is {row.state}; only unknown or needs_review can be looked up again",
                structured_data={"state": row.state, "action_id": row.action_id},
            )
        channel = self._channels.get(row.channel)
        if channel is None or not channel.can_poll:
            raise errors.ReachstoreError(
                errors.ACTION_NOT_RECHECKABLE,
                f"channel {row.channel!r} has no status look-up; resolve the action instead",
                structured_data={"channel": row.channel, "action_id": row.action_id},
            )
        # Back to UNKNOWN and due now: the executor's next claim looks it up (never re-sends).
        # A NEEDS_REVIEW action has used up its look-ups, so an undecided answer returns it
        # to review at once.
        change = Change(
            st.UNKNOWN,
            "recheck_requested",
            {"by": who.key_id},
            due_in=0.0,
            failure={
                "code": errors.OUTCOME_UNKNOWN.code,
                "message": "outcome unknown: an operator asked for a look-up now",
                "retry_after_ms": 1000,
                "data": {"cause": "recheck_requested"},
            },
            failure_kind="technical",
        )
        done = await self._settle_unleased(who.tenant, row, tuple(st.RESOLVABLE), change)
        if done.applied:
            self._wake()
        after = await asyncio.to_thread(self._store.get_action, who.tenant, row.action_id)
        assert after is not None
        response = pb.RecheckActionResponse(
            action=convert.action_to_pb(after[0]), scheduled=done.applied
        )
        if not done.applied:
            response.partial_failures.append(
                errors.make_failure(
                    errors.ACTION_IN_FLIGHT,
                    "the action is being looked up right now; ask again in a moment",
                    action_id=row.action_id,
                )
            )
        return response

    # --- health -----------------------------------------------------------------------------

    async def GetChannelHealth(
        self, request: pb.GetChannelHealthRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetChannelHealthResponse:
        who = caller(context)
        window_s = request.window_s or health.DEFAULT_WINDOW_S
        if not health.MIN_WINDOW_S <= window_s <= health.MAX_WINDOW_S:
            raise errors.invalid(
                "window_s",
                f"{health.MIN_WINDOW_S} to {health.MAX_WINDOW_S} seconds (0: "
                f"{health.DEFAULT_WINDOW_S})",
            )
        bucket_s = request.bucket_s or health.default_bucket_s(window_s)
        if not health.MIN_BUCKET_S <= bucket_s <= health.MAX_BUCKET_S:
            raise errors.invalid(
                "bucket_s", f"{health.MIN_BUCKET_S} to {health.MAX_BUCKET_S} seconds"
            )
        if -(-window_s // bucket_s) > health.MAX_BUCKETS:
            raise errors.invalid(
                "bucket_s",
                f"the window may hold at most {health.MAX_BUCKETS} buckets",
                limit=health.MAX_BUCKETS,
                actual=-(-window_s // bucket_s),
            )
        visible = [name for name in sorted(self._config.channels) if who.may_reach(name)]
        if request.channel:
            if request.channel not in visible:
                # An unknown channel reads exactly like a forbidden one.
                raise errors.ReachstoreError(
                    errors.CHANNEL_NOT_ALLOWED,
                    f"channel {request.channel[:64]!r} is not available to this key",
                    field="channel",
                    structured_data={"channel": request.channel[:64]},
                )
            visible = [request.channel]
        now = dt.datetime.now(dt.UTC)
        rows = await asyncio.to_thread(
            self._store.health_rows,
            who.tenant,
            now - dt.timedelta(seconds=window_s + bucket_s),
        )
        signals = health.channel_signals(
            visible, now, window_s, bucket_s, rows.current, rows.finished, rows.changes
        )
        baselines = await self._baselines(who.tenant, visible, now)
        response = pb.GetChannelHealthResponse(
            window_s=window_s,
            bucket_s=bucket_s,
            replica=self._replica,
            generated_at=rfc3339(now),
        )
        for signal in signals:
            entry = response.channels.add(
                channel=signal.channel, breaker_state=self._breakers[signal.channel].state
            )
            for state in st.ACTION_STATES:
                if signal.current.get(state):
                    entry.current.add(
                        state=convert.action_state(state), count=signal.current[state]
                    )
            for bucket in signal.buckets:
                out = entry.buckets.add(
                    start=rfc3339(bucket.start),
                    finished=len(bucket.latencies_ms),
                    latency_p50_ms=bucket.percentile(0.50),
                    latency_p95_ms=bucket.percentile(0.95),
                    latency_p99_ms=bucket.percentile(0.99),
                    sends=bucket.sends,
                    retries=bucket.retries,
                    retry_rate=bucket.retry_rate,
                )
                for state in st.ACTION_STATES:
                    if bucket.entered.get(state):
                        out.entered.add(
                            state=convert.action_state(state), count=bucket.entered[state]
                        )
            for judged in baselines.get(signal.channel, []):
                entry.baselines.add(
                    signal=judged.signal,
                    current=judged.current,
                    samples=judged.samples,
                    mean=judged.mean,
                    stddev=judged.stddev,
                    threshold=judged.threshold,
                    history_days=judged.history_days,
                    alerting=judged.alerting,
                    not_judged_reason=judged.why_not,
                    failure_kind=judged.failure_kind,
                )
            waits = self._limiter_waits(signal.channel)
            if waits is not None:
                entry.limiter.CopyFrom(waits)
        return response

    async def _baselines(
        self, tenant: str, channels: list[str], now: dt.datetime
    ) -> dict[str, list[baseline.Judgement]]:
        """Each channel's signals against its history, as the alert sweep judges them
        (``Executor.judge_baselines``), for the caller's tenant."""
        policy = self._config.baseline
        finished, entered = await asyncio.to_thread(
            self._store.baseline_rows, baseline.history_start(now, policy), tenant
        )
        judged = baseline.judge(now, policy, finished, entered, [(tenant, n) for n in channels])
        out: dict[str, list[baseline.Judgement]] = {}
        for judgement in judged:
            if judgement.channel in channels:
                out.setdefault(judgement.channel, []).append(judgement)
        return out

    # --- the weekly UNKNOWN review ---------------------------------------------------------

    async def GetUnknownReview(
        self, request: pb.GetUnknownReviewRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetUnknownReviewResponse:
        who = caller(context)
        since_s = request.since_s or DEFAULT_REVIEW_S
        if not MIN_REVIEW_S <= since_s <= MAX_REVIEW_S:
            raise errors.invalid(
                "since_s",
                f"{MIN_REVIEW_S} to {MAX_REVIEW_S} seconds (0: {DEFAULT_REVIEW_S}, a week)",
            )
        retention_s = self._config.dedupe_retention_days * 86400
        if since_s > retention_s:
            # Settled actions leave the live tables after the retention: a longer period
            # would be cut short without a word.
            raise errors.invalid(
                "since_s",
                f"at most {retention_s} seconds: settled actions move to the dedupe archive "
                f"after the retention of {self._config.dedupe_retention_days} days "
                "(engine.dedupe_retention_days), so a longer period would miss them",
            )
        if request.channel and not (
            request.channel in self._config.channels and who.may_reach(request.channel)
        ):
            # An unknown channel reads exactly like a forbidden one.
            raise errors.ReachstoreError(
                errors.CHANNEL_NOT_ALLOWED,
                f"channel {request.channel[:64]!r} is not available to this key",
                field="channel",
                structured_data={"channel": request.channel[:64]},
            )
        now = dt.datetime.now(dt.UTC)
        since = now - dt.timedelta(seconds=since_s)
        rows = await asyncio.to_thread(
            self._store.unknown_review_rows, who.tenant, since, request.channel
        )
        # Channels the key may not use stay out, as in every other list.
        groups = unknown_review.review(r for r in rows if who.may_reach(r.channel))
        response = pb.GetUnknownReviewResponse(
            total=sum(g.count for g in groups), since=rfc3339(since), generated_at=rfc3339(now)
        )
        for group in groups:
            out = response.groups.add(
                channel=group.channel,
                settled_by=group.settled_by,
                state=convert.action_state(group.state),
                count=group.count,
            )
            for entry in group.entries:
                out.actions.add(
                    action_id=entry.action_id,
                    task_id=entry.task_id,
                    name=entry.name,
                    entered_unknown_at=rfc3339(entry.entered_unknown_at),
                    settled_at=rfc3339(entry.settled_at) if entry.settled_at else "",
                    resolved_by=entry.resolved_by,
                    note=entry.note,
                )
        return response

    def _limiter_waits(self, channel: str) -> pb.LimiterWaits | None:
        cfg = self._config.channels.get(channel)
        if cfg is None or not cfg.send_rate_per_second:
            return None
        sends = total = 0.0
        if self._metrics is not None:
            labels = {"channel": channel}
            registry = self._metrics.registry
            count = registry.get_sample_value("reachstore_reach_limiter_wait_seconds_count", labels)
            summed = registry.get_sample_value("reachstore_reach_limiter_wait_seconds_sum", labels)
            sends, total = count or 0.0, summed or 0.0
        return pb.LimiterWaits(
            sends=int(sends),
            total_wait_s=total,
            mean_wait_ms=total / sends * 1000 if sends else 0.0,
        )

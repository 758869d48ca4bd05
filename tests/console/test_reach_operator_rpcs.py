"""ListActions, RecheckAction and GetChannelHealth on a real store (SQLite and PostgreSQL),
called on the servicer in-process: what they return, and the INVALID_ARGUMENT (naming the
field) or refusal each bad request gets."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore_server.common import errors
from reachstore_server.common.auth import LOCAL_CALLER, Caller
from reachstore_server.common.identity import reset_caller, set_caller
from reachstore_server.common.pii import Masker
from reachstore_server.reach import health
from reachstore_server.reach import states as st
from reachstore_server.reach.api.servicer import ReachServicer
from reachstore_server.reach.config import parse_config
from reachstore_server.reach.idempotency import KeySecrets
from reachstore_server.reach.main import build_channels
from reachstore_server.reach.metrics import ReachMetrics
from reachstore_server.reach.policy.breaker import CircuitBreaker
from reachstore_server.reach.store import ActionPlan, Change, ReachStore, TaskPlan
from reachstore_server.reach.watch import TaskChanges
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head

T = TypeVar("T")
# The servicers read the caller from the call's context variable, never from the context.
NO_CONTEXT: Any = None
TENANT = LOCAL_CALLER.tenant


def _channel(extra: dict[str, Any], poll: bool = True) -> dict[str, Any]:
    webhook = {"url": "http://127.0.0.1:9/hook"}
    if poll:
        webhook["status_url"] = "http://127.0.0.1:9/tasks/{external_id}"
    return {
        "kind": "webhook",
        "description": "a test hook",
        "action_types": ["notify"],
        "idempotency_params": ["ticket"],
        "webhook": webhook,
        **extra,
    }


CONFIG = {
    "channels": {
        "hook": _channel({}),
        "limited": _channel({"quota_per_second": 10}),
        "blind": _channel({}, poll=False),
    }
}


@dataclasses.dataclass
class Parts:
    store: ReachStore
    servicer: ReachServicer
    metrics: ReachMetrics
    wakes: list[int]


@pytest.fixture
def parts(database_url: str) -> Iterator[Parts]:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    store = ReachStore(make_sessions(engine))
    config = parse_config(CONFIG)
    wakes: list[int] = []
    metrics = ReachMetrics()
    servicer = ReachServicer(
        store,
        config,
        build_channels(config),
        {name: CircuitBreaker.from_policy(c.breaker) for name, c in config.channels.items()},
        lambda: wakes.append(1),
        TaskChanges(),
        key_secrets=KeySecrets(b"console-test-secret-0123456789abcdef"),
        metrics=metrics,
        replica="reach-test-1",
        masker=Masker(b"console-test-secret-0123456789abcdef"),
    )
    yield Parts(store, servicer, metrics, wakes)
    engine.dispose()


def run(call: Coroutine[Any, Any, T], who: Caller = LOCAL_CALLER) -> T:
    token = set_caller(who)
    try:
        return asyncio.run(call)
    finally:
        reset_caller(token)


def refused(call: Coroutine[Any, Any, Any], who: Caller = LOCAL_CALLER) -> errors.ReachstoreError:
    with pytest.raises(errors.ReachstoreError) as caught:
        run(call, who)
    return caught.value


def reserve(store: ReachStore, key: str, channel: str = "hook", tenant: str = TENANT) -> str:
    plan = TaskPlan(
        tenant=tenant,
        entity_id=f"WO-{key}",
        caller_key=None,
        request_digest=key,
        logical_time=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        trace_id="0" * 32,
        submitted_by="",
        actions=(
            ActionPlan(
                "notify",
                channel,
                "notify",
                {"ticket": key, "email": "ops@example.com"},
                (),
                True,
                key,
                "-",
            ),
        ),
    )
    return store.reserve(plan).actions[0].action_id


def move(store: ReachStore, action_id: str, *changes: Change, tenant: str = TENANT) -> None:
    for change in changes:
        row = store.get_action(tenant, action_id)
        assert row is not None
        assert store.settle_unleased(tenant, action_id, (row[0].state,), change).applied


def sent() -> Change:
    return Change(st.SUBMITTING, "sending", add_attempt=True)


def to_unknown() -> Change:
    return Change(
        st.UNKNOWN,
        "ambiguous_outcome",
        due_in=600,
        failure={"code": "OUTCOME_UNKNOWN", "message": "outcome unknown", "data": {}},
        failure_kind="technical",
    )


def to_review() -> Change:
    return Change(
        st.NEEDS_REVIEW,
        "rechecks_exhausted",
        failure={"code": "REVIEW_REQUIRED", "message": "needs review", "data": {}},
        failure_kind="technical",
    )


REVIEW = [pb.ACTION_STATE_UNKNOWN, pb.ACTION_STATE_NEEDS_REVIEW]

# --- ListActions ---------------------------------------------------------------------------


def test_the_review_queue_lists_open_actions_oldest_first_with_masked_params(
    parts: Parts,
) -> None:
    unknown = reserve(parts.store, "a")
    move(parts.store, unknown, sent(), to_unknown())
    review = reserve(parts.store, "b")
    move(parts.store, review, sent(), to_unknown(), to_review())
    reserve(parts.store, "c")  # ready: not in the queue
    reserve(parts.store, "d", tenant="globex")
    other = reserve(parts.store, "e", tenant="globex")
    move(parts.store, other, sent(), to_unknown(), tenant="globex")

    reply = run(parts.servicer.ListActions(pb.ListActionsRequest(states=REVIEW), NO_CONTEXT))
    assert [a.action_id for a in reply.actions] == [unknown, review]
    assert [a.state for a in reply.actions] == REVIEW
    assert reply.tenant == TENANT and not reply.next_page_token
    assert {f.error_code for f in reply.partial_failures} == {"OUTCOME_UNKNOWN", "REVIEW_REQUIRED"}
    params = dict(reply.actions[0].params)
    assert params["ticket"] == "a" and params["email"].startswith("[email:")
    assert not reply.actions[0].receipts and not reply.actions[0].history

    # Paging, one at a time.
    first = run(
        parts.servicer.ListActions(pb.ListActionsRequest(states=REVIEW, page_size=1), NO_CONTEXT)
    )
    assert [a.action_id for a in first.actions] == [unknown] and first.next_page_token
    second = run(
        parts.servicer.ListActions(
            pb.ListActionsRequest(states=REVIEW, page_size=1, page_token=first.next_page_token),
            NO_CONTEXT,
        )
    )
    assert [a.action_id for a in second.actions] == [review] and not second.next_page_token

    # Every state, a channel filter, an age filter.
    everything = run(parts.servicer.ListActions(pb.ListActionsRequest(), NO_CONTEXT))
    assert len(everything.actions) == 3
    assert not run(
        parts.servicer.ListActions(pb.ListActionsRequest(channel="limited"), NO_CONTEXT)
    ).actions
    assert not run(
        parts.servicer.ListActions(pb.ListActionsRequest(min_age_s=3600), NO_CONTEXT)
    ).actions
    assert (
        len(
            run(
                parts.servicer.ListActions(pb.ListActionsRequest(max_age_s=3600), NO_CONTEXT)
            ).actions
        )
        == 3
    )

    # Another tenant: only with the auditor scope.
    operator = Caller(TENANT, "k1", frozenset({"read", "operator"}))
    error = refused(
        parts.servicer.ListActions(pb.ListActionsRequest(tenant="globex"), NO_CONTEXT),
        operator,
    )
    assert error.code == "AUTH_SCOPE_MISSING"
    auditor = Caller(TENANT, "k2", frozenset({"read", "operator", "auditor"}))
    theirs = run(
        parts.servicer.ListActions(
            pb.ListActionsRequest(tenant="globex", states=REVIEW), NO_CONTEXT
        ),
        auditor,
    )
    assert [a.action_id for a in theirs.actions] == [other] and theirs.tenant == "globex"


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"states": [pb.ACTION_STATE_UNSPECIFIED]}, "states[0]"),
        ({"states": [pb.ACTION_STATE_UNKNOWN] * 11}, "states"),
        ({"min_age_s": -1}, "min_age_s"),
        ({"max_age_s": 400_000_000}, "max_age_s"),
        ({"min_age_s": 600, "max_age_s": 60}, "max_age_s"),
        ({"page_size": 101}, "page_size"),
        ({"page_token": "not a token"}, "page_token"),
        ({"channel": "c" * 65}, "channel"),
        ({"tenant": "t" * 200}, "tenant"),
    ],
)
def test_a_bad_list_request_names_its_field(
    parts: Parts, request_fields: dict[str, Any], field: str
) -> None:
    error = refused(parts.servicer.ListActions(pb.ListActionsRequest(**request_fields), NO_CONTEXT))
    assert error.code == "INVALID_ARGUMENT"
    assert error.field == field


# --- RecheckAction -------------------------------------------------------------------------


def test_a_recheck_makes_an_open_action_due_now_and_wakes_the_executor(parts: Parts) -> None:
    unknown = reserve(parts.store, "a")
    move(parts.store, unknown, sent(), to_unknown())
    before = time.time()
    reply = run(
        parts.servicer.RecheckAction(pb.RecheckActionRequest(action_id=unknown), NO_CONTEXT)
    )
    assert reply.scheduled and reply.action.state == pb.ACTION_STATE_UNKNOWN
    assert not reply.partial_failures
    assert parts.wakes == [1]
    row, _, history = parts.store.get_action(TENANT, unknown)  # type: ignore[misc]
    assert row.next_at is not None and before <= row.next_at <= time.time()
    assert history[-1].reason == "recheck_requested"
    assert row.attempts == 1  # nothing is re-sent

    # A NEEDS_REVIEW action goes back to UNKNOWN for one more look-up.
    review = reserve(parts.store, "b")
    move(parts.store, review, sent(), to_unknown(), to_review())
    again = run(parts.servicer.RecheckAction(pb.RecheckActionRequest(action_id=review), NO_CONTEXT))
    assert again.scheduled and again.action.state == pb.ACTION_STATE_UNKNOWN


def test_only_open_actions_on_channels_that_can_look_up_are_rechecked(parts: Parts) -> None:
    done = reserve(parts.store, "a")
    move(parts.store, done, sent(), Change(st.SUCCEEDED, "receiver_confirmed"))
    error = refused(
        parts.servicer.RecheckAction(pb.RecheckActionRequest(action_id=done), NO_CONTEXT)
    )
    assert error.code == "ACTION_NOT_RECHECKABLE"
    assert error.failure.structured_data["state"] == "succeeded"

    blind = reserve(parts.store, "b", channel="blind")
    move(parts.store, blind, sent(), to_unknown())
    error = refused(
        parts.servicer.RecheckAction(pb.RecheckActionRequest(action_id=blind), NO_CONTEXT)
    )
    assert error.code == "ACTION_NOT_RECHECKABLE"
    assert error.failure.structured_data["channel"] == "blind"

    missing = refused(
        parts.servicer.RecheckAction(pb.RecheckActionRequest(action_id="0" * 32), NO_CONTEXT)
    )
    assert missing.code == "ACTION_NOT_FOUND"
    empty = refused(parts.servicer.RecheckAction(pb.RecheckActionRequest(), NO_CONTEXT))
    assert (empty.code, empty.field) == ("INVALID_ARGUMENT", "action_id")
    # Another tenant's action is simply not found.
    theirs = reserve(parts.store, "c", tenant="globex")
    move(parts.store, theirs, sent(), to_unknown(), tenant="globex")
    hidden = refused(
        parts.servicer.RecheckAction(pb.RecheckActionRequest(action_id=theirs), NO_CONTEXT)
    )
    assert hidden.code == "ACTION_NOT_FOUND"


# --- GetChannelHealth ----------------------------------------------------------------------


def test_channel_health_counts_states_latency_and_retries_from_the_store(parts: Parts) -> None:
    retried = reserve(parts.store, "a")
    move(
        parts.store,
        retried,
        sent(),
        Change(st.READY, "retry_scheduled", due_in=0.0),
        sent(),
        Change(st.SUCCEEDED, "receiver_confirmed"),
    )
    failed = reserve(parts.store, "b")
    move(parts.store, failed, sent(), Change(st.FAILED, "rejected", failure={"code": "X"}))
    open_one = reserve(parts.store, "c")
    move(parts.store, open_one, sent(), to_unknown())
    reserve(parts.store, "d", channel="limited")
    parts.metrics.limiter_wait.labels("limited").observe(0.25)
    parts.metrics.limiter_wait.labels("limited").observe(0.75)

    reply = run(
        parts.servicer.GetChannelHealth(
            pb.GetChannelHealthRequest(window_s=600, bucket_s=60),
            NO_CONTEXT,
        )
    )
    assert (reply.window_s, reply.bucket_s, reply.replica) == (600, 60, "reach-test-1")
    by_name = {c.channel: c for c in reply.channels}
    assert sorted(by_name) == ["blind", "hook", "limited"]
    hook = by_name["hook"]
    assert hook.breaker_state == "closed"
    assert not hook.HasField("limiter")
    assert {pb.ActionState.Name(c.state): c.count for c in hook.current} == {
        "ACTION_STATE_SUCCEEDED": 1,
        "ACTION_STATE_FAILED": 1,
        "ACTION_STATE_UNKNOWN": 1,
    }
    assert len(hook.buckets) == 10
    sends = sum(b.sends for b in hook.buckets)
    retries = sum(b.retries for b in hook.buckets)
    finished = sum(b.finished for b in hook.buckets)
    assert (sends, retries, finished) == (4, 1, 2)
    last = hook.buckets[-1]
    assert last.retry_rate == pytest.approx(last.retries / last.sends)
    assert last.latency_p99_ms >= last.latency_p50_ms > 0
    entered = {pb.ActionState.Name(e.state): e.count for b in hook.buckets for e in b.entered}
    assert entered["ACTION_STATE_SUBMITTING"] == 4 and entered["ACTION_STATE_UNKNOWN"] == 1
    limited = by_name["limited"]
    assert limited.limiter.sends == 2
    assert limited.limiter.total_wait_s == pytest.approx(1.0)
    assert limited.limiter.mean_wait_ms == pytest.approx(500.0)

    only = run(
        parts.servicer.GetChannelHealth(pb.GetChannelHealthRequest(channel="hook"), NO_CONTEXT)
    )
    assert [c.channel for c in only.channels] == ["hook"]
    assert (only.window_s, only.bucket_s) == (3600, 300)


def test_channel_health_only_shows_the_channels_a_key_may_use(parts: Parts) -> None:
    narrow = Caller(TENANT, "k1", frozenset({"operator"}), channels=("hook",))
    reply = run(parts.servicer.GetChannelHealth(pb.GetChannelHealthRequest(), NO_CONTEXT), narrow)
    assert [c.channel for c in reply.channels] == ["hook"]
    hidden = refused(
        parts.servicer.GetChannelHealth(pb.GetChannelHealthRequest(channel="limited"), NO_CONTEXT),
        narrow,
    )
    unknown = refused(
        parts.servicer.GetChannelHealth(pb.GetChannelHealthRequest(channel="nope"), NO_CONTEXT),
        narrow,
    )
    assert hidden.code == unknown.code == "CHANNEL_NOT_ALLOWED"


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"window_s": 59}, "window_s"),
        ({"window_s": 604801}, "window_s"),
        ({"window_s": -5}, "window_s"),
        ({"bucket_s": 9}, "bucket_s"),
        ({"bucket_s": 86401}, "bucket_s"),
        ({"window_s": 7200, "bucket_s": 10}, "bucket_s"),  # 720 buckets
    ],
)
def test_a_bad_health_request_names_its_field(
    parts: Parts, request_fields: dict[str, Any], field: str
) -> None:
    error = refused(
        parts.servicer.GetChannelHealth(pb.GetChannelHealthRequest(**request_fields), NO_CONTEXT)
    )
    assert (error.code, error.field) == ("INVALID_ARGUMENT", field)


def test_percentiles_are_latencies_that_happened() -> None:
    assert health.percentile([], 0.5) == 0.0
    values = [float(v) for v in range(1, 101)]
    assert health.percentile(values, 0.50) == 50.0
    assert health.percentile(values, 0.95) == 95.0
    assert health.percentile(values, 0.99) == 99.0
    assert health.percentile([7.0], 0.99) == 7.0

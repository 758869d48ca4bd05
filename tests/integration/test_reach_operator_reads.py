"""The reach store's reads and writes behind the operating habits, on SQLite and PostgreSQL:
a baseline alert is stored once per key however many replicas raise it, and the weekly
UNKNOWN review finds every action that entered UNKNOWN with its history."""

from __future__ import annotations

import datetime as dt
import threading

from reachstore_server.reach import states as st
from reachstore_server.reach import unknown_review
from reachstore_server.reach.store import ActionPlan, Change, ReachStore, TaskPlan


def _plan(key: str) -> TaskPlan:
    return TaskPlan(
        tenant="t1",
        entity_id="WO-1",
        caller_key=None,
        request_digest="d1",
        logical_time=dt.datetime(2026, 11, 30, tzinfo=dt.UTC),
        trace_id="0" * 32,
        submitted_by="",
        actions=(ActionPlan("a", "hook", "notify", {"n": key}, (), True, key, "-"),),
    )


def test_a_baseline_alert_raised_by_many_replicas_at_once_is_stored_once(
    store: ReachStore,
) -> None:
    results: list[bool] = []
    start = threading.Barrier(6)

    def raise_it() -> None:
        start.wait()
        results.append(
            store.raise_alert_once(
                "t1", "baseline_failure_rate", "technical", "hook fails", "baseline/hook/f/1"
            )
        )

    threads = [threading.Thread(target=raise_it) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]
    [alert] = store.alerts("t1")
    assert (alert.kind, alert.failure_kind, alert.task_id) == (
        "baseline_failure_rate",
        "technical",
        "",
    )
    # Another hour is another alert; the same key in another tenant is that tenant's own.
    assert store.raise_alert_once(
        "t1", "baseline_failure_rate", "technical", "m", "baseline/hook/f/2"
    )
    assert store.raise_alert_once(
        "t2", "baseline_failure_rate", "technical", "m", "baseline/hook/f/1"
    )


def test_the_review_finds_actions_that_went_through_unknown_and_how_they_ended(
    store: ReachStore,
) -> None:
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ids = {}
    for key in ("k-lookup", "k-open", "k-never"):
        ids[key] = store.reserve(_plan(key)).actions[0].action_id
    claims = {c.action_id: c for c in store.claim("w1", 3, 30.0)}
    for key in ("k-lookup", "k-open"):
        claim = claims[ids[key]]
        assert store.settle(
            claim, Change(st.UNKNOWN, "ambiguous_outcome", keep_lease=True, add_ambiguous=True)
        ).applied
    assert store.settle(claims[ids["k-lookup"]], Change(st.SUCCEEDED, "receiver_confirmed")).applied
    assert store.settle(claims[ids["k-never"]], Change(st.SUCCEEDED, "receiver_confirmed")).applied

    rows = store.unknown_review_rows("t1", since)
    assert {r.action_id for r in rows} == {ids["k-lookup"], ids["k-open"]}
    groups = {(g.settled_by, g.state): g for g in unknown_review.review(rows)}
    assert set(groups) == {("lookup", "succeeded"), ("open", "unknown")}
    assert groups[("lookup", "succeeded")].entries[0].settled_at is not None
    assert store.unknown_review_rows("t2", since) == []
    assert store.unknown_review_rows("t1", since, channel="other") == []
    # A period after both: the settled one is out, the one still open stays listed.
    later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    assert [r.action_id for r in store.unknown_review_rows("t1", later)] == [ids["k-open"]]

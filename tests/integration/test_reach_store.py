"""The reach store on SQLite and PostgreSQL: reservation under the unique index, claims
under leases, dependency propagation and task states."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time

import pytest

from reachstore_server.common import errors
from reachstore_server.reach import states as st
from reachstore_server.reach.store import ActionPlan, Change, ReachStore, Receipt, TaskPlan
from reachstore_server.storage.clock import db_clock
from reachstore_server.storage.reach_models import ReachActionRow


def _action(name: str, key: str, depends_on: tuple[str, ...] = (), required: bool = True):  # type: ignore[no-untyped-def]
    return ActionPlan(name, "hook", "notify", {"n": name}, depends_on, required, key, "-")


def _plan(
    *actions: ActionPlan, tenant: str = "t1", caller_key: str | None = None, digest: str = "d1"
) -> TaskPlan:
    return TaskPlan(
        tenant=tenant,
        entity_id="WO-1",
        caller_key=caller_key,
        request_digest=digest,
        logical_time=dt.datetime(2026, 11, 30, tzinfo=dt.UTC),
        trace_id="0" * 32,
        submitted_by="",
        actions=actions,
    )


def test_a_repeated_task_returns_the_reserved_one(store: ReachStore) -> None:
    first = store.reserve(_plan(_action("a", "k-a")))
    again = store.reserve(_plan(_action("a", "k-a")))
    assert not first.deduplicated and again.deduplicated
    assert again.task.task_id == first.task.task_id
    assert [a.action_id for a in again.actions] == [a.action_id for a in first.actions]


def test_the_same_key_in_another_tenant_is_another_action(store: ReachStore) -> None:
    one = store.reserve(_plan(_action("a", "k-a"), tenant="t1"))
    two = store.reserve(_plan(_action("a", "k-a"), tenant="t2"))
    assert not two.deduplicated and two.task.task_id != one.task.task_id
    assert store.get_task("t2", one.task.task_id) is None


def test_a_caller_key_with_other_content_is_rejected(store: ReachStore) -> None:
    store.reserve(_plan(_action("a", "k-a"), caller_key="ck", digest="d1"))
    with pytest.raises(errors.ReachstoreError) as caught:
        store.reserve(_plan(_action("b", "k-b"), caller_key="ck", digest="d2"))
    assert caught.value.code == "IDEMPOTENCY_KEY_REUSED"


def test_an_action_key_held_by_another_task_is_named(store: ReachStore) -> None:
    held = store.reserve(_plan(_action("a", "k-a")))
    with pytest.raises(errors.ReachstoreError) as caught:
        store.reserve(_plan(_action("a", "k-a"), _action("b", "k-b")))
    assert caught.value.code == "ACTION_ALREADY_RESERVED"
    data = dict(caught.value.failure.structured_data)
    assert data["actions"][0]["reserved_task_id"] == held.task.task_id
    # Nothing of the refused task was written.
    assert len(store.list_tasks("t1", "", "", "", 10, None)) == 1


def test_concurrent_duplicates_make_one_task(store: ReachStore) -> None:
    results = []
    barrier = threading.Barrier(8)

    def reserve() -> None:
        barrier.wait()
        results.append(store.reserve(_plan(_action("a", "k-race"))))

    threads = [threading.Thread(target=reserve) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.task.task_id for r in results}) == 1
    assert sum(not r.deduplicated for r in results) == 1


def test_claims_never_overlap_and_writes_are_fenced_by_the_lease(store: ReachStore) -> None:
    for i in range(30):
        store.reserve(_plan(_action("a", f"k-{i}")))
    seen: list[str] = []
    lock = threading.Lock()

    def claim(worker: str) -> None:
        while batch := store.claim(worker, 4, 60):
            with lock:
                seen.extend(c.action_id for c in batch)

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 30 and len(set(seen)) == 30
    # Nothing is due until the leases run out; then a new owner takes over, and the old
    # owner's late write is refused.
    assert store.claim("late", 10, 60) == []
    store.reserve(_plan(_action("a", "k-short")))
    first = store.claim("first", 1, 0.3)[0]
    assert store.claim("next", 1, 60) == []
    time.sleep(0.4)
    taken = store.claim("next", 1, 60)[0]
    assert taken.action_id == first.action_id
    assert store.settle(taken, Change(st.SUBMITTING, "sending", keep_lease=True)).applied
    assert not store.settle(first, Change(st.SUCCEEDED, "receiver_confirmed")).applied
    stale = dataclasses.replace(taken, lease="an-earlier-owner")
    assert not store.settle(stale, Change(st.SUCCEEDED, "receiver_confirmed")).applied


def test_a_send_is_marked_only_under_a_lease_that_has_not_run_out(store: ReachStore) -> None:
    """The mark made right before a send (``live_lease``) is refused once the lease has run
    out by the database's clock, even if no other worker has claimed the action yet: a
    worker that stalled past its lease must not start a send."""
    store.reserve(_plan(_action("a", "k-a")))
    claim = store.claim("w", 1, 0.3)[0]
    mark = Change(st.SUBMITTING, "sending", due_in=0.3, keep_lease=True, live_lease=True)
    assert store.settle(claim, mark).applied  # renews the lease for another 0.3 s
    time.sleep(0.4)
    assert not store.settle(claim, mark).applied
    # An answer that comes after the lease ran out, with nobody else holding the action,
    # is still recorded: it is the news.
    assert store.settle(claim, Change(st.SUCCEEDED, "receiver_confirmed")).applied


def test_claim_judges_leases_by_the_database_clock(store: ReachStore) -> None:
    """Due times and lease expiries are written from the database's clock, so the claim
    does not depend on the claiming process's idea of the time."""
    reserved = store.reserve(_plan(_action("a", "k-a")))
    claim = store.claim("w", 1, 60)[0]
    with store._sessions() as session:  # noqa: SLF001 - reading the clock and the row
        clock = db_clock(session)
        row = session.get(ReachActionRow, reserved.actions[0].action_id)
        assert row is not None and row.next_at is not None
        assert abs(row.next_at - (clock + 60)) < 5
    assert abs(claim.db_now - clock) < 5 and abs(claim.now() - clock) < 5


def test_each_alert_is_claimed_by_one_worker_until_its_claim_runs_out(store: ReachStore) -> None:
    reserved = store.reserve(_plan(_action("a", "k-a")))
    claim = store.claim("w", 1, 60)[0]
    store.settle(claim, Change(st.NEEDS_REVIEW, "cannot_look_up"))
    alerts = store.alerts("t1")
    assert [a.kind for a in alerts] == ["needs_review"] and reserved
    one = store.claim_alerts("w1", 10, 5, 0.3)
    assert [a.id for a in one] == [alerts[0].id]
    assert store.claim_alerts("w2", 10, 5, 0.3) == []  # held by w1
    time.sleep(0.4)
    two = store.claim_alerts("w2", 10, 5, 60)  # w1's claim ran out
    assert [a.id for a in two] == [alerts[0].id]
    assert not store.mark_alert(one[0], True, "", 0.0)  # w1 lost it: not recorded
    assert store.mark_alert(two[0], True, "", 0.0)
    assert store.claim_alerts("w3", 10, 5, 60) == []  # delivered


def test_an_alert_not_delivered_is_due_again_after_its_delay(store: ReachStore) -> None:
    store.reserve(_plan(_action("a", "k-a")))
    claim = store.claim("w", 1, 60)[0]
    store.settle(claim, Change(st.NEEDS_REVIEW, "cannot_look_up"))
    [alert] = store.claim_alerts("w", 10, 5, 60)
    assert store.mark_alert(alert, False, "RECEIVER_UNAVAILABLE: 503", 0.3)
    assert store.claim_alerts("w", 10, 5, 60) == []  # it waits for its delay
    time.sleep(0.4)
    [again] = store.claim_alerts("w", 10, 5, 60)
    assert again.id == alert.id and again.delivery_attempts == 1


def test_a_caller_cannot_cancel_an_action_whose_send_may_have_arrived(store: ReachStore) -> None:
    """After an ambiguous send an action waiting for its retry is not "unsent": a cancel
    fenced with ``never_sent`` is refused, so "cancelled" never hides a possible effect."""
    reserved = store.reserve(_plan(_action("a", "k-a")))
    action_id = reserved.actions[0].action_id
    claim = store.claim("w", 1, 60)[0]
    retry = Change(st.READY, "retry_scheduled", due_in=30, add_attempt=True, add_ambiguous=True)
    assert store.settle(claim, retry).applied
    cancel = Change(st.CANCELLED, "cancelled_by_caller")
    assert not store.settle_unleased("t1", action_id, (st.READY,), cancel, never_sent=True).applied
    _, actions = store.get_task("t1", reserved.task.task_id)  # type: ignore[misc]
    assert actions[0].state == st.READY and actions[0].ambiguous_sends == 1


def test_a_long_worker_name_keeps_its_leases_apart(store: ReachStore) -> None:
    """Lease tokens always keep their randomness, however long the worker's name, so a
    stale claim of the same worker cannot pass the fence."""
    name = "w" * 70
    store.reserve(_plan(_action("a", "k-a")))
    first = store.claim(name, 1, 0.3)[0]
    time.sleep(0.4)
    second = store.claim(name, 1, 60)[0]
    assert first.lease != second.lease and len(second.lease) <= 64
    assert not store.settle(first, Change(st.SUCCEEDED, "receiver_confirmed")).applied


def test_an_answer_holding_nul_characters_is_recorded(store: ReachStore) -> None:
    """PostgreSQL's text cannot hold NUL; a receiver's answer may: the receipt keeps it as
    U+FFFD instead of failing the transaction that records the answer."""
    reserved = store.reserve(_plan(_action("a", "k-a")))
    claim = store.claim("w", 1, 60)[0]
    receipt = Receipt(1, "submit", "succeeded", external_id="id\x00x", snippet='{"a":"\x00"}')
    done = Change(st.SUCCEEDED, "receiver_confirmed", external_id="id\x00x", receipt=receipt)
    assert store.settle(claim, done).applied
    found = store.get_action("t1", reserved.actions[0].action_id)
    assert found is not None
    row, receipts, _ = found
    assert row.state == st.SUCCEEDED and row.external_id == "id\ufffdx"
    assert receipts[0].snippet == '{"a":"\ufffd"}'

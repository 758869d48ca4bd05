"""The dedupe archive on SQLite and PostgreSQL: keys past the retention move out of the live
tables in one transaction and still refuse a duplicate (docs/AT_MOST_ONCE.md, "Dedupe
records"). The clock is the test's: ``archive_expired`` is handed the moment to judge by."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from reachstore_server.common import errors
from reachstore_server.reach import states as st
from reachstore_server.reach.store import ActionPlan, Change, ReachStore, TaskPlan
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.reach_models import (
    ReachActionRow,
    ReachArchivedKeyRow,
    ReachHistoryRow,
    ReachTaskRow,
)
from reachstore_server.storage.schema import migrate_to_head

DAY = dt.timedelta(days=1)


def _plan(key: str, caller_key: str | None = None, digest: str = "d1") -> TaskPlan:
    return TaskPlan(
        tenant="t1",
        entity_id="WO-1",
        caller_key=caller_key,
        request_digest=digest,
        logical_time=dt.datetime(2026, 11, 30, tzinfo=dt.UTC),
        trace_id="0" * 32,
        submitted_by="",
        actions=(ActionPlan("a", "hook", "notify", {"n": key}, (), True, key, "-"),),
    )


def _finish(store: ReachStore, count: int) -> None:
    """Claims and settles ``count`` reserved actions as succeeded (a real send's path)."""
    done = 0
    while done < count:
        claims = store.claim("w1", count - done, 30.0)
        assert claims, "reserved actions were not due"
        for claim in claims:
            assert store.settle(claim, Change(st.SUCCEEDED, "receiver_confirmed")).applied
        done += len(claims)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _live_and_archived(store: ReachStore, key: str) -> tuple[int, int]:
    sessions = store._sessions  # noqa: SLF001 - counting rows is the point of the test
    with sessions() as session:
        live = session.scalar(select(func.count()).where(ReachActionRow.idem_key == key))
        archived = session.scalar(select(func.count()).where(ReachArchivedKeyRow.key == key))
    return int(live or 0), int(archived or 0)


def test_a_finished_task_stays_live_until_the_retention_has_passed(store: ReachStore) -> None:
    first = store.reserve(_plan("k-keep"))
    _finish(store, 1)
    assert store.archive_expired(_now() + 89 * DAY, 90).tasks == 0
    assert _live_and_archived(store, "k-keep") == (1, 0)
    again = store.reserve(_plan("k-keep"))
    assert again.deduplicated and again.task.task_id == first.task.task_id


def test_an_unfinished_task_is_never_archived_however_old(store: ReachStore) -> None:
    store.reserve(_plan("k-open"))  # never sent: READY for ever
    assert store.archive_expired(_now() + 3650 * DAY, 90).tasks == 0
    assert _live_and_archived(store, "k-open") == (1, 0)


def test_a_late_duplicate_of_an_archived_action_is_refused(store: ReachStore) -> None:
    first = store.reserve(_plan("k-late"))
    _finish(store, 1)
    moved = store.archive_expired(_now() + 91 * DAY, 90)
    assert (moved.tasks, moved.actions) == (1, 1)
    assert _live_and_archived(store, "k-late") == (0, 1)
    assert store.get_task("t1", first.task.task_id) is None
    with pytest.raises(errors.ReachstoreError) as caught:
        store.reserve(_plan("k-late"))
    assert caught.value.code == "ACTION_ALREADY_RESERVED"
    data = dict(caught.value.failure.structured_data)
    assert data["archived"] is True
    [held] = data["actions"]
    assert held["reserved_action_id"] == first.actions[0].action_id
    assert held["final_state"] == "succeeded"
    # Nothing was reserved anew.
    assert _live_and_archived(store, "k-late") == (0, 1)


def test_an_archived_caller_key_refuses_its_task_and_tells_reuse_apart(
    store: ReachStore,
) -> None:
    store.reserve(_plan("k-ck", caller_key="ck-1", digest="d1"))
    _finish(store, 1)
    store.archive_expired(_now() + 91 * DAY, 90)
    with pytest.raises(errors.ReachstoreError) as same:
        store.reserve(_plan("k-ck", caller_key="ck-1", digest="d1"))
    assert same.value.code == "ACTION_ALREADY_RESERVED"
    with pytest.raises(errors.ReachstoreError) as other:
        store.reserve(_plan("k-other", caller_key="ck-1", digest="d2"))
    assert other.value.code == "IDEMPOTENCY_KEY_REUSED"


def test_reservations_racing_the_move_never_reserve_a_key_again(store: ReachStore) -> None:
    """Attack: duplicates arrive while their keys move. Each must find the live task or be
    refused by the archive; one that found neither would be sent a second time."""
    keys = [f"k-race-{i}" for i in range(40)]
    for key in keys:
        store.reserve(_plan(key))
    _finish(store, len(keys))
    outcomes: list[str] = []
    failures: list[BaseException] = []
    start = threading.Barrier(5)

    def duplicate(offset: int) -> None:
        start.wait()
        for key in keys[offset:] + keys[:offset]:
            try:
                outcomes.append("live" if store.reserve(_plan(key)).deduplicated else "NEW")
            except errors.ReachstoreError as exc:
                if exc.code == "ACTION_ALREADY_RESERVED":
                    outcomes.append("archived")
                elif exc.code != "DATABASE_UNAVAILABLE":  # contention: the caller retries
                    failures.append(exc)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

    threads = [threading.Thread(target=duplicate, args=(i * 8,)) for i in range(4)]
    for t in threads:
        t.start()
    start.wait()
    moved = 0
    while moved < len(keys):
        moved += store.archive_expired(_now() + 91 * DAY, 90, limit=3).tasks
    for t in threads:
        t.join()
    assert not failures, failures
    assert "NEW" not in outcomes
    assert "archived" in outcomes or "live" in outcomes
    for key in keys:
        assert _live_and_archived(store, key) == (0, 1), key


def test_movers_running_at_once_each_move_what_the_others_did_not(store: ReachStore) -> None:
    """Attack: four movers (every reach replica runs one) sweep the same expired tasks at
    the same moment. None may fail (a failed sweep waits an hour), and every key ends in
    the archive once."""
    keys = [f"k-movers-{i}" for i in range(120)]
    for key in keys:
        store.reserve(_plan(key))
    _finish(store, len(keys))
    failures: list[BaseException] = []
    moved: list[int] = []
    start = threading.Barrier(4)

    def mover() -> None:
        start.wait()
        try:
            while done := store.archive_expired(_now() + 91 * DAY, 90, limit=5).tasks:
                moved.append(done)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=mover) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert sum(moved) == len(keys)
    for key in keys:
        assert _live_and_archived(store, key) == (0, 1), key


_KILLED_MOVE = textwrap.dedent(
    """
    import datetime as dt, os, sys, time
    from sqlalchemy import event
    from reachstore_server.reach.store import ReachStore
    from reachstore_server.storage.engine import make_engine, make_sessions

    engine = make_engine(sys.argv[1])

    @event.listens_for(engine, "after_cursor_execute")
    def stop_after_archive_insert(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("INSERT INTO REACH_ARCHIVED_KEYS"):
            print("inserted", flush=True)
            time.sleep(600)  # killed here, between the archive's insert and the deletes

    store = ReachStore(make_sessions(engine))
    store.archive_expired(dt.datetime.now(dt.UTC) + dt.timedelta(days=91), 90)
    """
)


def test_a_move_killed_midway_leaves_every_key_live(database_url: str, tmp_path: Path) -> None:
    """Attack: the process moving keys dies after writing the archive rows and before
    deleting the live ones. Nothing of its transaction may remain, and the next move
    completes it: a key is in exactly one place throughout."""
    engine = make_engine(database_url)
    migrate_to_head(engine)
    store = ReachStore(make_sessions(engine))
    try:
        keys = [f"k-kill-{i}" for i in range(5)]
        for key in keys:
            store.reserve(_plan(key))
        _finish(store, len(keys))
        script = tmp_path / "move.py"
        script.write_text(_KILLED_MOVE)
        child = subprocess.Popen(
            [sys.executable, str(script), database_url],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "inserted"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            if child.stdout is not None:
                child.stdout.close()
        for key in keys:
            assert _live_and_archived(store, key) == (1, 0), key
        assert store.reserve(_plan(keys[0])).deduplicated
        # PostgreSQL ends the dead client's transaction once it sees the socket close; until
        # then its tasks are locked and skipped, never moved twice.
        moved, deadline = 0, time.monotonic() + 30
        while moved < len(keys) and time.monotonic() < deadline:
            moved += store.archive_expired(_now() + 91 * DAY, 90).tasks
        assert moved == len(keys)
        for key in keys:
            assert _live_and_archived(store, key) == (0, 1), key
        with store._sessions() as session:  # noqa: SLF001
            assert session.scalar(select(func.count()).select_from(ReachTaskRow)) == 0
            assert session.scalar(select(func.count()).select_from(ReachHistoryRow)) == 0
    finally:
        engine.dispose()

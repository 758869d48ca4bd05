"""Ingest task leases on SQLite and PostgreSQL: several task stores (one per process, each
with its own name) on one database claim, renew, take back and fence by lease."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from sqlalchemy import Engine, text, update

from reachstore_server.storage import tasks as states
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.models import TaskRow
from reachstore_server.storage.schema import migrate_to_head
from reachstore_server.storage.tasks import NewTask, TaskStore, db_now

TENANT = "t"


def _store(engine: Engine, holder: str, lease_s: float = 30.0) -> TaskStore:
    return TaskStore(make_sessions(engine), holder, lease_s)


def _submit(store: TaskStore, count: int) -> list[str]:
    new = [NewTask("docs", f"d{i}", f"text {i}", {}, "overwrite") for i in range(count)]
    return [t.task_id for t in store.enqueue(TENANT, new)]


def _row(engine: Engine, task_id: str) -> TaskRow:
    with make_sessions(engine)() as session:
        row = session.get(TaskRow, task_id)
        assert row is not None
        return row


def _db_clock(engine: Engine) -> dt.datetime:
    """The database's own reading of its clock, as a naive UTC datetime."""
    with make_sessions(engine)() as session:
        return db_now(session).replace(tzinfo=None)


def _naive(value: dt.datetime | None) -> dt.datetime:
    assert value is not None
    return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value


def _expire(engine: Engine, task_ids: list[str]) -> None:
    """Moves the leases of ``task_ids`` one minute into the past on the database's clock:
    what a holder that stopped renewing looks like once its lease ran out."""
    sessions = make_sessions(engine)
    with sessions.begin() as session:
        session.execute(
            update(TaskRow)
            .where(TaskRow.task_id.in_(task_ids))
            .values(lease_until=db_now(session, -60.0))
        )


def test_a_claim_stamps_its_holder_and_an_expiry_by_the_database_clock(engine: Engine) -> None:
    a = _store(engine, "ingest-a", lease_s=30.0)
    [task_id] = _submit(a, 1)
    before = _db_clock(engine)
    [claimed] = a.claim(5)
    after = _db_clock(engine)
    row = _row(engine, task_id)
    assert (row.state, row.phase, row.lease_owner) == ("processing", "chunking", claimed.lease)
    assert claimed.lease.startswith("ingest-a:")
    until = _naive(row.lease_until)
    assert before + dt.timedelta(seconds=29) <= until <= after + dt.timedelta(seconds=31)


def test_two_claims_never_take_the_same_task(engine: Engine) -> None:
    stores = [_store(engine, f"ingest-{i}") for i in range(4)]
    task_ids = _submit(stores[0], 120)
    taken: list[list[str]] = [[] for _ in stores]

    def drain(i: int) -> None:
        while batch := stores[i].claim(7):
            taken[i].extend(t.task_id for t in batch)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    every = [t for part in taken for t in part]
    assert sorted(every) == sorted(task_ids), [len(p) for p in taken]


def test_a_live_lease_is_left_alone_by_other_processes_claims_and_starts(engine: Engine) -> None:
    a, b = _store(engine, "ingest-a"), _store(engine, "ingest-b")
    task_ids = _submit(a, 2)
    [held] = a.claim(1)
    [queued] = set(task_ids) - {held.task_id}
    a.request_cancel(TENANT, held.task_id)
    assert b.recover() == 0  # B starting: A's lease is not B's to take
    assert [t.task_id for t in b.claim(5)] == [queued]
    assert b.claim(5) == []
    row = _row(engine, held.task_id)
    assert (row.state, row.lease_owner) == ("cancelling", held.lease)


def test_a_process_with_a_clock_far_ahead_does_not_take_a_live_lease(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _store(engine, "ingest-a", lease_s=30.0)
    [task_id] = _submit(a, 1)
    [claimed] = a.claim(1)
    # B's own clock runs an hour ahead: every Python clock it could read says so.
    ahead = dt.timedelta(hours=1)
    monkeypatch.setattr(states, "utcnow", lambda: dt.datetime.now(dt.UTC) + ahead)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + ahead.total_seconds())
    b = _store(engine, "ingest-b", lease_s=30.0)
    assert b.claim(5) == []
    assert _row(engine, task_id).lease_owner == claimed.lease


def test_a_lease_that_ran_out_is_taken_back_by_any_process(engine: Engine) -> None:
    a, b = _store(engine, "ingest-a"), _store(engine, "ingest-b")
    working, cancelled = _submit(a, 2)
    held = {t.task_id: t for t in a.claim(5)}
    a.request_cancel(TENANT, cancelled)
    _expire(engine, [working, cancelled])  # A died: nothing renews its lease
    retaken = b.claim(5)
    assert [t.task_id for t in retaken] == [working]
    row = _row(engine, working)
    assert (row.state, row.phase, row.lease_owner) == ("processing", "chunking", retaken[0].lease)
    assert retaken[0].lease != held[working].lease
    assert _row(engine, cancelled).state == "cancelled"
    assert _row(engine, cancelled).text is None


def test_a_claim_takes_over_only_leases_that_ran_out(engine: Engine) -> None:
    a, b = _store(engine, "ingest-a", lease_s=1.0), _store(engine, "ingest-b")
    [task_id] = _submit(a, 1)
    a.claim(1)
    assert b.claim(1) == []
    time.sleep(1.2)
    assert [t.task_id for t in b.claim(1)] == [task_id]


def test_renewing_extends_the_lease_and_says_what_is_still_held(engine: Engine) -> None:
    a = _store(engine, "ingest-a", lease_s=1.0)
    task_ids = _submit(a, 2)
    claimed = a.claim(5)
    lease = claimed[0].lease
    first = _naive(_row(engine, task_ids[0]).lease_until)
    time.sleep(0.6)
    assert a.renew(lease) == set(task_ids)
    renewed = _naive(_row(engine, task_ids[0]).lease_until)
    assert renewed >= first + dt.timedelta(seconds=0.5)
    time.sleep(0.6)  # past the first expiry, not past the renewed one
    assert _store(engine, "ingest-b").claim(5) == []


def test_a_holder_that_lost_its_lease_cannot_write_the_task_any_more(engine: Engine) -> None:
    a, b = _store(engine, "ingest-a"), _store(engine, "ingest-b")
    [task_id] = _submit(a, 1)
    [old] = a.claim(1)
    _expire(engine, [task_id])  # A stalled past its lease
    [new] = b.claim(1)
    b.set_phase(new.lease, [task_id], "embedding", 40)

    assert a.renew(old.lease) == set()
    a.set_phase(old.lease, [task_id], "indexing", 80)
    sessions = make_sessions(engine)
    with sessions.begin() as session:
        assert a.lock_states(session, old.lease, [task_id]) == {}
        a.finish(session, old.lease, task_id, states.COMPLETED)
    a.fail_unfinished(old.lease, [task_id], "INTERNAL", "broke")
    row = _row(engine, task_id)
    assert (row.state, row.phase, row.lease_owner) == ("processing", "embedding", new.lease)

    with sessions.begin() as session:
        assert b.lock_states(session, new.lease, [task_id]) == {task_id: "processing"}
        b.finish(session, new.lease, task_id, states.COMPLETED)
    row = _row(engine, task_id)
    assert (row.state, row.lease_until) == ("completed", None)
    assert b.renew(new.lease) == {task_id}  # finished under it, not lost


def test_a_restart_takes_back_only_its_own_earlier_runs_leases(engine: Engine) -> None:
    first_run, other = _store(engine, "ingest_1"), _store(engine, "ingestX1")
    _submit(first_run, 4)
    [processing, cancelling] = first_run.claim(2)
    first_run.request_cancel(TENANT, cancelling.task_id)
    [others] = other.claim(1)  # a live process whose name a bare LIKE 'ingest_1:%' matches
    assert first_run.recover() == 0  # this run's own leases: left alone

    second_run = _store(engine, "ingest_1")
    [own] = second_run.claim(1)  # the new run's own claim, made before its recovery
    assert second_run.recover() == 1
    assert _row(engine, processing.task_id).state == "queued"
    assert _row(engine, cancelling.task_id).state == "cancelled"
    assert _row(engine, own.task_id).lease_owner == own.lease
    assert _row(engine, others.task_id).lease_owner == others.lease
    assert _row(engine, others.task_id).state == "processing"


def test_tasks_left_processing_by_a_version_without_leases_are_taken_back(
    engine: Engine,
) -> None:
    a = _store(engine, "ingest-a")
    [task_id] = _submit(a, 1)
    with make_sessions(engine).begin() as session:
        session.execute(update(TaskRow).values(state="processing", phase="embedding"))
    assert [t.task_id for t in a.claim(1)] == [task_id]


def test_the_lease_columns_are_added_to_an_older_task_table_in_place(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "CREATE TABLE ingest_tasks (task_id VARCHAR(32) PRIMARY KEY, "
                    "tenant VARCHAR(64), namespace VARCHAR(256), document_id VARCHAR(128), "
                    "text TEXT, text_bytes BIGINT, metadata_json TEXT, on_duplicate VARCHAR(16), "
                    "submitted_by VARCHAR(32), state VARCHAR(16), phase VARCHAR(16), "
                    "percent INTEGER, error_code VARCHAR(64), error_message TEXT, "
                    "error_data_json TEXT, created_at TIMESTAMP, updated_at TIMESTAMP)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO ingest_tasks VALUES ('old1', 't', 'docs', 'd1', 'x', 1, '{}', "
                    "'skip', '', 'processing', 'embedding', 40, '', '', '{}', "
                    "'2026-01-01 00:00:00', '2026-01-01 00:00:00')"
                )
            )
        migrate_to_head(engine)
        migrate_to_head(engine)  # a second run finds the schema at head
        row = _row(engine, "old1")
        assert (row.lease_owner, row.lease_until) == ("", None)
        [claimed] = _store(engine, "ingest-a").claim(1)
        assert claimed.task_id == "old1"
    finally:
        engine.dispose()

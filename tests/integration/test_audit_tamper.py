"""Tampering with the audit trail directly in the database, on SQLite and PostgreSQL, and
what ``AuditStore.verify`` makes of it.

Each attack is made with plain SQL after dropping the append-only triggers, as the owner
of the database could: that is the threat the hash chain and the signed checkpoints are
for (the triggers only keep reachstore's own code from rewriting the tables). Every test
names the kind of break and its position, and checks that the other tenant's chain is
untouched: chains are per tenant, so one tenant's damage must not spill into another's
report.

The trail: acme has events 1-20 with signed checkpoints at 10 and 20, globex has events
1-4 with checkpoints at 3 and 4.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from reachstore_server.audit import parallel_walk
from reachstore_server.audit.appending import Appender
from reachstore_server.audit.chain import HASHED_FIELDS, canonical_json, event_hash
from reachstore_server.audit.signing import CheckpointKeys, PrivateKey
from reachstore_server.audit.store import AuditStore
from reachstore_server.audit.verify import (
    DELETED,
    EDITED,
    FORGED_CHECKPOINT,
    INSERTED,
    REORDERED,
    REWRITTEN,
    TRUNCATED,
    Report,
)
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head

KEY = PrivateKey.generate()
KEYS = CheckpointKeys(KEY.public)
APPEND_ONLY = ("audit_events", "audit_checkpoints")
START = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)
EVENT_COLUMNS = ("tenant", "seq", *(f for f in HASHED_FIELDS if f != "tenant"), "hash")


def audit_event(tenant: str, n: int, **changes: Any) -> dict[str, Any]:
    """The n-th event of a tenant as a service ships it (everything but the chain)."""
    time = START + dt.timedelta(seconds=n)
    return {
        "event_id": f"{tenant}-{n:04d}",
        "time": time.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "tenant": tenant,
        "caller_key_id": f"key_{tenant}",
        "service": "ingest",
        "method": "CreateDocument",
        "idempotency_key": f"idem-{n}",
        "params_json": canonical_json({"namespace": "docs", "document_id": f"doc-{n}"}),
        "result_status": "ok",
        "error_code": "",
        "category": "",
        "duration_ms": n,
        "trace_id": "",
        **changes,
    }


def events(tenant: str, first: int, last: int) -> list[dict[str, Any]]:
    return [audit_event(tenant, n) for n in range(first, last + 1)]


def chain_rows(conn: Connection, tenant: str) -> list[dict[str, Any]]:
    """The tenant's stored events in chain order, as plain dicts."""
    result = conn.execute(
        text(
            f"SELECT id, {', '.join(EVENT_COLUMNS)} FROM audit_events "
            "WHERE tenant = :tenant ORDER BY seq"
        ),
        {"tenant": tenant},
    )
    return [dict(row) for row in result.mappings()]


def chain_head(conn: Connection, tenant: str) -> tuple[int, str]:
    row = conn.execute(
        text("SELECT seq, hash FROM audit_heads WHERE tenant = :tenant"), {"tenant": tenant}
    ).one()
    return row.seq, row.hash


@dataclasses.dataclass
class Trail:
    engine: Engine
    store: AuditStore

    def verify(self, tenant: str) -> Report:
        return self.store.verify(tenant, KEYS)

    def rows(self, tenant: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return chain_rows(conn, tenant)

    def head(self, tenant: str) -> tuple[int, str]:
        with self.engine.connect() as conn:
            return chain_head(conn, tenant)


@pytest.fixture(autouse=True, params=["one-process", "parallel"])
def walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every check both ways: walked in this process, and in worker processes that each
    walk a stretch (``reachstore_server/audit/parallel_walk.py``), which must find and name the
    same breaks."""
    if request.param == "parallel":
        monkeypatch.setenv("REACHSTORE_AUDIT_VERIFY_PARALLEL_MIN", "1")
    return str(request.param)


@pytest.fixture
def trail(database_url: str) -> Iterator[Trail]:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    store = AuditStore(make_sessions(engine))
    store.append(events("acme", 1, 10) + events("globex", 1, 3))
    assert len(store.checkpoint(KEY)) == 2
    store.append(events("acme", 11, 20) + events("globex", 4, 4))
    assert len(store.checkpoint(KEY)) == 2
    yield Trail(engine, store)
    engine.dispose()


@pytest.fixture
def tamper(trail: Trail) -> Iterator[Connection]:
    """A transaction with the append-only triggers gone; the test commits its attack.
    Everything the attack reads goes through it too: on PostgreSQL dropping a trigger
    locks the table against every other connection until the commit."""
    with trail.engine.connect() as conn:
        drop_append_only_triggers(conn)
        yield conn


def drop_append_only_triggers(conn: Connection) -> None:
    """Drops every trigger on the append-only tables, found in the catalog as an owner
    would find them (so this keeps working whatever the triggers are called)."""
    tables = {"t1": APPEND_ONLY[0], "t2": APPEND_ONLY[1]}
    if conn.dialect.name == "postgresql":
        found = conn.execute(
            text(
                "SELECT DISTINCT trigger_name, event_object_table FROM information_schema.triggers"
                " WHERE event_object_table IN (:t1, :t2)"
            ),
            tables,
        ).all()
        statements = [f"DROP TRIGGER {name} ON {table}" for name, table in found]
    else:
        found = conn.execute(
            text(
                "SELECT name, tbl_name FROM sqlite_master"
                " WHERE type = 'trigger' AND tbl_name IN (:t1, :t2)"
            ),
            tables,
        ).all()
        statements = [f"DROP TRIGGER {name}" for name, _ in found]
    assert {table for _, table in found} == set(APPEND_ONLY)
    for statement in statements:
        conn.execute(text(statement))


def insert_event(conn: Connection, row: Mapping[str, Any]) -> None:
    columns = ", ".join(EVENT_COLUMNS)
    values = ", ".join(f":{c}" for c in EVENT_COLUMNS)
    conn.execute(
        text(f"INSERT INTO audit_events ({columns}) VALUES ({values})"),
        {c: row[c] for c in EVENT_COLUMNS},
    )


def move_event(conn: Connection, row_id: int, seq: int) -> None:
    conn.execute(
        text("UPDATE audit_events SET seq = :seq WHERE id = :id"), {"seq": seq, "id": row_id}
    )


def shift_positions(conn: Connection, tenant: str, from_seq: int, by: int) -> None:
    """Moves every event from ``from_seq`` on by ``by`` positions. In two steps, through
    a range nothing occupies, because the (tenant, seq) uniqueness is checked row by row."""
    params = {"tenant": tenant, "from_seq": from_seq, "far": 1_000_000, "by": by}
    conn.execute(
        text(
            "UPDATE audit_events SET seq = seq + :far WHERE tenant = :tenant AND seq >= :from_seq"
        ),
        params,
    )
    conn.execute(
        text(
            "UPDATE audit_events SET seq = seq - :far + :by WHERE tenant = :tenant AND seq >= :far"
        ),
        params,
    )


def set_head(conn: Connection, tenant: str, seq: int, digest: str) -> None:
    """Keeps the head row in line with the altered chain, so that later appends link on
    cleanly and nothing but the chain itself gives the change away."""
    conn.execute(
        text("UPDATE audit_heads SET seq = :seq, hash = :hash WHERE tenant = :tenant"),
        {"seq": seq, "hash": digest, "tenant": tenant},
    )


def assert_break(trail: Trail, kind: str, seq: int, event_id: str | None = None) -> None:
    report = trail.verify("acme")
    found = report.first_break
    assert found is not None, "the tampering went unnoticed"
    assert (found.kind, found.tenant, found.seq) == (kind, "acme", seq), found
    if event_id is not None:
        assert found.event_id == event_id, found
    assert_untouched(trail, "globex", events=4, checkpoints=2)


def assert_untouched(trail: Trail, tenant: str, events: int, checkpoints: int) -> None:
    report = trail.verify(tenant)
    assert report.first_break is None, report.first_break
    assert (report.events_checked, report.checkpoints_checked) == (events, checkpoints)


# --- the untouched trail ----------------------------------------------------------------------


def test_an_untouched_trail_verifies(trail: Trail) -> None:
    assert trail.store.tenants() == ["acme", "globex"]
    assert_untouched(trail, "acme", events=20, checkpoints=2)
    assert_untouched(trail, "globex", events=4, checkpoints=2)
    rows = trail.rows("acme")
    assert [r["seq"] for r in rows] == list(range(1, 21))
    assert trail.head("acme") == (20, rows[-1]["hash"])


def test_the_database_refuses_updates_and_deletes(trail: Trail) -> None:
    """The triggers, not reachstore's code, refuse: the error comes from the database."""
    for table in APPEND_ONLY:
        for statement in (f"UPDATE {table} SET tenant = 'evil'", f"DELETE FROM {table}"):
            with pytest.raises(DBAPIError, match="append-only"), trail.engine.begin() as conn:
                conn.execute(text(statement))
    assert_untouched(trail, "acme", events=20, checkpoints=2)


# --- attacks ---------------------------------------------------------------------------------


def test_an_edited_event_is_found_at_its_position(trail: Trail, tamper: Connection) -> None:
    tamper.execute(
        text("UPDATE audit_events SET params_json = :params WHERE tenant = 'acme' AND seq = 5"),
        {"params": canonical_json({"namespace": "docs", "document_id": "someone-elses"})},
    )
    tamper.commit()
    assert_break(trail, EDITED, 5, "acme-0005")


def test_a_deleted_event_is_found_at_its_position(trail: Trail, tamper: Connection) -> None:
    tamper.execute(text("DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 7"))
    tamper.commit()
    assert_break(trail, DELETED, 7)


def test_a_deleted_event_is_found_even_with_the_gap_closed(
    trail: Trail, tamper: Connection
) -> None:
    """Renumbering after the deletion hides the gap, not the missing link."""
    tamper.execute(text("DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 7"))
    shift_positions(tamper, "acme", 8, -1)
    set_head(tamper, "acme", 19, chain_rows(tamper, "acme")[-1]["hash"])
    tamper.commit()
    assert_break(trail, DELETED, 7, "acme-0008")


@pytest.mark.parametrize("count", [1, 2])
def test_an_inserted_event_is_found_at_its_position(
    trail: Trail, tamper: Connection, count: int
) -> None:
    """A careful insert: later events move up, and each new event carries a correct hash
    of its own linking to its predecessor. Only the link of the first original event after
    them, which still points past them, gives them away."""
    prev_hash = chain_rows(tamper, "acme")[7 - 1]["hash"]  # the new events follow event 7
    shift_positions(tamper, "acme", 8, count)
    for n in range(count):
        forged = audit_event("acme", 900 + n, prev_hash=prev_hash)
        prev_hash = event_hash(forged)
        insert_event(tamper, {**forged, "seq": 8 + n, "hash": prev_hash})
    head_seq, head_hash = chain_head(tamper, "acme")
    set_head(tamper, "acme", head_seq + count, head_hash)
    tamper.commit()
    assert_break(trail, INSERTED, 8)


def test_swapped_events_are_found_as_a_reorder(trail: Trail, tamper: Connection) -> None:
    rows = {r["seq"]: r for r in chain_rows(tamper, "acme")}
    move_event(tamper, rows[12]["id"], -1)
    move_event(tamper, rows[16]["id"], 12)
    move_event(tamper, rows[12]["id"], 16)
    tamper.commit()
    assert_break(trail, REORDERED, 12, "acme-0016")


def test_a_cut_off_tail_is_found_against_the_last_checkpoint(
    trail: Trail, tamper: Connection
) -> None:
    """The last five events go, head event included, and the head row is wound back so
    the next append would continue the shortened chain; the checkpoint at 20 remembers."""
    tamper.execute(text("DELETE FROM audit_events WHERE tenant = 'acme' AND seq > 15"))
    set_head(tamper, "acme", 15, chain_rows(tamper, "acme")[-1]["hash"])
    tamper.commit()
    assert_break(trail, TRUNCATED, 16)


def test_a_checkpoint_with_a_changed_head_is_found_as_forged(
    trail: Trail, tamper: Connection
) -> None:
    tamper.execute(
        text("UPDATE audit_checkpoints SET head_hash = :fake WHERE tenant = 'acme' AND seq = 10"),
        {"fake": "f" * 64},
    )
    tamper.commit()
    assert_break(trail, FORGED_CHECKPOINT, 10)


def test_a_checkpoint_with_a_changed_signature_is_found_as_forged(
    trail: Trail, tamper: Connection
) -> None:
    tamper.execute(
        text("UPDATE audit_checkpoints SET signature = :fake WHERE tenant = 'acme' AND seq = 20"),
        {"fake": "0" * 128},
    )
    tamper.commit()
    assert_break(trail, FORGED_CHECKPOINT, 20)


def test_a_made_up_checkpoint_is_found_as_forged(trail: Trail, tamper: Connection) -> None:
    """A checkpoint vouching for the current event 15, signed without the key."""
    rows = {r["seq"]: r for r in chain_rows(tamper, "acme")}
    tamper.execute(
        text(
            "INSERT INTO audit_checkpoints (tenant, seq, head_hash, signed_at, key_id, signature)"
            " VALUES ('acme', 15, :head, '2026-03-02T00:00:00.000Z', :key_id, :signature)"
        ),
        {"head": rows[15]["hash"], "key_id": KEY.key_id, "signature": "ab" * 64},
    )
    tamper.commit()
    assert_break(trail, FORGED_CHECKPOINT, 15)


@pytest.mark.parametrize(("edited", "checkpoint"), [(4, 10), (15, 20)])
def test_a_rewritten_chain_is_found_at_the_next_checkpoint(
    trail: Trail, tamper: Connection, edited: int, checkpoint: int
) -> None:
    """The full rewrite: one event edited, then every later hash and link recomputed and
    the head moved along. The chain is consistent in itself; only the first signed
    checkpoint at or after the edit still holds the old hash."""
    rows = chain_rows(tamper, "acme")
    prev_hash = rows[edited - 2]["hash"]
    for row in rows[edited - 1 :]:
        if row["seq"] == edited:
            row["params_json"] = canonical_json({"namespace": "docs", "document_id": "forged"})
        row["prev_hash"] = prev_hash
        row["hash"] = prev_hash = event_hash(row)
        tamper.execute(
            text(
                "UPDATE audit_events SET params_json = :params_json, prev_hash = :prev_hash,"
                " hash = :hash WHERE id = :id"
            ),
            row,
        )
    set_head(tamper, "acme", 20, prev_hash)
    tamper.commit()
    assert_break(trail, REWRITTEN, checkpoint)


# --- appending -------------------------------------------------------------------------------


def chain_state(trail: Trail, tenant: str) -> tuple[list[tuple[int, str, str]], tuple[int, str]]:
    return [(r["seq"], r["event_id"], r["hash"]) for r in trail.rows(tenant)], trail.head(tenant)


def test_appending_is_idempotent_by_event_id(trail: Trail) -> None:
    """A shipper that did not see the acknowledgement sends the batch again."""
    batch = events("acme", 21, 25)
    assert trail.store.append(batch) == (5, 0)
    before = chain_state(trail, "acme")
    assert trail.store.append(batch) == (0, 5)
    assert chain_state(trail, "acme") == before
    # A batch mixing old and new events stores only the new one, right after the head.
    assert trail.store.append([*batch[3:], audit_event("acme", 26)]) == (1, 2)
    after, head = chain_state(trail, "acme")
    assert after[:-1] == before[0] and after[-1][:2] == (26, "acme-0026")
    assert head == (26, after[-1][2])
    assert_untouched(trail, "acme", events=26, checkpoints=2)


def test_concurrent_appends_to_one_tenant_form_one_chain(trail: Trail) -> None:
    """Several appenders at once (the audit service appends on a thread per call, and
    may run as several replicas): every event gets its own position, consecutive, each
    linking to the one before. An append that gives up on conflicts is sent again, as
    the shipper does with a batch that was not acknowledged."""
    writers, batches, size = 6, 4, 3
    start = threading.Barrier(writers)

    def write(writer: int) -> None:
        start.wait()
        resent = 0
        for batch in range(batches):
            first = 100 + (writer * batches + batch) * size
            while True:
                try:
                    assert trail.store.append(events("acme", first, first + size - 1)) == (size, 0)
                    break
                except RuntimeError:
                    resent += 1
                    assert resent < 20, "appends keep failing under contention"

    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(write, range(writers)))
    total = 20 + writers * batches * size
    rows = trail.rows("acme")
    assert [r["seq"] for r in rows] == list(range(1, total + 1))
    assert all(r["prev_hash"] == p["hash"] for p, r in zip(rows, rows[1:], strict=False))
    assert trail.head("acme") == (total, rows[-1]["hash"])
    assert_untouched(trail, "acme", events=total, checkpoints=2)


def test_a_second_appender_waits_while_the_first_holds_the_head(
    trail: Trail, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's promise: an appender holds its tenant's head from reading it until it
    commits, so appenders to one tenant take turns instead of colliding. The first one is
    paused right after reading the head (while it links its events to it); the second must
    not finish meanwhile."""
    head_read, resume = threading.Event(), threading.Event()
    link_rows = Appender._chain

    def pause_after_reading_the_head(*args: Any) -> Any:
        if threading.current_thread() is first:
            head_read.set()
            resume.wait(10)
        return link_rows(*args)

    monkeypatch.setattr(Appender, "_chain", staticmethod(pause_after_reading_the_head))
    first = threading.Thread(target=trail.store.append, args=(events("acme", 21, 21),))
    second = threading.Thread(target=trail.store.append, args=(events("acme", 22, 22),))
    try:
        first.start()
        assert head_read.wait(10)
        second.start()
        second.join(0.5)
        finished_meanwhile = not second.is_alive()
    finally:
        resume.set()
        first.join(10)
        second.join(10)
    assert_untouched(trail, "acme", events=22, checkpoints=2)
    assert not finished_meanwhile, "the second appender read the head the first one held"


def test_a_range_is_checked_on_its_own(trail: Trail, tamper: Connection) -> None:
    """Verify with from_seq/to_seq checks only that stretch (linked to the event before
    it) and the checkpoints inside it: a break outside the range is not its business."""
    tamper.execute(
        text("UPDATE audit_events SET params_json = '{}' WHERE tenant = 'acme' AND seq = 15")
    )
    tamper.commit()
    early = trail.store.verify("acme", KEYS, from_seq=3, to_seq=12)
    assert early.first_break is None and early.events_checked == 10
    assert early.checkpoints_checked == 1  # the one at 10; the one at 20 is outside
    late = trail.store.verify("acme", KEYS, from_seq=13, to_seq=18)
    assert late.first_break is not None and late.first_break.kind == EDITED
    assert late.first_break.seq == 15


def test_a_long_chain_is_walked_in_parallel_when_it_passes(trail: Trail, walk: str) -> None:
    """The parallel walk really runs (and the one-process walk when it should), and
    answers what the one-process walk answers."""
    report = trail.verify("acme")
    assert report.first_break is None and report.events_checked == 20
    assert report.walkers == (1 if walk == "one-process" else parallel_walk.workers())
    assert parallel_walk.workers() >= 2, "this machine has two cores"

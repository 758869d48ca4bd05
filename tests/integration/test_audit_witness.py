"""The attacks an owner of the database and the data folder can make once the hash chain
alone no longer suffices, on SQLite and PostgreSQL, and what Verify makes of them with a
witness outside the database (a file, and an HTTP receiver) and the expected cadence.

Each attack is plain SQL after dropping the append-only triggers (as in
``tests/integration/test_audit_tamper.py``), or an edit of the witness file on disk. The
signing key stays out of the attacker's hands; the HMAC key of older versions, kept in
the data folder, does not.

The trail: acme has events 1-20 with checkpoints at 10 and 20, globex 1-4 with
checkpoints at 3 and 4, every checkpoint also in the witness file.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Connection, Engine, text

from reachstore_server.audit.chain import Signer, canonical_json, event_hash
from reachstore_server.audit.checkpointing import Checkpointer
from reachstore_server.audit.signing import CheckpointKeys, PrivateKey
from reachstore_server.audit.store import AuditStore
from reachstore_server.audit.verify import (
    CADENCE_GAP,
    CHECKPOINT_MISSING,
    FORGED_CHECKPOINT,
    REWRITTEN,
    TRUNCATED,
    WITNESS_INCOMPLETE,
    Cadence,
    Report,
)
from reachstore_server.audit.verify_settings import WITNESS_BROKEN, Verifier
from reachstore_server.audit.witness import Delivery, FileWitness, HttpWitness, Witness
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head
from tests.integration.test_audit_tamper import (
    audit_event,
    chain_rows,
    drop_append_only_triggers,
    set_head,
)

KEY = PrivateKey.generate()
LEGACY = Signer(b"the-old-audit.key-in-the-folder!")
KEYS = CheckpointKeys(KEY.public, LEGACY)
INTERVAL_S = 60.0


def fresh_events(tenant: str, first: int, last: int, age_s: float = 5.0) -> list[dict[str, Any]]:
    """Events made ``age_s`` ago, so checkpoints signed now are on time."""
    made = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=age_s)
    stamp = made.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return [audit_event(tenant, n, time=stamp) for n in range(first, last + 1)]


@dataclasses.dataclass
class Witnessed:
    engine: Engine
    store: AuditStore
    witness_path: Path
    checkpointer: Checkpointer

    def verify(self, tenant: str, *witnesses: Witness, grace_s: float = 300.0) -> Report:
        cadence = Cadence(INTERVAL_S, grace_s, dt.datetime.now(dt.UTC))
        chosen = witnesses or (FileWitness(self.witness_path),)
        [(_, report)] = Verifier(KEYS, chosen, cadence).verify(self.store, [tenant])
        return report

    def without_witness(self, tenant: str) -> Report:
        """What Verify found before witnesses existed: the database alone."""
        return self.store.verify(tenant, KEYS)


@pytest.fixture(autouse=True, params=["one-process", "parallel"])
def walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every check both ways: walked in this process, and in worker processes that each
    walk a stretch (``reachstore_server/audit/parallel_walk.py``), which must find and name the
    same breaks."""
    if request.param == "parallel":
        monkeypatch.setenv("REACHSTORE_AUDIT_VERIFY_PARALLEL_MIN", "1")
    return str(request.param)


@pytest.fixture
def witnessed(database_url: str, tmp_path: Path) -> Iterator[Witnessed]:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    store = AuditStore(make_sessions(engine))
    path = tmp_path / "other-volume" / "audit_witness.jsonl"
    checkpointer = Checkpointer(store, KEY, Delivery([FileWitness(path)], KEY))
    store.append(fresh_events("acme", 1, 10) + fresh_events("globex", 1, 3))
    assert checkpointer.tick() == 2
    store.append(fresh_events("acme", 11, 20) + fresh_events("globex", 4, 4))
    assert checkpointer.tick() == 2
    yield Witnessed(engine, store, path, checkpointer)
    engine.dispose()


@pytest.fixture
def tamper(witnessed: Witnessed) -> Iterator[Connection]:
    with witnessed.engine.connect() as conn:
        drop_append_only_triggers(conn)
        yield conn


def assert_found(report: Report, kind: str, seq: int) -> None:
    found = report.first_break
    assert found is not None, "the tampering went unnoticed"
    assert (found.kind, found.seq) == (kind, seq), found


def rewrite_from(conn: Connection, tenant: str, edited: int) -> str:
    """Edits event ``edited`` and recomputes every later hash and link; returns the head."""
    rows = chain_rows(conn, tenant)
    prev_hash = rows[edited - 2]["hash"] if edited > 1 else "0" * 64
    for row in rows[edited - 1 :]:
        if row["seq"] == edited:
            row["params_json"] = canonical_json({"namespace": "docs", "document_id": "forged"})
        row["prev_hash"] = prev_hash
        row["hash"] = prev_hash = event_hash(row)
        conn.execute(
            text(
                "UPDATE audit_events SET params_json = :params_json, prev_hash = :prev_hash,"
                " hash = :hash WHERE id = :id"
            ),
            row,
        )
    set_head(conn, tenant, rows[-1]["seq"], prev_hash)
    return prev_hash


def add_checkpoint(
    conn: Connection, tenant: str, seq: int, head: str, key_id: str, sig: str
) -> None:
    conn.execute(
        text(
            "INSERT INTO audit_checkpoints (tenant, seq, head_hash, signed_at, key_id, signature)"
            " VALUES (:tenant, :seq, :head, :signed_at, :key_id, :signature)"
        ),
        {"tenant": tenant, "seq": seq, "head": head, "signed_at": SIGNED_AT,
         "key_id": key_id, "signature": sig},
    )  # fmt: skip


SIGNED_AT = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_an_untouched_trail_verifies_against_its_witness(witnessed: Witnessed) -> None:
    lines = witnessed.witness_path.read_text().splitlines()
    assert len(lines) == 4 and all(f'"key_id":"{KEY.key_id}"' in line for line in lines)
    for tenant, events in (("acme", 20), ("globex", 4)):
        report = witnessed.verify(tenant)
        assert report.first_break is None, report.first_break
        assert (report.events_checked, report.checkpoints_checked) == (events, 2)


@pytest.fixture
def longer(witnessed: Witnessed) -> Witnessed:
    """Five more events of acme, signed at 25: the tail an attacker wants gone."""
    witnessed.store.append(fresh_events("acme", 21, 25))
    assert witnessed.checkpointer.tick() == 1
    return witnessed


def test_events_deleted_after_the_last_checkpoint_are_found_truncated(
    longer: Witnessed, tamper: Connection
) -> None:
    """Attack 1: the tail after the last checkpoint the database keeps goes, with the
    checkpoint that had been signed over it since, and the head is wound back."""
    witnessed = longer
    tamper.execute(text("DELETE FROM audit_events WHERE tenant = 'acme' AND seq > 20"))
    tamper.execute(text("DELETE FROM audit_checkpoints WHERE tenant = 'acme' AND seq > 20"))
    set_head(tamper, "acme", 20, chain_rows(tamper, "acme")[-1]["hash"])
    tamper.commit()
    assert witnessed.without_witness("acme").first_break is None  # the database alone agrees
    assert_found(witnessed.verify("acme"), TRUNCATED, 21)
    assert witnessed.verify("globex").first_break is None


def test_a_rewrite_with_every_checkpoint_deleted_is_found_against_the_witness(
    witnessed: Witnessed, tamper: Connection
) -> None:
    """Attack 2: no checkpoint left in the database to disagree with."""
    tamper.execute(text("DELETE FROM audit_checkpoints WHERE tenant = 'acme'"))
    rewrite_from(tamper, "acme", 5)
    tamper.commit()
    assert witnessed.without_witness("acme").first_break is None
    report = witnessed.verify("acme")
    assert_found(report, REWRITTEN, 10)
    assert "audit_witness.jsonl" in report.first_break.detail  # type: ignore[union-attr]


def test_checkpoints_deleted_from_the_database_are_named_missing(
    witnessed: Witnessed, tamper: Connection
) -> None:
    tamper.execute(text("DELETE FROM audit_checkpoints WHERE tenant = 'acme' AND seq = 20"))
    tamper.commit()
    assert witnessed.without_witness("acme").first_break is None
    assert_found(witnessed.verify("acme"), CHECKPOINT_MISSING, 20)


def test_a_rewrite_signed_with_the_old_hmac_key_is_found(
    witnessed: Witnessed, tamper: Connection
) -> None:
    """Attack 3: the chain recomputed after an edit at 15 and a new checkpoint signed with
    the HMAC key the data folder still holds, in place of the real ones (with an Ed25519
    checkpoint left, the HMAC one would be a downgrade: see the next test)."""
    tamper.execute(text("DELETE FROM audit_checkpoints WHERE tenant = 'acme'"))
    head = rewrite_from(tamper, "acme", 15)
    add_checkpoint(
        tamper, "acme", 20, head, LEGACY.key_id, LEGACY.sign("acme", 20, head, SIGNED_AT)
    )
    tamper.commit()
    assert witnessed.without_witness("acme").first_break is None
    assert_found(witnessed.verify("acme"), CHECKPOINT_MISSING, 10)
    cadence = Cadence(INTERVAL_S, 300, dt.datetime.now(dt.UTC))
    verifier = Verifier(KEYS, [FileWitness(witnessed.witness_path)], cadence)
    [(_, later)] = verifier.verify(witnessed.store, ["acme"], from_seq=11)
    assert_found(later, REWRITTEN, 20)


def test_an_hmac_checkpoint_after_ed25519_ones_is_forged(
    witnessed: Witnessed, tamper: Connection
) -> None:
    """The database alone: the HMAC key no longer signs, so an HMAC checkpoint past the
    chain's first Ed25519 one is a downgrade, whoever holds the old key."""
    head = chain_rows(tamper, "acme")[14]["hash"]
    add_checkpoint(
        tamper, "acme", 15, head, LEGACY.key_id, LEGACY.sign("acme", 15, head, SIGNED_AT)
    )
    tamper.commit()
    assert_found(witnessed.without_witness("acme"), FORGED_CHECKPOINT, 15)


def test_a_checkpoint_signed_with_another_key_is_forged(
    witnessed: Witnessed, tamper: Connection
) -> None:
    other = PrivateKey.generate()
    tamper.execute(text("DELETE FROM audit_checkpoints WHERE tenant = 'acme' AND seq = 20"))
    head = rewrite_from(tamper, "acme", 15)
    add_checkpoint(tamper, "acme", 20, head, other.key_id, other.sign("acme", 20, head, SIGNED_AT))
    tamper.commit()
    report = witnessed.without_witness("acme")
    assert_found(report, FORGED_CHECKPOINT, 20)
    assert other.key_id in report.first_break.detail  # type: ignore[union-attr]
    # Naming the audit key as its own does not help: the signature does not verify.
    tamper.execute(text("DELETE FROM audit_checkpoints WHERE tenant = 'acme' AND seq = 20"))
    add_checkpoint(tamper, "acme", 20, head, KEY.key_id, other.sign("acme", 20, head, SIGNED_AT))
    tamper.commit()
    assert_found(witnessed.without_witness("acme"), FORGED_CHECKPOINT, 20)
    assert witnessed.verify("acme").first_break is not None


def test_the_witness_files_last_line_deleted_is_a_witness_break(witnessed: Witnessed) -> None:
    lines = witnessed.witness_path.read_text().splitlines()
    witnessed.witness_path.write_text("\n".join(lines[:-1]) + "\n")
    reports = {t: witnessed.verify(t) for t in ("acme", "globex")}
    broken = [(t, r.first_break) for t, r in reports.items() if r.first_break is not None]
    assert len(broken) == 1, broken
    _, found = broken[0]
    assert found is not None and found.kind == WITNESS_INCOMPLETE
    assert "lacks the checkpoint" in found.detail


def test_a_checkpoint_signed_while_verify_runs_is_no_witness_break(witnessed: Witnessed) -> None:
    """Verify reads the witnesses, then the database. A checkpoint signed and delivered
    between the two (the service's cadence does not wait for a verification) is in the
    database and, by the time of the verdict, in the witness: it must not read as a line
    removed from the witness's end. Seen under load as ``witness_incomplete`` on an
    untouched trail."""
    witness = FileWitness(witnessed.witness_path)
    verifier = Verifier(KEYS, [witness], Cadence(INTERVAL_S, 300, dt.datetime.now(dt.UTC)))
    before = verifier.read_witnesses()
    witnessed.store.append(fresh_events("acme", 21, 23))
    assert witnessed.checkpointer.tick() == 1
    [(_, report)] = verifier.verify(witnessed.store, ["acme"], reads=before)
    assert report.first_break is None, report.first_break


def test_a_line_removed_from_the_middle_of_the_witness_breaks_it(witnessed: Witnessed) -> None:
    lines = witnessed.witness_path.read_text().splitlines()
    witnessed.witness_path.write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    reports = [witnessed.verify(t) for t in ("acme", "globex")]
    kinds = {r.first_break.kind for r in reports if r.first_break is not None}
    assert WITNESS_BROKEN in kinds, kinds


def test_a_witness_line_signed_with_another_key_breaks_it(witnessed: Witnessed) -> None:
    """The attacker rewrites the witness too, re-signing its lines with a key of their own."""
    other = PrivateKey.generate()
    rewritten = witnessed.witness_path.with_name("rewritten.jsonl")
    FileWitness(rewritten).append(other, witnessed.store.latest_checkpoints())
    [read] = Verifier(KEYS, [FileWitness(rewritten)]).read_witnesses()
    assert read.broken is not None and read.broken.line == 1
    assert f"not signed with {KEY.key_id}" in read.broken.detail
    report = witnessed.verify("acme", FileWitness(rewritten))
    assert report.first_break is not None
    assert report.first_break.kind in (WITNESS_BROKEN, WITNESS_INCOMPLETE)


def test_events_left_unsigned_past_the_cadence_are_a_gap(database_url: str) -> None:
    """Checkpoints are due every interval while events arrive: events an hour old that no
    checkpoint covered until now (or at all) are a cadence gap."""
    engine = make_engine(database_url)
    migrate_to_head(engine)
    store = AuditStore(make_sessions(engine))
    try:
        store.append(fresh_events("acme", 1, 5, age_s=3600))
        cadence = Cadence(INTERVAL_S, 300, dt.datetime.now(dt.UTC))
        unsigned = store.verify("acme", KEYS, cadence=cadence)
        assert_found(unsigned, CADENCE_GAP, 1)
        assert "no checkpoint covers it" in unsigned.first_break.detail  # type: ignore[union-attr]
        store.checkpoint(KEY)
        late = store.verify("acme", KEYS, cadence=cadence)
        assert_found(late, CADENCE_GAP, 1)
        assert "the next checkpoint (position 5)" in late.first_break.detail  # type: ignore[union-attr]
        store.append(fresh_events("acme", 6, 8))
        store.checkpoint(KEY)
        wide = dataclasses.replace(cadence, grace_s=7200)
        assert store.verify("acme", KEYS, cadence=wide).first_break is None
    finally:
        engine.dispose()


# --- an HTTP witness -----------------------------------------------------------------------


class LineReceiver:
    """Another system's endpoint: keeps each POSTed line, returns them all on GET."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.refusing = False
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                if receiver.refusing:
                    self.send_response(503)
                else:
                    receiver.lines.append(body)
                    self.send_response(204)
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802
                body = "".join(line + "\n" for line in receiver.lines).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/witness/audit"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[LineReceiver]:
    running = LineReceiver()
    yield running
    running.close()


def test_an_http_witness_keeps_every_checkpoint_and_catches_up(
    database_url: str, receiver: LineReceiver
) -> None:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    store = AuditStore(make_sessions(engine))
    http = HttpWitness(receiver.url, httpx.Client(timeout=5))
    checkpointer = Checkpointer(store, KEY, Delivery([http], KEY))
    cadence = Cadence(INTERVAL_S, 300, dt.datetime.now(dt.UTC))
    try:
        store.append(fresh_events("acme", 1, 5))
        assert checkpointer.tick() == 1
        # The receiver is away for the next checkpoint: it is delivered on a later tick.
        receiver.refusing = True
        store.append(fresh_events("acme", 6, 9))
        assert checkpointer.tick() == 1
        assert len(receiver.lines) == 1
        missing = Verifier(KEYS, [http], cadence).verify(store, ["acme"])[0][1]
        assert_found(missing, WITNESS_INCOMPLETE, 9)
        receiver.refusing = False
        assert checkpointer.tick() == 0
        assert len(receiver.lines) == 2
        assert Verifier(KEYS, [http], cadence).verify(store, ["acme"])[0][1].first_break is None
        # A rewrite with the database's checkpoints gone is found against the receiver.
        with engine.connect() as conn:
            drop_append_only_triggers(conn)
            conn.execute(text("DELETE FROM audit_checkpoints"))
            rewrite_from(conn, "acme", 2)
            conn.commit()
        [(_, report)] = Verifier(KEYS, [http], cadence).verify(store, ["acme"])
        assert_found(report, REWRITTEN, 5)
        assert receiver.url in report.first_break.detail  # type: ignore[union-attr]
    finally:
        engine.dispose()

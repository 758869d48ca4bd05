"""Attacks on the audit trail by whoever holds the database and the data folder but
neither the private key nor the witness (a file on another volume), on SQLite and
PostgreSQL, and what Verify of every tenant makes of them.

The trail: acme has events 1-20 with checkpoints at 10 and 20, globex 1-4 with
checkpoints at 3 and 4, every checkpoint also in the witness file.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, text

from reachstore_server.audit.chain import canonical_json, event_hash
from reachstore_server.audit.checkpointing import Checkpointer
from reachstore_server.audit.store import AuditStore
from reachstore_server.audit.verify import CADENCE_GAP, Cadence, Report
from reachstore_server.audit.verify_settings import Verifier
from reachstore_server.audit.witness import Delivery, FileWitness
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head
from tests.integration.test_audit_tamper import chain_rows, drop_append_only_triggers, set_head
from tests.integration.test_audit_witness import INTERVAL_S, KEY, KEYS, fresh_events

GRACE_S = 300.0


@dataclasses.dataclass
class Deployment:
    engine: Engine
    store: AuditStore
    witness_path: Path

    def checkpointer(self) -> Checkpointer:
        """The audit service's checkpointing as a freshly started process has it."""
        return Checkpointer(self.store, KEY, Delivery([FileWitness(self.witness_path)], KEY))

    def verify_every_tenant(self) -> list[tuple[str, Report]]:
        """What `reachstore audit verify` (and Verify with all_tenants) does: every tenant
        the database lists or the witness holds heads of, against the witness and the
        cadence."""
        cadence = Cadence(INTERVAL_S, GRACE_S, dt.datetime.now(dt.UTC))
        verifier = Verifier(KEYS, [FileWitness(self.witness_path)], cadence)
        reads = verifier.read_witnesses()
        return verifier.verify(self.store, verifier.every_tenant(self.store, reads), reads=reads)


@pytest.fixture
def deployment(database_url: str, tmp_path: Path) -> Iterator[Deployment]:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    store = AuditStore(make_sessions(engine))
    found = Deployment(engine, store, tmp_path / "other-volume" / "audit_witness.jsonl")
    checkpointer = found.checkpointer()
    store.append(fresh_events("acme", 1, 10) + fresh_events("globex", 1, 3))
    assert checkpointer.tick() == 2
    store.append(fresh_events("acme", 11, 20) + fresh_events("globex", 4, 4))
    assert checkpointer.tick() == 2
    yield found
    engine.dispose()


@pytest.fixture
def tamper(deployment: Deployment) -> Iterator[Connection]:
    with deployment.engine.connect() as conn:
        drop_append_only_triggers(conn)
        yield conn


def broken(results: list[tuple[str, Report]]) -> dict[str, Any]:
    return {t: r.first_break for t, r in results if r.first_break is not None}


def delete_tenant(conn: Connection, tenant: str) -> None:
    for table in ("audit_events", "audit_checkpoints", "audit_heads"):
        conn.execute(text(f"DELETE FROM {table} WHERE tenant = :t"), {"t": tenant})


def test_a_tenant_deleted_entirely_is_found_against_the_witness(
    deployment: Deployment, tamper: Connection
) -> None:
    """Every event, checkpoint and the head of acme deleted: the witness still holds acme's
    signed heads at 10 and 20, so verifying every tenant must not pass."""
    delete_tenant(tamper, "acme")
    tamper.commit()
    results = deployment.verify_every_tenant()
    assert "acme" in broken(results), [(t, r.first_break) for t, r in results]


def test_every_audit_table_emptied_is_found_against_the_witness(
    deployment: Deployment, tamper: Connection
) -> None:
    """The whole trail deleted: the witness holds four signed heads of two tenants, so
    "every tenant" must still mean acme and globex, and both are truncated."""
    delete_tenant(tamper, "acme")
    delete_tenant(tamper, "globex")
    tamper.commit()
    results = deployment.verify_every_tenant()
    assert set(broken(results)) == {"acme", "globex"}, results


def test_acme_moved_to_another_tenant_name_is_found_against_the_witness(
    deployment: Deployment, tamper: Connection
) -> None:
    """acme's chain rebuilt under the name acme-archive (the tenant is hashed, so every
    hash is recomputed) and acme gone: the witness's acme heads have no chain left."""
    rows = chain_rows(tamper, "acme")
    prev = "0" * 64
    for row in rows:
        row["tenant"], row["prev_hash"] = "acme-archive", prev
        row["hash"] = prev = event_hash(row)
        tamper.execute(
            text(
                "UPDATE audit_events SET tenant = :tenant, prev_hash = :prev_hash, hash = :hash"
                " WHERE id = :id"
            ),
            row,
        )
    tamper.execute(text("DELETE FROM audit_checkpoints WHERE tenant = 'acme'"))
    tamper.execute(text("DELETE FROM audit_heads WHERE tenant = 'acme'"))
    tamper.commit()
    assert "acme" in broken(deployment.verify_every_tenant())


def stamp(age_s: float) -> str:
    made = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=age_s)
    return made.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture
def stale_tail(deployment: Deployment) -> Deployment:
    """Events 21-25 of acme stored an hour ago, and the audit service killed before its
    next tick (no checkpoint at stop): Verify now names the unsigned hour a cadence gap."""
    deployment.store.append(fresh_events("acme", 21, 25, age_s=3600))
    found = broken(deployment.verify_every_tenant())
    assert set(found) == {"acme"} and found["acme"].kind == CADENCE_GAP, found
    assert found["acme"].seq == 21
    return deployment


def test_an_hour_old_tail_rewritten_while_the_service_is_down_is_not_signed_into_shape(
    stale_tail: Deployment, tamper: Connection
) -> None:
    """While the service is down, event 22 is edited and 21-25 are re-stamped to now (the
    time is hashed, but nothing signed covers the tail); the service then starts and
    signs and witnesses whatever head the database holds. The hour the tail lay unsigned
    was a cadence gap before the attack; a restarted service must not turn it into a
    signed, witnessed, clean-looking chain."""
    rows = chain_rows(tamper, "acme")
    prev = rows[19]["hash"]
    for row in rows[20:]:
        if row["seq"] == 22:
            row["params_json"] = canonical_json({"namespace": "docs", "document_id": "forged"})
        row["time"], row["prev_hash"] = stamp(2), prev
        row["hash"] = prev = event_hash(row)
        tamper.execute(
            text(
                "UPDATE audit_events SET params_json = :params_json, time = :time,"
                " prev_hash = :prev_hash, hash = :hash WHERE id = :id"
            ),
            row,
        )
    set_head(tamper, "acme", 25, prev)
    tamper.commit()
    restarted = stale_tail.checkpointer()
    restarted.start()
    assert restarted.tick() == 1  # the rewritten head is signed and witnessed
    found = broken(stale_tail.verify_every_tenant())
    assert "acme" in found, "the rewritten tail verifies as signed and on time"

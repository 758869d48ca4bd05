"""A real audit service killed (SIGKILL) while four clients append batches to it, on SQLite
and PostgreSQL, then started again and sent every batch once more, as shippers that lost
their acknowledgements do.

The append path writes a batch in one transaction (``reachstore_server/audit/appending.py``: on
PostgreSQL the rows by ``COPY`` between two pipelines), and its first try takes the ids to
be new, leaving a batch sent again to the ids' uniqueness. Whatever the kill cut short,
read back with SQL: every event is stored exactly once, each chain has consecutive
positions, and every chain verifies.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
import sqlalchemy

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.audit.v1 import audit_service_pb2_grpc as pb_grpc
from reachstore_server.audit.signing import CheckpointKeys
from reachstore_server.audit.store import AuditStore
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.storage.engine import make_engine, make_sessions
from tests.e2e.processes import ServiceProcess, shipper_key
from tests.e2e.test_attack17_unmasked_append import audit_settings

pytestmark = pytest.mark.e2e

TENANTS = ("acme", "globex", "initech")
BATCHES, SIZE = 40, 200


def batch(number: int) -> pb.AppendEventsRequest:
    now = rfc3339(dt.datetime.now(dt.UTC))
    return pb.AppendEventsRequest(
        events=[
            pb.AuditEvent(
                event_id=f"kill17-{number:03d}-{n:03d}",
                time=now,
                tenant=TENANTS[n % len(TENANTS)],
                service="reach",
                method="SubmitTask",
                idempotency_key=f"k-{number}-{n}",
                result_status="ok",
                duration_ms=n,
            )
            for n in range(SIZE)
        ]
    )


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_batches_cut_short_by_a_kill_and_sent_again_are_stored_once_in_order(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env, url, key = audit_settings(engine, tmp_path, request, "attack17-killed-secret")
    batches = [batch(n) for n in range(BATCHES)]
    audit = ServiceProcess(
        "reachstore_server.audit.main", "reachstore.audit.v1.AuditService", tmp_path, "audit", env
    ).start()
    metadata = [("authorization", f"Bearer {shipper_key(env)}")]
    acknowledged: set[int] = set()
    enough = threading.Event()

    def send(number: int) -> None:
        try:
            stub = pb_grpc.AuditServiceStub(audit.channel)
            stub.AppendEvents(batches[number], timeout=30, metadata=metadata)
        except (grpc.RpcError, ValueError, AttributeError):
            return  # killed under it (or the channel closed): sent again below
        acknowledged.add(number)
        if len(acknowledged) >= 8:
            enough.set()

    with ThreadPoolExecutor(4) as pool:
        for number in range(BATCHES):
            pool.submit(send, number)
        assert enough.wait(60), "no batch was acknowledged"
        audit.kill()  # mid-load: some appends in flight, perhaps mid-COPY
    assert 8 <= len(acknowledged) < BATCHES, len(acknowledged)

    again = ServiceProcess(
        "reachstore_server.audit.main",
        "reachstore.audit.v1.AuditService",
        tmp_path,
        "audit-again",
        env,
        address=audit.address,
    ).start()
    try:
        stub = pb_grpc.AuditServiceStub(again.channel)
        replies = [
            stub.AppendEvents(batches[n], timeout=60, metadata=metadata) for n in range(BATCHES)
        ]
    finally:
        assert again.stop() == 0, again.log_tail()
    # Every batch acknowledged before the kill comes back as duplicates only.
    for number in acknowledged:
        assert (replies[number].appended, replies[number].duplicates) == (0, SIZE), number
    assert all(r.appended + r.duplicates == SIZE for r in replies)

    db = make_engine(url)
    try:
        with db.connect() as conn:
            rows = conn.execute(
                sqlalchemy.text(
                    "SELECT tenant, seq, event_id FROM audit_events "
                    "WHERE event_id LIKE 'kill17-%' ORDER BY tenant, seq"
                )
            ).all()
            positions = conn.execute(
                sqlalchemy.text("SELECT tenant, seq FROM audit_events ORDER BY tenant, seq")
            ).all()
        store = AuditStore(make_sessions(db))
        reports = {t: store.verify(t, CheckpointKeys(key.public)) for t in store.tenants()}
    finally:
        db.dispose()
    ids = Counter(row.event_id for row in rows)
    assert len(ids) == BATCHES * SIZE and set(ids.values()) == {1}
    by_tenant: dict[str, list[int]] = {}
    for tenant, seq in positions:
        by_tenant.setdefault(tenant, []).append(seq)
    for tenant, seqs in by_tenant.items():
        assert seqs == list(range(1, len(seqs) + 1)), tenant
    for tenant, report in reports.items():
        assert report.first_break is None, (tenant, report.first_break)

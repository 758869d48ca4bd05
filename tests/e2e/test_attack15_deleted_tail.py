"""Events a real audit service stored after its last checkpoint, deleted — chain head and
all — by whoever owns the database, after the service was killed before its next tick.

No checkpoint ever covered them, so the database alone cannot show they were there. The
witness can: the service hands it each chain's head right after an append, before the
call is answered (``Checkpointer.witness_appends``), so `reachstore audit verify` finds the
chain shorter than a head the witness holds.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.audit.v1 import audit_service_pb2_grpc as pb_grpc
from reachstore_server.audit.signing import PrivateKey
from reachstore_server.common.timefmt import rfc3339
from tests.e2e.processes import ServiceProcess, shipper_key
from tests.e2e.test_audit_cli import delete_sql, reachstore

pytestmark = pytest.mark.e2e


def test_a_tail_deleted_before_any_checkpoint_exits_1(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    key = PrivateKey.generate()
    public = tmp_path / "keys" / "audit.pub"
    public.parent.mkdir()
    public.write_text(key.public.pem())
    witness = tmp_path / "other-volume" / "audit_witness.jsonl"
    env = {
        "REACHSTORE_DATA_DIR": str(folder),
        "REACHSTORE_AUDIT_SIGNING_KEY": key.pem(),
        "REACHSTORE_AUDIT_WITNESS_FILE": str(witness),
        "REACHSTORE_AUDIT_CHECKPOINT_S": "3600",  # no tick during the test
        "REACHSTORE_PII_SECRET": "attack15-deleted-tail-pii-secret",
    }
    key_secret = shipper_key(env)
    audit = ServiceProcess(
        "reachstore_server.audit.main", "reachstore.audit.v1.AuditService", tmp_path, "audit", env
    ).start()
    try:
        stub = pb_grpc.AuditServiceStub(audit.channel)
        now = dt.datetime.now(dt.UTC)
        events = [
            pb.AuditEvent(
                event_id=f"acme-{n:04d}",
                time=rfc3339(now),  # just stored: no checkpoint is due yet
                tenant="acme",
                service="ingest",
                method="CreateDocument",
                result_status="ok",
                duration_ms=n,
            )
            for n in range(1, 6)
        ]
        reply = stub.AppendEvents(
            pb.AppendEventsRequest(events=events),
            timeout=10,
            metadata=[("authorization", f"Bearer {key_secret}")],
        )
        assert reply.appended == 5
    finally:
        audit.kill()  # before any tick and without the checkpoint a clean stop signs
    verify = (
        "audit", "verify", "--data-dir", str(folder), "--public-key", str(public),
        "--witness-file", str(witness),
    )  # fmt: skip
    before = reachstore(*verify)
    assert before.returncode == 0, before.stdout + before.stderr
    delete_sql(
        folder,
        "DELETE FROM audit_events WHERE tenant = 'acme'",
        "DELETE FROM audit_heads WHERE tenant = 'acme'",
    )
    after = reachstore(*verify)
    assert after.returncode == 1, after.stdout
    [acme] = [line for line in after.stdout.splitlines() if line.startswith("acme:")]
    assert "truncated" in acme, acme

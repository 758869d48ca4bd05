"""Personal data in the text fields of an appended event other than its parameters and
idempotency key (its id, the caller's key id, the service, the method, the result, the
error code, the trace id), sent straight to a real audit service by a deployment service
key, on SQLite and PostgreSQL: read back with SQL, no stored column holds any of it, the
same event sent again is still a duplicate, and the chain verifies.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.audit.v1 import audit_service_pb2_grpc as pb_grpc
from reachstore_server.audit.signing import CheckpointKeys
from reachstore_server.audit.store import AuditStore
from reachstore_server.storage.engine import make_engine, make_sessions
from tests.e2e.processes import ServiceProcess, shipper_key
from tests.e2e.test_attack17_unmasked_append import audit_settings, clean_params, event

pytestmark = pytest.mark.e2e

EMAIL = "li.lei@example.com"
PHONE = "13812345678"
FIELDS = ("event_id", "caller_key_id", "service", "method", "result_status", "error_code")


def _dirty(n: int, field: str) -> pb.AuditEvent:
    message = event(n, clean_params(n), f"k-{n}")
    setattr(message, field, f"{EMAIL}" if n % 2 else f"t{PHONE}x"[1:-1])
    if field != "event_id":
        message.event_id = f"every-field-{n:03d}"
    return message


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_no_text_field_of_an_appended_event_keeps_personal_data(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env, url, key = audit_settings(engine, tmp_path, request, "every-field-pii-secret")
    audit = ServiceProcess(
        "reachstore_server.audit.main", "reachstore.audit.v1.AuditService", tmp_path, "audit", env
    ).start()
    try:
        metadata = [("authorization", f"Bearer {shipper_key(env)}")]
        stub = pb_grpc.AuditServiceStub(audit.channel)
        batch = [_dirty(2 * i + odd, field) for i, field in enumerate(FIELDS) for odd in (0, 1)]
        batch.append(event(99, clean_params(99), "k-99"))
        batch[-1].trace_id = EMAIL
        reply = stub.AppendEvents(
            pb.AppendEventsRequest(events=batch), timeout=30, metadata=metadata
        )
        assert (reply.appended, reply.duplicates) == (len(batch), 0)
        # Sent again as a shipper retries it: the same events, not new ones.
        again = stub.AppendEvents(
            pb.AppendEventsRequest(events=batch), timeout=30, metadata=metadata
        )
        assert (again.appended, again.duplicates) == (0, len(batch))
    finally:
        assert audit.stop() == 0, audit.log_tail()

    db = make_engine(url)
    try:
        with db.connect() as conn:
            rows = conn.execute(sqlalchemy.text("SELECT * FROM audit_events")).mappings().all()
        report = AuditStore(make_sessions(db)).verify("acme", CheckpointKeys(key.public))
        assert report.first_break is None, report.first_break
    finally:
        db.dispose()
    # Besides the batch, the trail holds the audit service's own record of each call.
    assert len([r for r in rows if r["service"] != "audit"]) == len(batch)
    stored = "\n".join(json.dumps(dict(row), default=str) for row in rows)
    assert EMAIL not in stored and PHONE not in stored, "personal data stored as sent"
    assert "[email:" in stored and "[phone:" in stored

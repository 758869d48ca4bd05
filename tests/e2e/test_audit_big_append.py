"""One large AppendEvents does not hold up the audit service's other calls.

Its events are checked and masked before anything is stored; for a batch near the message
cap that is seconds of CPU. An attack sent one event whose params held ~16 MB of digit
groups: masking ran on the service's event loop, and a one-event append sent meanwhile
waited ~28 s for it. Here a 4 MB one is sent, then a small one while it is masked: the
small one must be answered first. An order, not a time."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.audit.v1 import audit_service_pb2_grpc as pb_grpc
from tests.e2e.processes import ServiceProcess, shipper_key
from tests.e2e.test_attack17_unmasked_append import PII_SECRET, audit_settings, event

pytestmark = pytest.mark.e2e


def test_a_small_append_is_answered_while_a_large_one_is_masked(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env, _url, _key = audit_settings("sqlite", tmp_path, request, PII_SECRET)
    audit = ServiceProcess(
        "reachstore_server.audit.main", "reachstore.audit.v1.AuditService", tmp_path, "audit", env
    ).start()
    try:
        metadata = [("authorization", f"Bearer {shipper_key(env)}")]
        stub = pb_grpc.AuditServiceStub(audit.channel)
        answered: list[str] = []
        sent = threading.Event()

        def append(name: str, batch: list[pb.AuditEvent]) -> None:
            sent.set()
            stub.AppendEvents(pb.AppendEventsRequest(events=batch), timeout=300, metadata=metadata)
            answered.append(name)

        large = threading.Thread(
            target=append, args=("large", [event(1, {"note": "111 " * 1_000_000}, "k-1")])
        )
        large.start()
        sent.wait()
        # The large request is on its way; once its 4 MB are in, the service masks them.
        threading.Event().wait(1.0)
        append("small", [event(2, {"n": 1}, "k-2")])
        large.join()
        assert answered == ["small", "large"], answered
    finally:
        assert audit.stop() == 0, audit.log_tail()

"""What AppendEvents refuses before anything is stored: a caller's mistake is
INVALID_ARGUMENT naming the event and the field, never INTERNAL (an attack on the audit
service found NaN in the params, and on PostgreSQL a time longer than its column, both
answered INTERNAL, and through the bridge HTTP 500)."""

from __future__ import annotations

import pytest
from google.protobuf import struct_pb2

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore_server.audit.api.intake import MAX_TIME_CHARS, new_events
from reachstore_server.audit.chain import STORED_FIELDS
from reachstore_server.common import errors
from reachstore_server.common.pii import Masker

MASKER = Masker(b"k" * 32, persistent=False)


def _event(**fields: object) -> pb.AuditEvent:
    base: dict[str, object] = {
        "event_id": "e1",
        "tenant": "t",
        "time": "2026-12-05T10:00:00Z",
        "service": "reach",
        "method": "Submit",
    }
    base.update(fields)
    return pb.AuditEvent(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_a_number_json_cannot_hold_is_refused_naming_the_event(number: float) -> None:
    params = struct_pb2.Struct()
    params.update({"nested": {"list": [1, number]}})
    fine = _event()
    with pytest.raises(errors.ReachstoreError) as refused:
        new_events([fine, _event(event_id="e2", params=params)], MASKER)
    assert refused.value.spec.grpc_status.name == "INVALID_ARGUMENT"
    assert refused.value.failure.structured_data["field"] == "events[1].params"


@pytest.mark.parametrize(
    "time",
    [
        "2026-12-05T10:00:00.1234567891234567891234Z",
        "2026-12-05T10:00:00.123456+05:30:00.123456",
    ],
)
def test_a_time_longer_than_its_column_is_refused(time: str) -> None:
    assert len(time) > MAX_TIME_CHARS
    with pytest.raises(errors.ReachstoreError) as refused:
        new_events([_event(time=time)], MASKER)
    assert refused.value.failure.structured_data["field"] == "events[0].time"


def test_a_time_at_the_limit_is_kept_as_sent() -> None:
    time = "2026-12-05T10:00:00.123456+05:30"
    assert len(time) <= MAX_TIME_CHARS
    (event,) = new_events([_event(time=time)], MASKER)
    assert event.values[STORED_FIELDS.index("time")] == time

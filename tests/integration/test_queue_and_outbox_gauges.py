"""The ingest queue and audit outbox gauges read from a real store (SQLite and
PostgreSQL), with rows aged by SQL on the database as a stalled worker or shipper would
leave them: the gauges must tell how much waits and for how long."""

from __future__ import annotations

import datetime as dt
import time

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, insert, update

from reachstore_server.audit_client.outbox_metrics import OutboxGauges
from reachstore_server.ingest.metrics import QueueGauges
from reachstore_server.storage.audit_models import AuditOutboxRow
from reachstore_server.storage.engine import make_sessions
from reachstore_server.storage.models import TaskRow
from reachstore_server.storage.tasks import NewTask, TaskStore


def _registry(collector: object) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    return registry


def test_queue_depth_and_the_oldest_queued_tasks_wait(engine: Engine) -> None:
    tasks = TaskStore(make_sessions(engine), "gauges")
    registry = _registry(QueueGauges(tasks))
    assert registry.get_sample_value("reachstore_ingest_tasks", {"state": "queued"}) == 0
    assert registry.get_sample_value("reachstore_ingest_oldest_queued_seconds") == 0
    new = [NewTask("ns", f"d{i}", "text", {}, "overwrite") for i in range(3)]
    made = tasks.enqueue("tenant-a", new)
    # One task left waiting for two minutes, as behind a worker that stopped claiming.
    with engine.begin() as connection:
        connection.execute(
            update(TaskRow)
            .where(TaskRow.task_id == made[0].task_id)
            .values(created_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=120))
        )
    tasks.claim(1)  # the oldest is claimed: it is processing, no longer queued
    assert registry.get_sample_value("reachstore_ingest_tasks", {"state": "queued"}) == 2
    assert registry.get_sample_value("reachstore_ingest_tasks", {"state": "processing"}) == 1
    waited = registry.get_sample_value("reachstore_ingest_oldest_queued_seconds")
    assert waited is not None and 0 <= waited < 60
    with engine.begin() as connection:
        connection.execute(
            update(TaskRow)
            .where(TaskRow.task_id == made[2].task_id)
            .values(created_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=300))
        )
    waited = registry.get_sample_value("reachstore_ingest_oldest_queued_seconds")
    assert waited is not None and 295 < waited < 330


def test_outbox_lag_is_the_oldest_unshipped_event_per_service(engine: Engine) -> None:
    registry = _registry(OutboxGauges(make_sessions(engine)))
    assert (
        registry.get_sample_value("reachstore_audit_outbox_lag_seconds", {"service": "ingest"})
        is None
    )
    now = time.time()
    rows = [
        {"service": "ingest", "event_json": "{}", "created_at": now - 90, "quarantined_at": None},
        {"service": "ingest", "event_json": "{}", "created_at": now - 5, "quarantined_at": None},
        {"service": "reach", "event_json": "{}", "created_at": now - 20, "quarantined_at": None},
        # Set aside a day ago: counted as quarantined, not waited for.
        {"service": "reach", "event_json": "{}", "created_at": now - 86400, "quarantined_at": now},
    ]
    with engine.begin() as connection:
        connection.execute(insert(AuditOutboxRow), rows)

    def lag(service: str) -> float:
        found = registry.get_sample_value(
            "reachstore_audit_outbox_lag_seconds", {"service": service}
        )
        assert found is not None, service
        return found

    assert 89 < lag("ingest") < 120
    assert 19 < lag("reach") < 50
    quarantined = {"service": "reach", "state": "quarantined"}
    assert registry.get_sample_value("reachstore_audit_outbox_events", quarantined) == 1

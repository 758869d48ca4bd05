"""The outbox as monitoring sees it: events waiting, how long, and events set aside, per
service.

Counted from the store on every scrape, so whichever process serves the metrics shows
the whole deployment's outbox. A growing ``pending`` count, or a lag that keeps rising,
means the audit service is not taking events; any ``quarantined`` event is one it refused
for good, waiting for an operator (``reachstore audit outbox``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.storage.audit_models import AuditOutboxRow

PENDING, QUARANTINED = "pending", "quarantined"


def outbox_counts(sessions: sessionmaker[Session]) -> dict[tuple[str, str], int]:
    """(service, state) -> events in the outbox."""
    state = case((AuditOutboxRow.quarantined_at.is_(None), PENDING), else_=QUARANTINED)
    with sessions() as session:
        rows = session.execute(
            select(AuditOutboxRow.service, state, func.count()).group_by(
                AuditOutboxRow.service, state
            )
        ).all()
    return {(service, kind): int(n) for service, kind, n in rows}


def outbox_lag(sessions: sessionmaker[Session]) -> dict[str, float]:
    """service -> age in seconds of its oldest event not yet shipped (quarantined ones
    aside: they are counted, not waited for). Rows carry their writer's wall clock."""
    with sessions() as session:
        rows = session.execute(
            select(AuditOutboxRow.service, func.min(AuditOutboxRow.created_at))
            .where(AuditOutboxRow.quarantined_at.is_(None))
            .group_by(AuditOutboxRow.service)
        ).all()
    now = time.time()
    return {service: max(0.0, now - float(oldest)) for service, oldest in rows}


class OutboxGauges(Collector):
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "reachstore_audit_outbox_events",
            "Audit events in the outbox, by service and state (pending: waiting to be "
            "shipped; quarantined: refused by the audit service, set aside).",
            labels=["service", "state"],
        )
        for (service, state), n in sorted(outbox_counts(self._sessions).items()):
            family.add_metric([service, state], n)
        yield family
        lag = GaugeMetricFamily(
            "reachstore_audit_outbox_lag_seconds",
            "Age of the oldest audit event not yet shipped, by service (no series: none waits).",
            labels=["service"],
        )
        for service, seconds in sorted(outbox_lag(self._sessions).items()):
            lag.add_metric([service], seconds)
        yield lag

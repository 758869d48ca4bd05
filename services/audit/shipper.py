"""Shipping a service's audit events from its outbox to the audit service.

At least once: a batch is deleted from the outbox only after ``AppendEvents`` has
acknowledged it, and the audit service stores each event id once, so a batch sent again
(an acknowledgement that was lost) changes nothing. While the audit service is down the
events wait in the outbox, in the same database as the changes they describe, and the
shipper backs off (0.5 s doubling to 30 s, with jitter) until it answers again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Sequence
from typing import Any

import grpc
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.audit.v1 import audit_service_pb2_grpc as pb_grpc
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from services.common import database_errors
from services.common.channels import grpc_target, service_config
from services.storage.audit_models import AuditOutboxRow

AUDIT_SERVICE = pb.DESCRIPTOR.services_by_name["AuditService"]

log = logging.getLogger(__name__)

BATCH = 500
IDLE_SECONDS = 0.5
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
CALL_TIMEOUT_S = 10.0


def event_message(fields: dict[str, Any]) -> pb.AuditEvent:
    message = pb.AuditEvent(
        event_id=fields["event_id"],
        time=fields["time"],
        tenant=fields["tenant"],
        caller_key_id=fields.get("caller_key_id", ""),
        service=fields["service"],
        method=fields["method"],
        idempotency_key=fields.get("idempotency_key", ""),
        result_status=fields.get("result_status", "ok"),
        error_code=fields.get("error_code", ""),
        duration_ms=int(fields.get("duration_ms", 0)),
        trace_id=fields.get("trace_id", ""),
    )
    if fields.get("category"):
        message.category = pf_pb2.Category.Value(f"CATEGORY_{fields['category'].upper()}")
    message.params.update(fields.get("params") or {})
    return message


class Shipper:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        services: Sequence[str],
        audit_addr: str,
        api_key: str = "",
        rng: random.Random | None = None,
    ) -> None:
        self._sessions = sessions
        self._services = tuple(services)
        self._addr = audit_addr
        self._metadata = [("authorization", f"Bearer {api_key}")] if api_key else []
        self._rng = rng or random.Random()

    async def run(self) -> None:
        """Ships until cancelled; what is not shipped stays in the outbox. Neither the audit
        service nor the database being away ends it: it waits and tries again."""
        # Several audit replicas may be listed; calls are balanced over them.
        target = grpc_target(self._addr, "REACHSTORE_AUDIT_ADDR")
        options = [("grpc.service_config", service_config([AUDIT_SERVICE]))]
        async with grpc.aio.insecure_channel(target, options=options) as channel:
            stub = pb_grpc.AuditServiceStub(channel)
            failures = 0
            while True:
                try:
                    outcome = await self._ship_batch(stub)
                except Exception as exc:  # noqa: BLE001 - filtered just below
                    if not database_errors.is_transient(exc):
                        raise
                    outcome = f"the database did not answer ({type(exc).__name__})"
                if outcome == "idle":
                    await asyncio.sleep(IDLE_SECONDS)
                elif outcome == "shipped":
                    if failures:
                        log.info("audit events flow again from the outbox")
                    failures = 0
                else:
                    failures += 1
                    if failures == 1:
                        log.warning("audit events wait in the outbox: %s", outcome)
                    delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(failures - 1, 10))
                    await asyncio.sleep(delay * self._rng.uniform(0.7, 1.3))

    async def _ship_batch(self, stub: pb_grpc.AuditServiceStub) -> str:
        """Ships one batch from the outbox: "idle" when it was empty, "shipped", or why the
        audit service did not take it."""
        rows = await asyncio.to_thread(self._pending)
        if not rows:
            return "idle"
        try:
            await stub.AppendEvents(
                pb.AppendEventsRequest(
                    events=[event_message(json.loads(r.event_json)) for r in rows]
                ),
                timeout=CALL_TIMEOUT_S,
                metadata=self._metadata,
            )
        except grpc.aio.AioRpcError as exc:
            await asyncio.to_thread(self._count_attempt, [r.id for r in rows])
            name = exc.code().name
            return f"the audit service at {self._addr} did not take {len(rows)} event(s): {name}"
        # Deleting may fail after the append: the batch is then shipped again, and the
        # audit service keeps each event id once.
        await asyncio.to_thread(self._delete, [r.id for r in rows])
        return "shipped"

    def _pending(self) -> list[AuditOutboxRow]:
        with self._sessions() as session:
            return list(
                session.scalars(
                    select(AuditOutboxRow)
                    .where(AuditOutboxRow.service.in_(self._services))
                    .order_by(AuditOutboxRow.id)
                    .limit(BATCH)
                )
            )

    def _delete(self, ids: list[int]) -> None:
        with self._sessions.begin() as session:
            session.execute(delete(AuditOutboxRow).where(AuditOutboxRow.id.in_(ids)))

    def _count_attempt(self, ids: list[int]) -> None:
        with self._sessions.begin() as session:
            session.execute(
                update(AuditOutboxRow)
                .where(AuditOutboxRow.id.in_(ids))
                .values(attempts=AuditOutboxRow.attempts + 1)
            )

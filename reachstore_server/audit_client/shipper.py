"""Shipping a service's audit events from its outbox to the audit service.

At least once: a batch is deleted from the outbox only after ``AppendEvents`` has
acknowledged it, and the audit service stores each event id once, so a batch sent again
(an acknowledgement that was lost) changes nothing. While the audit service is down the
events wait in the outbox, in the same database as the changes they describe, and the
shipper backs off (0.5 s doubling to 30 s, with jitter) until it answers again.

No row can hold the others back for good:

- a batch is at most ``BATCH`` rows and ``BATCH_BYTES`` of stored JSON, far below the
  32 MiB message limit (a row larger than that goes alone);
- a batch the audit service refuses for what it holds (a permanent, non-retryable
  answer, or a message too large) is split in halves until the refused row is alone,
  and that row is set aside (``quarantined_at``, ``refusal``) instead of being sent
  again for ever; so is a row that cannot even be encoded as an event;
- what may pass (the audit service or the database away, a rate limit, an unexpected
  error, the shipper's own key refused) is waited out with backoff and never quarantines
  anything; no error ends the shipper.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random
import re
import time
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_status import rpc_status
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.audit.v1 import audit_service_pb2_grpc as pb_grpc
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.audit_client.outbox import storable_text
from reachstore_server.common import database_errors, errors
from reachstore_server.common.channels import grpc_target, service_config
from reachstore_server.common.tls import PLAIN, TlsFiles, secure_aio_channel
from reachstore_server.storage.audit_models import AuditOutboxRow

AUDIT_SERVICE = pb.DESCRIPTOR.services_by_name["AuditService"]

log = logging.getLogger(__name__)

BATCH = 500
# Stored JSON per AppendEvents. The protobuf form of an event is a little larger than its
# JSON; 4 MiB keeps a batch far below the 32 MiB message limit of every server.
BATCH_BYTES = 4 * 1024 * 1024
IDLE_SECONDS = 0.5
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
CALL_TIMEOUT_S = 10.0
MAX_REFUSAL_CHARS = 1000


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


@dataclasses.dataclass(frozen=True)
class _Ready:
    """An outbox row encoded as the event it will be sent as."""

    row_id: int
    message: pb.AuditEvent


# gRPC's own words for a message over the size limit, sent or received.
_TOO_LARGE = re.compile(r"message larger than max", re.IGNORECASE)


def refusal_of(exc: grpc.aio.AioRpcError) -> str | None:
    """Why the audit service will never take what was sent, or None when sending the same
    again may succeed (or when the fault is not in the events at all)."""
    code = exc.code()
    try:
        status = rpc_status.from_call(exc)
    except (ValueError, DecodeError):
        status = None
    failures = errors.failures_from_rpc_status(status) if status is not None else []
    if not failures:
        # A message over the limit is refused by gRPC itself, without our details. gRPC
        # also answers RESOURCE_EXHAUSTED when a flooded server has too many calls pending
        # ("Too many pending requests"): that one passes, and the events must not be
        # quarantined for it.
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and _TOO_LARGE.search(exc.details() or ""):
            return f"RESOURCE_EXHAUSTED: {exc.details()}"
        return None
    first = failures[0]
    # Credentials are the shipper's, not the event's; an unexpected error is not known to
    # be caused by the events either. Both are waited out.
    if first.retryable or first.error_code == errors.INTERNAL.code:
        return None
    if first.category not in (pf_pb2.CATEGORY_PERMANENT, pf_pb2.CATEGORY_QUOTA):
        return None
    return f"{first.error_code}: {first.message}"


class Shipper:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        services: Sequence[str],
        audit_addr: str,
        api_key: str = "",
        tls: TlsFiles = PLAIN,
        rng: random.Random | None = None,
    ) -> None:
        self._sessions = sessions
        self._services = tuple(services)
        self._addr = audit_addr
        self._metadata = [("authorization", f"Bearer {api_key}")] if api_key else []
        self._rng = rng or random.Random()
        self._tls = tls

    async def run(self) -> None:
        """Ships until cancelled; what is not shipped stays in the outbox. Neither the audit
        service nor the database being away ends it, nor any other error: it waits and
        tries again."""
        # Several audit replicas may be listed; calls are balanced over them.
        target = grpc_target(self._addr, "REACHSTORE_AUDIT_ADDR")
        options = [("grpc.service_config", service_config([AUDIT_SERVICE]))]
        async with secure_aio_channel(target, self._tls, options) as channel:
            stub = pb_grpc.AuditServiceStub(channel)
            failures = 0
            while True:
                try:
                    outcome = await self._ship_batch(stub)
                except Exception as exc:  # noqa: BLE001 - the shipper outlives every error
                    if database_errors.is_transient(exc):
                        outcome = f"the database did not answer ({type(exc).__name__})"
                    else:
                        log.exception("shipping audit events failed unexpectedly")
                        outcome = f"shipping failed unexpectedly ({type(exc).__name__})"
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
        """Ships one batch from the outbox: "idle" when nothing waits, "shipped" when some
        rows left the outbox (shipped or set aside), or why the audit service did not
        take them."""
        rows = await asyncio.to_thread(self._pending)
        if not rows:
            return "idle"
        ready: list[_Ready] = []
        unreadable: dict[int, str] = {}
        for row_id, text in rows:
            try:
                ready.append(_Ready(row_id, event_message(json.loads(text))))
            except Exception as exc:  # noqa: BLE001 - any row, however broken, is set aside
                unreadable[row_id] = f"cannot be encoded as an event: {type(exc).__name__}: {exc}"
        if unreadable:
            await asyncio.to_thread(self._quarantine, unreadable)
        if not ready:
            return "shipped"
        outcome = await self._send(stub, ready)
        # Setting rows aside is progress too: the next batch, without them, goes at once.
        return "shipped" if unreadable else outcome

    async def _send(self, stub: pb_grpc.AuditServiceStub, ready: list[_Ready]) -> str:
        """Sends ``ready``; a refused part is split until the refused row is alone."""
        try:
            await stub.AppendEvents(
                pb.AppendEventsRequest(events=[r.message for r in ready]),
                timeout=CALL_TIMEOUT_S,
                metadata=self._metadata,
            )
        except grpc.aio.AioRpcError as exc:
            refusal = refusal_of(exc)
            if refusal is None:
                await asyncio.to_thread(self._count_attempt, [r.row_id for r in ready])
                name = exc.code().name
                return (
                    f"the audit service at {self._addr} did not take {len(ready)} event(s): {name}"
                )
            if len(ready) == 1:
                await asyncio.to_thread(self._quarantine, {ready[0].row_id: refusal})
                return "shipped"
            half = len(ready) // 2
            first = await self._send(stub, ready[:half])
            if first != "shipped":
                return first
            return await self._send(stub, ready[half:])
        # Deleting may fail after the append: the batch is then shipped again, and the
        # audit service keeps each event id once.
        await asyncio.to_thread(self._delete, [r.row_id for r in ready])
        return "shipped"

    def _pending(self) -> list[tuple[int, str]]:
        """(id, stored JSON) of the next rows to ship: the oldest first, as many as fit in
        ``BATCH`` and ``BATCH_BYTES`` (at least one, however large). Sizes are read first,
        so rows that do not fit are never loaded."""
        waiting = (
            AuditOutboxRow.service.in_(self._services),
            AuditOutboxRow.quarantined_at.is_(None),
        )
        with self._sessions() as session:
            sizes = session.execute(
                select(AuditOutboxRow.id, func.length(AuditOutboxRow.event_json))
                .where(*waiting)
                .order_by(AuditOutboxRow.id)
                .limit(BATCH)
            ).all()
            chosen: list[int] = []
            total = 0
            for row_id, chars in sizes:
                # length() counts characters; a character is at most 4 bytes of UTF-8.
                size = 4 * int(chars or 0)
                if chosen and total + size > BATCH_BYTES:
                    break
                chosen.append(row_id)
                total += size
            if not chosen:
                return []
            loaded = session.execute(
                select(AuditOutboxRow.id, AuditOutboxRow.event_json)
                .where(AuditOutboxRow.id.in_(chosen))
                .order_by(AuditOutboxRow.id)
            ).all()
            return [(row_id, text) for row_id, text in loaded]

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

    def _quarantine(self, reasons: dict[int, str]) -> None:
        now = time.time()
        with self._sessions.begin() as session:
            for row_id, reason in reasons.items():
                log.warning("audit event set aside (outbox row %d): %s", row_id, reason[:300])
                session.execute(
                    update(AuditOutboxRow)
                    .where(AuditOutboxRow.id == row_id)
                    .values(
                        quarantined_at=now,
                        refusal=storable_text(reason[:MAX_REFUSAL_CHARS]),
                        attempts=AuditOutboxRow.attempts + 1,
                    )
                )

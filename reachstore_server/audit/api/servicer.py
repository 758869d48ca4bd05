"""AuditService: append (internal), list, get, verify and read checkpoints.

Ordinary callers see their own tenant's chain; the auditor scope sees every tenant's; a
key with namespace grants or a channel allow-list sees only the events about what they
cover (``visibility.py``). Parameters are masked again on append (masking is idempotent):
a service that forgot cannot put raw personal data into the trail.

An ``internal`` key appends events of its own tenant only; a deployment service key
(``internal`` in the service tenant) appends for every tenant. Every append, refused or
not, leaves an event of its own in the calling key's tenant's chain, stored with the
batch: the audit service's calls are not audited by the gRPC layer (an appended event
would append an event), so it records them itself.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

import grpc
import httpx

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.audit.v1 import audit_service_pb2_grpc as pb_grpc
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.audit import verify as checks
from reachstore_server.audit.api.intake import new_events
from reachstore_server.audit.chain import STORED_FIELDS, NewEvent, new_event
from reachstore_server.audit.checkpointing import Checkpointer
from reachstore_server.audit.store import AuditStore, EventFilter
from reachstore_server.audit.verify_settings import WITNESS_BROKEN, Verifier
from reachstore_server.audit.visibility import may_read
from reachstore_server.common import errors, names, paging
from reachstore_server.common.auth import Caller
from reachstore_server.common.canonical import canonical_json
from reachstore_server.common.identity import caller
from reachstore_server.common.pii import Masker
from reachstore_server.common.timefmt import parse_rfc3339, rfc3339
from reachstore_server.common.tracing import trace_from_metadata
from reachstore_server.storage.audit_models import AuditEventRow

MAX_BATCH = 1000
# The record of an append names at most this many of the batch's event ids.
MAX_RECORDED_IDS = 100
MAX_RECORDED_TENANTS = 20
# A restricted key's page is filled from at most this many events read per call, in
# reads of SCAN_BATCH; past them the page may come back short, with a token to go on.
SCAN_BATCH = 200
SCAN_ROUNDS = 10
_BREAKS = {
    checks.EDITED: pb.BREAK_KIND_EDITED,
    checks.DELETED: pb.BREAK_KIND_DELETED,
    checks.INSERTED: pb.BREAK_KIND_INSERTED,
    checks.REORDERED: pb.BREAK_KIND_REORDERED,
    checks.TRUNCATED: pb.BREAK_KIND_TRUNCATED,
    checks.FORGED_CHECKPOINT: pb.BREAK_KIND_FORGED_CHECKPOINT,
    checks.REWRITTEN: pb.BREAK_KIND_REWRITTEN,
    checks.CHECKPOINT_MISSING: pb.BREAK_KIND_CHECKPOINT_MISSING,
    checks.WITNESS_INCOMPLETE: pb.BREAK_KIND_WITNESS_INCOMPLETE,
    WITNESS_BROKEN: pb.BREAK_KIND_WITNESS_BROKEN,
    checks.CADENCE_GAP: pb.BREAK_KIND_CADENCE_GAP,
    checks.UNVOUCHED_TAIL: pb.BREAK_KIND_UNVOUCHED_TAIL,
}
_TENANT = STORED_FIELDS.index("tenant")
_CATEGORIES = {
    name.removeprefix("CATEGORY_").lower(): value
    for name, value in pf_pb2.Category.items()
    if value != pf_pb2.CATEGORY_UNSPECIFIED
}


def event_to_pb(row: AuditEventRow) -> pb.AuditEvent:
    message = pb.AuditEvent(
        event_id=row.event_id,
        time=row.time,
        tenant=row.tenant,
        caller_key_id=row.caller_key_id,
        service=row.service,
        method=row.method,
        idempotency_key=row.idempotency_key,
        result_status=row.result_status,
        error_code=row.error_code,
        category=_CATEGORIES.get(row.category, pf_pb2.CATEGORY_UNSPECIFIED),
        duration_ms=row.duration_ms,
        trace_id=row.trace_id,
        seq=row.seq,
        prev_hash=row.prev_hash,
        hash=row.hash,
    )
    message.params.update(json.loads(row.params_json))
    return message


class AuditServicer(pb_grpc.AuditServiceServicer):
    def __init__(
        self,
        store: AuditStore,
        verifier: Verifier,
        masker: Masker,
        checkpointer: Checkpointer | None = None,
    ) -> None:
        self._store = store
        self._verifier = verifier
        self._masker = masker
        self._checkpointer = checkpointer

    async def AppendEvents(
        self, request: pb.AppendEventsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AppendEventsResponse:
        who = caller(context)
        started = time.monotonic()
        trace = trace_from_metadata(tuple(context.invocation_metadata() or ())) if context else ""
        try:
            names.check_count(request.events, "events", MAX_BATCH, "events")
            if not request.events:
                raise errors.invalid("events", f"1 to {MAX_BATCH} events per batch")
            # In a thread: masking a large batch takes seconds of CPU, and on the event loop
            # it held up every other call meanwhile (tests/e2e/test_audit_big_append.py).
            events = await asyncio.to_thread(new_events, request.events, self._masker)
            _check_tenants(who, request.events)
        except errors.ReachstoreError as exc:
            refused = self._append_record(who, request.events, started, trace, refusal=exc)
            await asyncio.to_thread(self._append_witnessed, [refused])
            raise
        record = self._append_record(who, request.events, started, trace)
        appended, duplicates = await asyncio.to_thread(self._append_witnessed, events, record)
        return pb.AppendEventsResponse(appended=appended, duplicates=duplicates)

    def _append_witnessed(
        self, events: list[NewEvent], record: NewEvent | None = None
    ) -> tuple[int, int]:
        """Stores the events, then hands the heads they moved to the witnesses before the
        call is answered (``Checkpointer.witness_appends``)."""
        counts = self._store.append_new(events, record)
        if self._checkpointer is not None:
            touched = {e.values[_TENANT] for e in events}
            if record is not None:
                touched.add(record.values[_TENANT])
            self._checkpointer.witness_appends(sorted(touched))
        return counts

    def _append_record(
        self,
        who: Caller,
        events: Any,
        started: float,
        trace: str,
        refusal: errors.ReachstoreError | None = None,
    ) -> NewEvent:
        """The trail's event of one AppendEvents call, in the calling key's tenant."""
        ids = [e.event_id[:64] for e in events[:MAX_RECORDED_IDS]]
        counts = collections.Counter(e.tenant[:64] for e in events[:MAX_BATCH])
        # A list, not a map keyed by tenant: the masker looks at values, never at keys.
        tenants = [{"tenant": t, "events": n} for t, n in counts.most_common(MAX_RECORDED_TENANTS)]
        params: dict[str, Any] = {"events": len(events), "event_ids": ids, "tenants": tenants}
        if len(events) > MAX_RECORDED_IDS:
            params["more_event_ids"] = len(events) - MAX_RECORDED_IDS
        if len(counts) > MAX_RECORDED_TENANTS:
            params["more_tenants"] = len(counts) - MAX_RECORDED_TENANTS
        status, code, category = "ok", "", ""
        if refusal is not None:
            status, code = refusal.spec.grpc_status.name, refusal.code
            category = pf_pb2.Category.Name(refusal.failure.category)
            category = category.removeprefix("CATEGORY_").lower()
        return new_event(
            (
                uuid.uuid4().hex,
                rfc3339(dt.datetime.now(dt.UTC)),
                who.tenant,
                who.key_id,
                "audit",
                "AppendEvents",
                "",
                canonical_json(self._masker.mask_value(params)),
                status,
                code,
                category,
                int((time.monotonic() - started) * 1000),
                trace,
            )
        )

    async def ListEvents(
        self, request: pb.ListEventsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListEventsResponse:
        tenant = _tenant_for(caller(context), request.tenant)
        size = names.page_size(request.page_size)
        after = paging.decode_position_token(request.page_token)
        where = EventFilter(
            tenant=tenant,
            caller_key_id=request.caller_key_id,
            service=request.service,
            method=request.method,
            idempotency_key=request.idempotency_key,
            trace_id=request.trace_id,
            since=_time_bound("since", request.since),
            until=_time_bound("until", request.until),
        )
        page, token = await asyncio.to_thread(
            self._readable_page, caller(context), where, size, after
        )
        return pb.ListEventsResponse(events=[event_to_pb(r) for r in page], next_page_token=token)

    def _readable_page(
        self, who: Caller, where: EventFilter, size: int, after: int
    ) -> tuple[list[AuditEventRow], str]:
        """Up to ``size`` events ``who`` may read after position ``after``, and the token
        of the next page. Hidden events are skipped, so a restricted key's page may come
        back short (its work per call is bounded), but it always moves on."""
        if not who.restricted:
            rows = self._store.events(where, size + 1, after)
            whole = rows[:size]
            return whole, paging.encode_token(str(whole[-1].seq)) if len(rows) > size else ""
        page: list[AuditEventRow] = []
        cursor = after
        for _ in range(SCAN_ROUNDS):
            rows = self._store.events(where, SCAN_BATCH, cursor)
            for row in rows:
                if may_read(who, row):
                    if len(page) == size:
                        return page, paging.encode_token(str(page[-1].seq))
                    page.append(row)
                cursor = row.seq
            if len(rows) < SCAN_BATCH:
                return page, ""
        return page, paging.encode_token(str(cursor))

    async def GetEvent(
        self, request: pb.GetEventRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetEventResponse:
        who = caller(context)
        row = await asyncio.to_thread(self._store.get, request.event_id)
        foreign = row is not None and row.tenant != who.tenant and "auditor" not in who.scopes
        if row is None or foreign or not may_read(who, row):
            raise errors.ReachstoreError(
                errors.AUDIT_EVENT_NOT_FOUND, structured_data={"event_id": request.event_id[:64]}
            )
        return pb.GetEventResponse(event=event_to_pb(row))

    async def Verify(
        self, request: pb.VerifyRequest, context: grpc.aio.ServicerContext
    ) -> pb.VerifyResponse:
        who = caller(context)
        if request.all_tenants:
            _require_auditor(who, "all_tenants")
        else:
            tenants = [_tenant_for(who, request.tenant)]
        if request.from_seq < 0 or request.to_seq < 0:
            raise errors.invalid("from_seq", "positions are 1 or more (0: the default)")
        response = pb.VerifyResponse(ok=True)
        try:
            reads = await asyncio.to_thread(self._verifier.read_witnesses)
        except (OSError, httpx.HTTPError) as exc:
            raise errors.ReachstoreError(
                errors.SERVICE_UNAVAILABLE,
                f"a witness of the audit trail could not be read: {exc}",
                structured_data={"service": "audit witness"},
            ) from None
        if request.all_tenants:
            tenants = await asyncio.to_thread(self._verifier.every_tenant, self._store, reads)
        verified = await asyncio.to_thread(
            self._verifier.verify,
            self._store,
            tenants,
            request.from_seq or 1,
            request.to_seq or None,
            reads,
        )
        for _tenant, report in verified:
            response.tenants_checked += 1
            response.events_checked += report.events_checked
            response.checkpoints_checked += report.checkpoints_checked
            if report.first_break is not None:
                b = report.first_break
                response.ok = False
                response.first_break.CopyFrom(
                    pb.ChainBreak(
                        kind=_BREAKS[b.kind],
                        tenant=b.tenant,
                        seq=b.seq,
                        event_id=b.event_id,
                        detail=b.detail,
                    )
                )
                break
        return response

    async def GetCheckpoint(
        self, request: pb.GetCheckpointRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCheckpointResponse:
        tenant = _tenant_for(caller(context), request.tenant)
        row = await asyncio.to_thread(self._store.latest_checkpoint, tenant)
        response = pb.GetCheckpointResponse(public_key_pem=self._verifier.keys.public.pem())
        if self._checkpointer is not None:
            now = time.time()
            if self._checkpointer.last_checkpoint_at is not None:
                response.last_checkpoint_age_s = max(
                    0.0, now - self._checkpointer.last_checkpoint_at
                )
            witnessed = self._checkpointer.delivery.last_witnessed_at
            if witnessed is not None:
                response.last_witnessed_age_s = max(0.0, now - witnessed)
        if row is not None:
            response.checkpoint.CopyFrom(
                pb.Checkpoint(
                    tenant=row.tenant,
                    seq=row.seq,
                    head_hash=row.head_hash,
                    signed_at=row.signed_at,
                    key_id=row.key_id,
                    signature=row.signature,
                )
            )
        return response


def _check_tenants(who: Caller, events: Sequence[pb.AuditEvent]) -> None:
    """Only a deployment service key writes into other tenants' chains."""
    if who.is_deployment_service:
        return
    for i, event in enumerate(events):
        if event.tenant != who.tenant:
            raise errors.ReachstoreError(
                errors.AUDIT_TENANT_NOT_ALLOWED,
                f"events[{i}].tenant: this key appends events of its own tenant "
                f"({who.tenant!r}) only",
                field=f"events[{i}].tenant",
                structured_data={"key_tenant": who.tenant},
            )


def _tenant_for(who: Caller, asked: str) -> str:
    if not asked or asked == who.tenant:
        return who.tenant
    _require_auditor(who, "tenant")
    return asked


def _require_auditor(who: Caller, field: str) -> None:
    if "auditor" not in who.scopes:
        raise errors.ReachstoreError(
            errors.AUTH_SCOPE_MISSING,
            f"{field}: reading another tenant's audit trail needs the 'auditor' scope",
            structured_data={"required_scope": "auditor", "field": field},
        )


def _time_bound(field: str, text: str) -> str:
    """Normalises an RFC 3339 bound to the stored form (UTC, milliseconds, Z)."""
    return rfc3339(parse_rfc3339(text, field)) if text else ""

"""Audit protobuf messages <-> SDK models (see ``_convert`` for the rules they share)."""

from __future__ import annotations

from typing import cast

from reachstore._audit_models import AppendResult, AuditEvent, ChainBreak, Checkpoint, VerifyResult
from reachstore._convert import CATEGORY, dict_to_struct, enum_arg, enum_word, struct_to_dict
from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2

BREAK_KIND = pb.BreakKind.DESCRIPTOR


def event_from_pb(event: pb.AuditEvent) -> AuditEvent:
    return AuditEvent(
        event_id=event.event_id,
        time=event.time,
        tenant=event.tenant,
        caller_key_id=event.caller_key_id,
        service=event.service,
        method=event.method,
        idempotency_key=event.idempotency_key,
        params=struct_to_dict(event.params),
        result_status=event.result_status,
        error_code=event.error_code,
        category=enum_word(CATEGORY, event.category),
        duration_ms=event.duration_ms,
        trace_id=event.trace_id,
        seq=event.seq,
        prev_hash=event.prev_hash,
        hash=event.hash,
    )


def event_to_pb(event: AuditEvent) -> pb.AuditEvent:
    """An event to append. Its place in the chain (seq and hashes) is the audit service's
    to set, so it is not sent."""
    category = (
        0 if event.category == "unspecified" else enum_arg(CATEGORY, event.category, "category")
    )
    return pb.AuditEvent(
        event_id=event.event_id,
        time=event.time,
        tenant=event.tenant,
        caller_key_id=event.caller_key_id,
        service=event.service,
        method=event.method,
        idempotency_key=event.idempotency_key,
        params=dict_to_struct(event.params, f"params of event {event.event_id!r}"),
        result_status=event.result_status,
        error_code=event.error_code,
        category=cast(pf_pb2.Category, category),
        duration_ms=event.duration_ms,
        trace_id=event.trace_id,
    )


def verify_result_from_pb(response: pb.VerifyResponse) -> VerifyResult:
    found = response.first_break
    return VerifyResult(
        ok=response.ok,
        first_break=ChainBreak(
            kind=enum_word(BREAK_KIND, found.kind),
            tenant=found.tenant,
            seq=found.seq,
            event_id=found.event_id,
            detail=found.detail,
        )
        if response.HasField("first_break") and found.kind
        else None,
        events_checked=response.events_checked,
        checkpoints_checked=response.checkpoints_checked,
        tenants_checked=response.tenants_checked,
    )


def checkpoint_from_pb(response: pb.GetCheckpointResponse) -> Checkpoint | None:
    """The checkpoint, or None while the tenant's chain has none yet."""
    if not response.HasField("checkpoint"):
        return None
    found = response.checkpoint
    return Checkpoint(
        tenant=found.tenant,
        seq=found.seq,
        head_hash=found.head_hash,
        signed_at=found.signed_at,
        key_id=found.key_id,
        signature=found.signature,
    )


def append_result_from_pb(response: pb.AppendEventsResponse) -> AppendResult:
    return AppendResult(appended=response.appended, duplicates=response.duplicates)

"""Audit operations: reading the trail, verifying it, and appending to it.

Each method returns a flow (see ``_flow``); the clients' methods of the same names run
them and carry the user-facing documentation.
"""

from __future__ import annotations

from collections.abc import Sequence

from reachstore import _convert_audit as convert
from reachstore._audit_models import AppendResult, AuditEvent, Checkpoint, VerifyResult
from reachstore._flow import Flow
from reachstore._ops_common import OperationsBase
from reachstore._paging import Page, Pages
from reachstore.audit.v1 import audit_service_pb2 as pb


class AuditOperations(OperationsBase):
    def event_pages(
        self,
        tenant: str | None,
        caller_key_id: str | None,
        service: str | None,
        method: str | None,
        idempotency_key: str | None,
        trace_id: str | None,
        since: str | None,
        until: str | None,
        page_size: int,
        timeout: float | None,
    ) -> Pages[AuditEvent]:
        def page(token: str) -> Flow[Page[AuditEvent]]:
            request = pb.ListEventsRequest(
                tenant=tenant or "",
                caller_key_id=caller_key_id or "",
                service=service or "",
                method=method or "",
                idempotency_key=idempotency_key or "",
                trace_id=trace_id or "",
                since=since or "",
                until=until or "",
                page_size=page_size,
                page_token=token,
            )
            response = yield from self._call(
                "AuditService.ListEvents", request, pb.ListEventsResponse, timeout
            )
            return Page(
                [convert.event_from_pb(e) for e in response.events], response.next_page_token
            )

        return page

    def get_event(self, event_id: str, timeout: float | None) -> Flow[AuditEvent]:
        response = yield from self._call(
            "AuditService.GetEvent",
            pb.GetEventRequest(event_id=event_id),
            pb.GetEventResponse,
            timeout,
        )
        return convert.event_from_pb(response.event)

    def verify_audit(
        self,
        tenant: str | None,
        all_tenants: bool,
        from_seq: int,
        to_seq: int,
        timeout: float | None,
    ) -> Flow[VerifyResult]:
        request = pb.VerifyRequest(
            tenant=tenant or "", all_tenants=all_tenants, from_seq=from_seq, to_seq=to_seq
        )
        response = yield from self._call("AuditService.Verify", request, pb.VerifyResponse, timeout)
        return convert.verify_result_from_pb(response)

    def get_checkpoint(self, tenant: str | None, timeout: float | None) -> Flow[Checkpoint | None]:
        response = yield from self._call(
            "AuditService.GetCheckpoint",
            pb.GetCheckpointRequest(tenant=tenant or ""),
            pb.GetCheckpointResponse,
            timeout,
        )
        return convert.checkpoint_from_pb(response)

    def append_events(
        self, events: Sequence[AuditEvent], timeout: float | None
    ) -> Flow[AppendResult]:
        request = pb.AppendEventsRequest(events=[convert.event_to_pb(e) for e in events])
        response = yield from self._call(
            "AuditService.AppendEvents", request, pb.AppendEventsResponse, timeout
        )
        return convert.append_result_from_pb(response)

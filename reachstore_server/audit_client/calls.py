"""Which calls are audited, and the event each one leaves.

Every call that changes something (any scope but ``read``) is audited, and reads too when
``REACHSTORE_AUDIT_READS`` is on. The audit service's own calls are not (appending an
event must not append an event). A call's event is written with its change
(``outbox.install``) or, when it changed nothing, on its own once it has finished —
failures included, with their status, error code and category. A call that fails after
its first write gets a second event with that failure and its whole duration.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Sequence

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.audit_client import outbox
from reachstore_server.common.auth import Caller
from reachstore_server.common.pii import Masker
from reachstore_server.common.tracing import trace_from_metadata

AUDIT_PACKAGE = "reachstore.audit."
# The service label of each proto package (key administration is "admin").
_LABELS = {"query": "query", "ingest": "ingest", "admin": "admin", "reach": "reach"}


def service_label(method_path: str) -> str:
    """``/reachstore.ingest.v1.IngestService/X`` -> ``ingest``."""
    package = method_path.lstrip("/").split(".")
    return _LABELS.get(package[1], package[1]) if len(package) > 1 else "unknown"


class CallAuditor:
    """The gRPC layer's ``CallAudit``: opens a draft per audited call."""

    def __init__(self, sessions: sessionmaker[Session], masker: Masker, audit_reads: bool) -> None:
        self._sessions = sessions
        self._masker = masker
        self._audit_reads = audit_reads
        outbox.install(sessions)

    def wants(self, method_path: str, scope: str) -> bool:
        if method_path.lstrip("/").startswith(AUDIT_PACKAGE):
            return False
        return scope != "read" or self._audit_reads

    def begin(
        self,
        method: str,
        scope: str,
        request: Message,
        caller: Caller,
        metadata: Sequence[tuple[str, str | bytes]],
    ) -> _AuditedCall | None:
        if not self.wants(method, scope):
            return None
        params = json_format.MessageToDict(request, preserving_proto_field_name=True)
        key = params.get("idempotency_key", "")
        draft = outbox.Draft(
            tenant=caller.tenant,
            caller_key_id=caller.key_id,
            service=service_label(method),
            method=method.rsplit("/", 1)[-1],
            params=outbox.summarise(params, self._masker),
            trace_id=trace_from_metadata(metadata),
            # As the audit service stores it: a refused call's key may be of any length.
            idempotency_key=key[:512] if isinstance(key, str) else "",
        )
        return _AuditedCall(self._sessions, draft, outbox.open_draft(draft))


class _AuditedCall:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        draft: outbox.Draft,
        token: contextvars.Token[outbox.Draft | None],
    ) -> None:
        self._sessions = sessions
        self._draft = draft
        self._token = token

    async def end(self, status: grpc.StatusCode, error_code: str = "", category: str = "") -> None:
        """Writes the event of a call that changed nothing; for a call whose change already
        carried its event, a second one only when the call then failed (``Draft.outcome``)."""
        outbox.close_draft(self._token)
        draft = self._draft
        result = "ok" if status == grpc.StatusCode.OK else status.name
        if draft.written:
            if status == grpc.StatusCode.OK:
                return
            fields = draft.outcome(result, error_code, category)
        else:
            draft.written = True
            fields = draft.event(result, error_code, category)
        await asyncio.to_thread(outbox.write_now, self._sessions, draft.service, fields)

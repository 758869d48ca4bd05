"""Recording audit events in the transaction of the change they describe.

Every service writes its events to the ``audit_outbox`` table; a shipper
(``shipper.py``) sends them to the audit service later. Two ways in:

- A call: the gRPC layer opens a ``Draft`` for each audited call (who, what, masked
  parameters, trace) and keeps it in a context variable. The first transaction of that
  call that writes anything adds the draft to the outbox just before it commits — so the
  event and the change commit together or not at all. A call that changed nothing (it
  failed, or only validated) gets its event written by the gRPC layer on its own.
- The system itself (an action's state change made by the reach executor): the code that
  makes the change calls ``record`` inside its transaction.

Personal data is masked before anything reaches the outbox (``reachstore_server/common/pii.py``),
long texts (a document's body) are replaced by their length and digest, and the audit
service masks again on arrival.

Every event is bounded before it is stored, because the outbox is fed by callers: a
refused call's draft holds whatever the request held, and one event the audit service
cannot take must not be written at all. Maps and lists keep their first ``MAX_ITEMS``
entries (saying how many more there were), keys are cut to ``MAX_KEY`` characters,
nesting to ``MAX_DEPTH`` levels, NUL characters and lone surrogates (which no audit
service or database column takes) become U+FFFD, and an event still over
``MAX_EVENT_BYTES`` keeps only a digest of its parameters (``record``).

A call that fails after its first write has its event written with that write ("ok",
the change committed) and a second event when it ends, with its real status and whole
duration (``Draft.outcome``): the trail is append-only and the first event may already
be shipped and chained, so it is never rewritten.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as dt
import hashlib
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import Table, event, insert
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker

from reachstore_server.common.canonical import canonical_json
from reachstore_server.common.pii import Masker
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.storage.audit_models import AuditOutboxRow

# Strings longer than this are recorded as {"chars", "sha256"}: the trail proves what was
# sent without holding whole documents.
MAX_TEXT = 512
MAX_ITEMS = 100  # entries kept of a list or a map
MAX_KEY = 128  # characters kept of a map key
MAX_DEPTH = 8  # levels of nested maps and lists kept
# An event larger than this as stored JSON keeps only a digest of its parameters: a page
# of 100 events stays far below the 32 MiB message limit, and a shipper batch holds many.
MAX_EVENT_BYTES = 128 * 1024
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclasses.dataclass
class Draft:
    """The audit event of the call in progress."""

    tenant: str
    caller_key_id: str
    service: str
    method: str
    params: dict[str, Any]
    trace_id: str
    idempotency_key: str = ""
    event_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)
    started: float = dataclasses.field(default_factory=time.monotonic)
    time: str = dataclasses.field(default_factory=lambda: rfc3339(dt.datetime.now(dt.UTC)))
    written: bool = False

    def event(self, result_status: str, error_code: str = "", category: str = "") -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "time": self.time,
            "tenant": self.tenant,
            "caller_key_id": self.caller_key_id,
            "service": self.service,
            "method": self.method,
            "idempotency_key": self.idempotency_key,
            "params": self.params,
            "result_status": result_status,
            "error_code": error_code,
            "category": category,
            "duration_ms": int((time.monotonic() - self.started) * 1000),
            "trace_id": self.trace_id,
        }

    def outcome(self, result_status: str, error_code: str, category: str) -> dict[str, Any]:
        """The second event of a call that failed after its first write carried the first
        one ("ok": that change committed): the call's real status and whole duration,
        pointing at the first event instead of repeating its parameters."""
        return {
            **self.event(result_status, error_code, category),
            "event_id": uuid.uuid4().hex,
            "time": rfc3339(dt.datetime.now(dt.UTC)),
            "params": {"outcome_of": self.event_id},
        }


_current: contextvars.ContextVar[Draft | None] = contextvars.ContextVar("audit_draft", default=None)


def open_draft(draft: Draft) -> contextvars.Token[Draft | None]:
    return _current.set(draft)


def close_draft(token: contextvars.Token[Draft | None]) -> None:
    _current.reset(token)


def annotate(idempotency_key: str) -> None:
    """Adds what a handler learns while it runs (the keys it reserved) to the call's event."""
    draft = _current.get()
    if draft is not None and not draft.written:
        draft.idempotency_key = idempotency_key[:512]


def summarise(value: Any, masker: Masker) -> Any:
    """Parameters as the trail keeps them: bounded, masked, long texts replaced by a digest.
    Bounded first, so that masking costs what is kept, not what was sent."""
    return _shorten(masker.mask_value(_bound(value, 0)))


def _digest(text: str) -> dict[str, Any]:
    return {"chars": len(text), "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def _bound(value: Any, depth: int) -> Any:
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH:
            return {"depth_cut": True}
        items = list(value.items())
        kept = {_key(k): _bound(v, depth + 1) for k, v in items[:MAX_ITEMS]}
        if len(items) > MAX_ITEMS:
            kept["more_keys"] = len(items) - MAX_ITEMS
        return kept
    if isinstance(value, list | tuple):
        if depth >= MAX_DEPTH:
            return {"depth_cut": True}
        head = [_bound(v, depth + 1) for v in value[:MAX_ITEMS]]
        return head + ([{"more_items": len(value) - MAX_ITEMS}] if len(value) > MAX_ITEMS else [])
    return value


def _key(key: Any) -> str:
    text = str(key)
    if len(text) <= MAX_KEY:
        return text
    return f"{text[:64]}…sha256:{hashlib.sha256(text.encode('utf-8', 'replace')).hexdigest()[:16]}"


def _shorten(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return _digest(value)
    if isinstance(value, Mapping):
        return {k: _shorten(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v) for v in value]
    return value


def storable_text(text: str) -> str:
    """``text`` with NUL characters and lone surrogates (which neither the audit service
    nor a PostgreSQL text column takes) replaced by U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


def _storable(value: Any) -> Any:
    """``value`` with ``storable_text`` applied to every string and key."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):
        return {_storable(str(k)): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def bounded_event(fields: Mapping[str, Any]) -> str:
    """The event as stored in the outbox: canonical JSON the audit service takes, at most
    about ``MAX_EVENT_BYTES`` (parameters over that are replaced by their digest)."""
    event = _storable(dict(fields))
    text = canonical_json(event)
    if len(text.encode("utf-8")) > MAX_EVENT_BYTES:
        params = canonical_json(event.get("params") or {})
        event["params"] = {"params_cut": _digest(params)}
        text = canonical_json(event)
    return text


_OUTBOX = cast(Table, AuditOutboxRow.__table__)


def record(session: Session, service: str, fields: Mapping[str, Any]) -> None:
    """Writes an event to the outbox inside ``session``'s transaction: one INSERT
    statement, not an object for the unit of work to flush (every state change of a reach
    action writes one, and the flush cost more than the statement)."""
    session.execute(
        insert(_OUTBOX).values(
            service=service,
            event_json=bounded_event(fields),
            created_at=time.time(),
            attempts=0,
        )
    )


def write_now(sessions: sessionmaker[Session], service: str, fields: Mapping[str, Any]) -> None:
    """Writes an event in a transaction of its own (a call that changed nothing)."""
    with sessions.begin() as session:
        record(session, service, fields)


def install(sessions: sessionmaker[Session]) -> None:
    """Makes every transaction of ``sessions`` that writes carry the open draft."""

    def writes(session: Session, *_: Any) -> None:
        if session.new or session.dirty or session.deleted:
            session.info["audit_wrote"] = True

    def executes(state: ORMExecuteState) -> None:
        if state.is_insert or state.is_update or state.is_delete:
            state.session.info["audit_wrote"] = True

    def before_commit(session: Session) -> None:
        # Objects added but not flushed yet are written by this commit too.
        pending = bool(session.new or session.dirty or session.deleted)
        wrote = session.info.pop("audit_wrote", False) or pending
        draft = _current.get()
        if wrote and draft is not None and not draft.written:
            draft.written = True
            session.info["audit_draft"] = draft
            record(session, draft.service, draft.event("ok"))

    def committed(session: Session) -> None:
        session.info.pop("audit_wrote", None)
        session.info.pop("audit_draft", None)

    def forget(session: Session, *_: Any) -> None:
        # The change did not happen, so neither did its event: a retried transaction of
        # the same call must carry it again.
        session.info.pop("audit_wrote", None)
        draft = session.info.pop("audit_draft", None)
        if draft is not None:
            draft.written = False

    event.listen(sessions, "before_flush", writes)
    event.listen(sessions, "do_orm_execute", executes)
    event.listen(sessions, "before_commit", before_commit)
    event.listen(sessions, "after_commit", committed)
    event.listen(sessions, "after_rollback", forget)

"""The events of an AppendEvents call as the audit service stores them: checked, masked
again, and cut for the chain (``chain.new_event``), all before any lock is taken.

Masking again on arrival keeps a service that forgot from putting personal data into the
trail: the parameters, the idempotency key and every other text field but the tenant and
the time. The services mask before they send, so almost every batch has nothing left to
mask: ``Masker.mask_json`` and ``Masker.mask_texts`` tell that in one pass over the whole
batch, and mask one event at a time only when that pass finds something that might be
personal data. (py-spy on the audit service, before: masking each string of each event
on its own 14 % of its samples, reading the request's fields into dicts 18 %.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import String

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.audit.chain import NewEvent, new_event
from reachstore_server.common import errors
from reachstore_server.common.pii import Masker
from reachstore_server.common.structs import NotFinite, struct_to_python
from reachstore_server.common.timefmt import parse_rfc3339
from reachstore_server.storage.audit_models import AuditEventRow

# The stored column's width: the time is kept as sent, since the chain hashes it as
# written, so a longer one is refused rather than cut.
_TIME_COLUMN = AuditEventRow.__table__.c.time.type
assert isinstance(_TIME_COLUMN, String) and _TIME_COLUMN.length is not None
MAX_TIME_CHARS: int = _TIME_COLUMN.length

# Category number -> the stored name ("" for unspecified).
_CATEGORY_NAMES = {
    value: "" if value == pf_pb2.CATEGORY_UNSPECIFIED else name.removeprefix("CATEGORY_").lower()
    for name, value in pf_pb2.Category.items()
}


def new_events(messages: Sequence[pb.AuditEvent], masker: Masker) -> list[NewEvent]:
    """The stored form of each appended event, checked (INVALID_ARGUMENT naming the first
    field that fails) and masked."""
    checked = [_checked(message, index) for index, message in enumerate(messages)]
    params_json = masker.mask_json(
        [_params(message, index) for index, message in enumerate(messages)]
    )
    keys = masker.mask_texts([m.idempotency_key for m in messages])
    # Every other text field too (the tenant excepted: it names the key's own tenant, which
    # is checked): a caller may put anything in an id, a method or an error code.
    texts = masker.mask_texts(
        [value for before, after in checked for value in _texts(before, after)]
    )
    masked = [texts[i : i + _TEXTS] for i in range(0, len(texts), _TEXTS)]
    # STORED_FIELDS in order: the six before the idempotency key, the key, the params, the
    # five after them.
    events = []
    for (before, after), own, key, text in zip(checked, masked, keys, params_json, strict=True):
        before, after = _put(before, after, own)
        events.append(new_event((*before, key[:512], text, *after)))
    return events


# The text fields of ``_checked``'s (before, after) that are masked, by position, with the
# width each is cut to after masking (a token may be longer than what it replaced).
_BEFORE_TEXTS = {0: 64, 3: 32, 4: 32, 5: 64}  # event_id, caller_key_id, service, method
_AFTER_TEXTS = {0: 32, 1: 64, 4: 32}  # result_status, error_code, trace_id
_TEXTS = len(_BEFORE_TEXTS) + len(_AFTER_TEXTS)


def _texts(before: tuple[Any, ...], after: tuple[Any, ...]) -> list[str]:
    return [before[i] for i in _BEFORE_TEXTS] + [after[i] for i in _AFTER_TEXTS]


def _put(
    before: tuple[Any, ...], after: tuple[Any, ...], masked: Sequence[str]
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``before`` and ``after`` with their text fields replaced by ``masked`` (in
    ``_texts`` order), each cut to its width."""
    new_before, new_after = list(before), list(after)
    values = iter(masked)
    for i, width in _BEFORE_TEXTS.items():
        new_before[i] = next(values)[:width]
    for i, width in _AFTER_TEXTS.items():
        new_after[i] = next(values)[:width]
    return tuple(new_before), tuple(new_after)


def _params(message: pb.AuditEvent, index: int) -> dict[str, Any]:
    try:
        return struct_to_python(message.params)
    except NotFinite:
        # JSON holds no NaN or infinity, and the chain hashes the params as JSON.
        raise errors.invalid(
            f"events[{index}].params", "numbers must be finite (no NaN or infinity)"
        ) from None


def _checked(message: pb.AuditEvent, index: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The event's fields before the idempotency key and after the params, in
    STORED_FIELDS order, checked."""
    event_id, tenant, time = message.event_id, message.tenant, message.time
    service, method = message.service, message.method
    if not 1 <= len(event_id) <= 64:
        raise errors.invalid(f"events[{index}].event_id", "1 to 64 characters")
    if not 1 <= len(tenant) <= 64:
        raise errors.invalid(f"events[{index}].tenant", "the tenant, 1 to 64 characters")
    if len(time) > MAX_TIME_CHARS:
        raise errors.invalid(
            f"events[{index}].time", f"an RFC 3339 time of at most {MAX_TIME_CHARS} characters"
        )
    parse_rfc3339(time, f"events[{index}].time")  # stored as sent: it is hashed as written
    if not service or not method:
        raise errors.invalid(f"events[{index}].service", "service and method are required")
    category = _CATEGORY_NAMES.get(message.category)
    if category is None:
        # An open enum carries numbers nobody defined.
        raise errors.invalid(f"events[{index}].category", "one of the Category values")
    before = (event_id, time, tenant, message.caller_key_id[:32], service[:32], method[:64])
    after = (
        (message.result_status or "ok")[:32],
        message.error_code[:64],
        category,
        max(0, message.duration_ms),
        message.trace_id[:32],
    )
    return before, after

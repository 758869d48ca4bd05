from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from reachstore.common.v1 import access_pb2 as _access_pb2
from reachstore.common.v1 import partial_failure_pb2 as _partial_failure_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BreakKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BREAK_KIND_UNSPECIFIED: _ClassVar[BreakKind]
    BREAK_KIND_EDITED: _ClassVar[BreakKind]
    BREAK_KIND_DELETED: _ClassVar[BreakKind]
    BREAK_KIND_INSERTED: _ClassVar[BreakKind]
    BREAK_KIND_REORDERED: _ClassVar[BreakKind]
    BREAK_KIND_TRUNCATED: _ClassVar[BreakKind]
    BREAK_KIND_FORGED_CHECKPOINT: _ClassVar[BreakKind]
    BREAK_KIND_REWRITTEN: _ClassVar[BreakKind]
    BREAK_KIND_CHECKPOINT_MISSING: _ClassVar[BreakKind]
    BREAK_KIND_WITNESS_INCOMPLETE: _ClassVar[BreakKind]
    BREAK_KIND_WITNESS_BROKEN: _ClassVar[BreakKind]
    BREAK_KIND_CADENCE_GAP: _ClassVar[BreakKind]
    BREAK_KIND_UNVOUCHED_TAIL: _ClassVar[BreakKind]
BREAK_KIND_UNSPECIFIED: BreakKind
BREAK_KIND_EDITED: BreakKind
BREAK_KIND_DELETED: BreakKind
BREAK_KIND_INSERTED: BreakKind
BREAK_KIND_REORDERED: BreakKind
BREAK_KIND_TRUNCATED: BreakKind
BREAK_KIND_FORGED_CHECKPOINT: BreakKind
BREAK_KIND_REWRITTEN: BreakKind
BREAK_KIND_CHECKPOINT_MISSING: BreakKind
BREAK_KIND_WITNESS_INCOMPLETE: BreakKind
BREAK_KIND_WITNESS_BROKEN: BreakKind
BREAK_KIND_CADENCE_GAP: BreakKind
BREAK_KIND_UNVOUCHED_TAIL: BreakKind

class AuditEvent(_message.Message):
    __slots__ = ("event_id", "time", "tenant", "caller_key_id", "service", "method", "idempotency_key", "params", "result_status", "error_code", "category", "duration_ms", "trace_id", "seq", "prev_hash", "hash")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CALLER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    RESULT_STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    PREV_HASH_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    time: str
    tenant: str
    caller_key_id: str
    service: str
    method: str
    idempotency_key: str
    params: _struct_pb2.Struct
    result_status: str
    error_code: str
    category: _partial_failure_pb2.Category
    duration_ms: int
    trace_id: str
    seq: int
    prev_hash: str
    hash: str
    def __init__(self, event_id: _Optional[str] = ..., time: _Optional[str] = ..., tenant: _Optional[str] = ..., caller_key_id: _Optional[str] = ..., service: _Optional[str] = ..., method: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., result_status: _Optional[str] = ..., error_code: _Optional[str] = ..., category: _Optional[_Union[_partial_failure_pb2.Category, str]] = ..., duration_ms: _Optional[int] = ..., trace_id: _Optional[str] = ..., seq: _Optional[int] = ..., prev_hash: _Optional[str] = ..., hash: _Optional[str] = ...) -> None: ...

class AppendEventsRequest(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[AuditEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[AuditEvent, _Mapping]]] = ...) -> None: ...

class AppendEventsResponse(_message.Message):
    __slots__ = ("appended", "duplicates", "partial_failures")
    APPENDED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    appended: int
    duplicates: int
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, appended: _Optional[int] = ..., duplicates: _Optional[int] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("tenant", "caller_key_id", "service", "method", "idempotency_key", "trace_id", "since", "until", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CALLER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    caller_key_id: str
    service: str
    method: str
    idempotency_key: str
    trace_id: str
    since: str
    until: str
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., caller_key_id: _Optional[str] = ..., service: _Optional[str] = ..., method: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., trace_id: _Optional[str] = ..., since: _Optional[str] = ..., until: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token", "partial_failures")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[AuditEvent]
    next_page_token: str
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, events: _Optional[_Iterable[_Union[AuditEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class GetEventRequest(_message.Message):
    __slots__ = ("event_id",)
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    def __init__(self, event_id: _Optional[str] = ...) -> None: ...

class GetEventResponse(_message.Message):
    __slots__ = ("event", "partial_failures")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    event: AuditEvent
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, event: _Optional[_Union[AuditEvent, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class VerifyRequest(_message.Message):
    __slots__ = ("tenant", "all_tenants", "from_seq", "to_seq")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ALL_TENANTS_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    TO_SEQ_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    all_tenants: bool
    from_seq: int
    to_seq: int
    def __init__(self, tenant: _Optional[str] = ..., all_tenants: _Optional[bool] = ..., from_seq: _Optional[int] = ..., to_seq: _Optional[int] = ...) -> None: ...

class ChainBreak(_message.Message):
    __slots__ = ("kind", "tenant", "seq", "event_id", "detail")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    kind: BreakKind
    tenant: str
    seq: int
    event_id: str
    detail: str
    def __init__(self, kind: _Optional[_Union[BreakKind, str]] = ..., tenant: _Optional[str] = ..., seq: _Optional[int] = ..., event_id: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class VerifyResponse(_message.Message):
    __slots__ = ("ok", "first_break", "events_checked", "checkpoints_checked", "tenants_checked", "partial_failures")
    OK_FIELD_NUMBER: _ClassVar[int]
    FIRST_BREAK_FIELD_NUMBER: _ClassVar[int]
    EVENTS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    TENANTS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    first_break: ChainBreak
    events_checked: int
    checkpoints_checked: int
    tenants_checked: int
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, ok: _Optional[bool] = ..., first_break: _Optional[_Union[ChainBreak, _Mapping]] = ..., events_checked: _Optional[int] = ..., checkpoints_checked: _Optional[int] = ..., tenants_checked: _Optional[int] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class GetCheckpointRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("tenant", "seq", "head_hash", "signed_at", "key_id", "signature")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    SIGNED_AT_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    seq: int
    head_hash: str
    signed_at: str
    key_id: str
    signature: str
    def __init__(self, tenant: _Optional[str] = ..., seq: _Optional[int] = ..., head_hash: _Optional[str] = ..., signed_at: _Optional[str] = ..., key_id: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class GetCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint", "partial_failures", "last_checkpoint_age_s", "last_witnessed_age_s", "public_key_pem")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    LAST_WITNESSED_AGE_S_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_PEM_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    last_checkpoint_age_s: float
    last_witnessed_age_s: float
    public_key_pem: str
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ..., last_checkpoint_age_s: _Optional[float] = ..., last_witnessed_age_s: _Optional[float] = ..., public_key_pem: _Optional[str] = ...) -> None: ...

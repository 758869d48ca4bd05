from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from reachstore.common.v1 import access_pb2 as _access_pb2
from reachstore.common.v1 import http_options_pb2 as _http_options_pb2
from reachstore.common.v1 import partial_failure_pb2 as _partial_failure_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_PENDING: _ClassVar[TaskState]
    TASK_STATE_RUNNING: _ClassVar[TaskState]
    TASK_STATE_SUCCEEDED: _ClassVar[TaskState]
    TASK_STATE_FAILED: _ClassVar[TaskState]

class ActionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_STATE_UNSPECIFIED: _ClassVar[ActionState]
    ACTION_STATE_BLOCKED: _ClassVar[ActionState]
    ACTION_STATE_READY: _ClassVar[ActionState]
    ACTION_STATE_SUBMITTING: _ClassVar[ActionState]
    ACTION_STATE_PENDING: _ClassVar[ActionState]
    ACTION_STATE_SUCCEEDED: _ClassVar[ActionState]
    ACTION_STATE_FAILED: _ClassVar[ActionState]
    ACTION_STATE_UNKNOWN: _ClassVar[ActionState]
    ACTION_STATE_NEEDS_REVIEW: _ClassVar[ActionState]
    ACTION_STATE_CANCELLED: _ClassVar[ActionState]
    ACTION_STATE_SKIPPED: _ClassVar[ActionState]

class Requirement(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REQUIREMENT_UNSPECIFIED: _ClassVar[Requirement]
    REQUIREMENT_REQUIRED: _ClassVar[Requirement]
    REQUIREMENT_OPTIONAL: _ClassVar[Requirement]

class FailureKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_KIND_UNSPECIFIED: _ClassVar[FailureKind]
    FAILURE_KIND_BUSINESS: _ClassVar[FailureKind]
    FAILURE_KIND_TECHNICAL: _ClassVar[FailureKind]

class Resolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESOLUTION_UNSPECIFIED: _ClassVar[Resolution]
    RESOLUTION_SUCCEEDED: _ClassVar[Resolution]
    RESOLUTION_FAILED: _ClassVar[Resolution]
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_PENDING: TaskState
TASK_STATE_RUNNING: TaskState
TASK_STATE_SUCCEEDED: TaskState
TASK_STATE_FAILED: TaskState
ACTION_STATE_UNSPECIFIED: ActionState
ACTION_STATE_BLOCKED: ActionState
ACTION_STATE_READY: ActionState
ACTION_STATE_SUBMITTING: ActionState
ACTION_STATE_PENDING: ActionState
ACTION_STATE_SUCCEEDED: ActionState
ACTION_STATE_FAILED: ActionState
ACTION_STATE_UNKNOWN: ActionState
ACTION_STATE_NEEDS_REVIEW: ActionState
ACTION_STATE_CANCELLED: ActionState
ACTION_STATE_SKIPPED: ActionState
REQUIREMENT_UNSPECIFIED: Requirement
REQUIREMENT_REQUIRED: Requirement
REQUIREMENT_OPTIONAL: Requirement
FAILURE_KIND_UNSPECIFIED: FailureKind
FAILURE_KIND_BUSINESS: FailureKind
FAILURE_KIND_TECHNICAL: FailureKind
RESOLUTION_UNSPECIFIED: Resolution
RESOLUTION_SUCCEEDED: Resolution
RESOLUTION_FAILED: Resolution

class ActionSpec(_message.Message):
    __slots__ = ("name", "channel", "action_type", "params", "depends_on", "requirement")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    REQUIREMENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    channel: str
    action_type: str
    params: _struct_pb2.Struct
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    requirement: Requirement
    def __init__(self, name: _Optional[str] = ..., channel: _Optional[str] = ..., action_type: _Optional[str] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., depends_on: _Optional[_Iterable[str]] = ..., requirement: _Optional[_Union[Requirement, str]] = ...) -> None: ...

class SubmitTaskRequest(_message.Message):
    __slots__ = ("entity_id", "idempotency_key", "logical_time", "actions", "validate_only", "trace_id")
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_TIME_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    entity_id: str
    idempotency_key: str
    logical_time: str
    actions: _containers.RepeatedCompositeFieldContainer[ActionSpec]
    validate_only: bool
    trace_id: str
    def __init__(self, entity_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., logical_time: _Optional[str] = ..., actions: _Optional[_Iterable[_Union[ActionSpec, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., trace_id: _Optional[str] = ...) -> None: ...

class SubmitTaskResponse(_message.Message):
    __slots__ = ("task", "deduplicated", "validated_only", "partial_failures")
    TASK_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    VALIDATED_ONLY_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    task: Task
    deduplicated: bool
    validated_only: bool
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., deduplicated: _Optional[bool] = ..., validated_only: _Optional[bool] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class ReachRequest(_message.Message):
    __slots__ = ("action", "entity_id", "idempotency_key", "logical_time", "trace_id")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_TIME_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    action: ActionSpec
    entity_id: str
    idempotency_key: str
    logical_time: str
    trace_id: str
    def __init__(self, action: _Optional[_Union[ActionSpec, _Mapping]] = ..., entity_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., logical_time: _Optional[str] = ..., trace_id: _Optional[str] = ...) -> None: ...

class ReachResponse(_message.Message):
    __slots__ = ("task_id", "action_id", "idempotency_key", "state", "deduplicated", "partial_failures")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    action_id: str
    idempotency_key: str
    state: ActionState
    deduplicated: bool
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, task_id: _Optional[str] = ..., action_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., state: _Optional[_Union[ActionState, str]] = ..., deduplicated: _Optional[bool] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "entity_id", "idempotency_key", "logical_time", "state", "trace_id", "submitted_by", "version", "actions", "created_at", "updated_at", "finished_at", "poll_after_ms")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    POLL_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    entity_id: str
    idempotency_key: str
    logical_time: str
    state: TaskState
    trace_id: str
    submitted_by: str
    version: int
    actions: _containers.RepeatedCompositeFieldContainer[Action]
    created_at: str
    updated_at: str
    finished_at: str
    poll_after_ms: int
    def __init__(self, task_id: _Optional[str] = ..., entity_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., logical_time: _Optional[str] = ..., state: _Optional[_Union[TaskState, str]] = ..., trace_id: _Optional[str] = ..., submitted_by: _Optional[str] = ..., version: _Optional[int] = ..., actions: _Optional[_Iterable[_Union[Action, _Mapping]]] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., finished_at: _Optional[str] = ..., poll_after_ms: _Optional[int] = ...) -> None: ...

class Action(_message.Message):
    __slots__ = ("action_id", "task_id", "name", "channel", "action_type", "params", "depends_on", "requirement", "idempotency_key", "window", "state", "attempts", "polls", "external_id", "failure", "failure_kind", "next_attempt_at", "resolution", "receipts", "history", "created_at", "updated_at", "finished_at")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    REQUIREMENT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    POLLS_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_KIND_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    task_id: str
    name: str
    channel: str
    action_type: str
    params: _struct_pb2.Struct
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    requirement: Requirement
    idempotency_key: str
    window: str
    state: ActionState
    attempts: int
    polls: int
    external_id: str
    failure: _partial_failure_pb2.PartialFailure
    failure_kind: FailureKind
    next_attempt_at: str
    resolution: ActionResolution
    receipts: _containers.RepeatedCompositeFieldContainer[Receipt]
    history: _containers.RepeatedCompositeFieldContainer[HistoryEntry]
    created_at: str
    updated_at: str
    finished_at: str
    def __init__(self, action_id: _Optional[str] = ..., task_id: _Optional[str] = ..., name: _Optional[str] = ..., channel: _Optional[str] = ..., action_type: _Optional[str] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., depends_on: _Optional[_Iterable[str]] = ..., requirement: _Optional[_Union[Requirement, str]] = ..., idempotency_key: _Optional[str] = ..., window: _Optional[str] = ..., state: _Optional[_Union[ActionState, str]] = ..., attempts: _Optional[int] = ..., polls: _Optional[int] = ..., external_id: _Optional[str] = ..., failure: _Optional[_Union[_partial_failure_pb2.PartialFailure, _Mapping]] = ..., failure_kind: _Optional[_Union[FailureKind, str]] = ..., next_attempt_at: _Optional[str] = ..., resolution: _Optional[_Union[ActionResolution, _Mapping]] = ..., receipts: _Optional[_Iterable[_Union[Receipt, _Mapping]]] = ..., history: _Optional[_Iterable[_Union[HistoryEntry, _Mapping]]] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., finished_at: _Optional[str] = ...) -> None: ...

class ActionResolution(_message.Message):
    __slots__ = ("outcome", "note", "resolved_by", "resolved_at")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_AT_FIELD_NUMBER: _ClassVar[int]
    outcome: Resolution
    note: str
    resolved_by: str
    resolved_at: str
    def __init__(self, outcome: _Optional[_Union[Resolution, str]] = ..., note: _Optional[str] = ..., resolved_by: _Optional[str] = ..., resolved_at: _Optional[str] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("attempt", "operation", "external_id", "status_code", "snippet", "duration_ms", "outcome", "created_at")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    operation: str
    external_id: str
    status_code: int
    snippet: str
    duration_ms: int
    outcome: str
    created_at: str
    def __init__(self, attempt: _Optional[int] = ..., operation: _Optional[str] = ..., external_id: _Optional[str] = ..., status_code: _Optional[int] = ..., snippet: _Optional[str] = ..., duration_ms: _Optional[int] = ..., outcome: _Optional[str] = ..., created_at: _Optional[str] = ...) -> None: ...

class HistoryEntry(_message.Message):
    __slots__ = ("at", "from_state", "to_state", "reason", "details")
    AT_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    at: str
    from_state: ActionState
    to_state: ActionState
    reason: str
    details: _struct_pb2.Struct
    def __init__(self, at: _Optional[str] = ..., from_state: _Optional[_Union[ActionState, str]] = ..., to_state: _Optional[_Union[ActionState, str]] = ..., reason: _Optional[str] = ..., details: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id", "wait_ms", "known_version")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    wait_ms: int
    known_version: int
    def __init__(self, task_id: _Optional[str] = ..., wait_ms: _Optional[int] = ..., known_version: _Optional[int] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task", "partial_failures")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    task: Task
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("state", "channel", "entity_id", "page_size", "page_token")
    STATE_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    state: TaskState
    channel: str
    entity_id: str
    page_size: int
    page_token: str
    def __init__(self, state: _Optional[_Union[TaskState, str]] = ..., channel: _Optional[str] = ..., entity_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token", "partial_failures")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    next_page_token: str
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class GetActionRequest(_message.Message):
    __slots__ = ("action_id",)
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    def __init__(self, action_id: _Optional[str] = ...) -> None: ...

class GetActionResponse(_message.Message):
    __slots__ = ("action", "partial_failures")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    action: Action
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, action: _Optional[_Union[Action, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class CancelActionRequest(_message.Message):
    __slots__ = ("action_id",)
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    def __init__(self, action_id: _Optional[str] = ...) -> None: ...

class CancelActionResponse(_message.Message):
    __slots__ = ("action", "cancelled", "partial_failures")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    action: Action
    cancelled: bool
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, action: _Optional[_Union[Action, _Mapping]] = ..., cancelled: _Optional[bool] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class ResolveActionRequest(_message.Message):
    __slots__ = ("action_id", "outcome", "note")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    outcome: Resolution
    note: str
    def __init__(self, action_id: _Optional[str] = ..., outcome: _Optional[_Union[Resolution, str]] = ..., note: _Optional[str] = ...) -> None: ...

class ResolveActionResponse(_message.Message):
    __slots__ = ("action", "partial_failures")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    action: Action
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, action: _Optional[_Union[Action, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class ListChannelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListChannelsResponse(_message.Message):
    __slots__ = ("channels", "partial_failures")
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    channels: _containers.RepeatedCompositeFieldContainer[Channel]
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, channels: _Optional[_Iterable[_Union[Channel, _Mapping]]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class Channel(_message.Message):
    __slots__ = ("name", "kind", "description", "side_effect", "action_types", "parameters_schema", "rules", "idempotent", "honours_idempotency_key", "can_poll", "can_cancel", "send_rate_per_second", "breaker_state", "window")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECT_FIELD_NUMBER: _ClassVar[int]
    ACTION_TYPES_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    HONOURS_IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CAN_POLL_FIELD_NUMBER: _ClassVar[int]
    CAN_CANCEL_FIELD_NUMBER: _ClassVar[int]
    SEND_RATE_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BREAKER_STATE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    description: str
    side_effect: str
    action_types: _containers.RepeatedScalarFieldContainer[str]
    parameters_schema: _struct_pb2.Struct
    rules: _containers.RepeatedScalarFieldContainer[str]
    idempotent: bool
    honours_idempotency_key: bool
    can_poll: bool
    can_cancel: bool
    send_rate_per_second: float
    breaker_state: str
    window: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., description: _Optional[str] = ..., side_effect: _Optional[str] = ..., action_types: _Optional[_Iterable[str]] = ..., parameters_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., rules: _Optional[_Iterable[str]] = ..., idempotent: _Optional[bool] = ..., honours_idempotency_key: _Optional[bool] = ..., can_poll: _Optional[bool] = ..., can_cancel: _Optional[bool] = ..., send_rate_per_second: _Optional[float] = ..., breaker_state: _Optional[str] = ..., window: _Optional[str] = ...) -> None: ...

class ListActionsRequest(_message.Message):
    __slots__ = ("states", "channel", "tenant", "min_age_s", "max_age_s", "page_size", "page_token")
    STATES_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MIN_AGE_S_FIELD_NUMBER: _ClassVar[int]
    MAX_AGE_S_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[ActionState]
    channel: str
    tenant: str
    min_age_s: int
    max_age_s: int
    page_size: int
    page_token: str
    def __init__(self, states: _Optional[_Iterable[_Union[ActionState, str]]] = ..., channel: _Optional[str] = ..., tenant: _Optional[str] = ..., min_age_s: _Optional[int] = ..., max_age_s: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListActionsResponse(_message.Message):
    __slots__ = ("actions", "next_page_token", "tenant", "partial_failures")
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedCompositeFieldContainer[Action]
    next_page_token: str
    tenant: str
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, actions: _Optional[_Iterable[_Union[Action, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., tenant: _Optional[str] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class RecheckActionRequest(_message.Message):
    __slots__ = ("action_id",)
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    def __init__(self, action_id: _Optional[str] = ...) -> None: ...

class RecheckActionResponse(_message.Message):
    __slots__ = ("action", "scheduled", "partial_failures")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    action: Action
    scheduled: bool
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, action: _Optional[_Union[Action, _Mapping]] = ..., scheduled: _Optional[bool] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class GetChannelHealthRequest(_message.Message):
    __slots__ = ("channel", "window_s", "bucket_s")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    BUCKET_S_FIELD_NUMBER: _ClassVar[int]
    channel: str
    window_s: int
    bucket_s: int
    def __init__(self, channel: _Optional[str] = ..., window_s: _Optional[int] = ..., bucket_s: _Optional[int] = ...) -> None: ...

class StateCount(_message.Message):
    __slots__ = ("state", "count")
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    state: ActionState
    count: int
    def __init__(self, state: _Optional[_Union[ActionState, str]] = ..., count: _Optional[int] = ...) -> None: ...

class HealthBucket(_message.Message):
    __slots__ = ("start", "entered", "finished", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "sends", "retries", "retry_rate")
    START_FIELD_NUMBER: _ClassVar[int]
    ENTERED_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P50_MS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P95_MS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P99_MS_FIELD_NUMBER: _ClassVar[int]
    SENDS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    RETRY_RATE_FIELD_NUMBER: _ClassVar[int]
    start: str
    entered: _containers.RepeatedCompositeFieldContainer[StateCount]
    finished: int
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    sends: int
    retries: int
    retry_rate: float
    def __init__(self, start: _Optional[str] = ..., entered: _Optional[_Iterable[_Union[StateCount, _Mapping]]] = ..., finished: _Optional[int] = ..., latency_p50_ms: _Optional[float] = ..., latency_p95_ms: _Optional[float] = ..., latency_p99_ms: _Optional[float] = ..., sends: _Optional[int] = ..., retries: _Optional[int] = ..., retry_rate: _Optional[float] = ...) -> None: ...

class LimiterWaits(_message.Message):
    __slots__ = ("sends", "total_wait_s", "mean_wait_ms")
    SENDS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    MEAN_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    sends: int
    total_wait_s: float
    mean_wait_ms: float
    def __init__(self, sends: _Optional[int] = ..., total_wait_s: _Optional[float] = ..., mean_wait_ms: _Optional[float] = ...) -> None: ...

class ChannelHealth(_message.Message):
    __slots__ = ("channel", "current", "buckets", "breaker_state", "limiter", "baselines")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    BREAKER_STATE_FIELD_NUMBER: _ClassVar[int]
    LIMITER_FIELD_NUMBER: _ClassVar[int]
    BASELINES_FIELD_NUMBER: _ClassVar[int]
    channel: str
    current: _containers.RepeatedCompositeFieldContainer[StateCount]
    buckets: _containers.RepeatedCompositeFieldContainer[HealthBucket]
    breaker_state: str
    limiter: LimiterWaits
    baselines: _containers.RepeatedCompositeFieldContainer[SignalBaseline]
    def __init__(self, channel: _Optional[str] = ..., current: _Optional[_Iterable[_Union[StateCount, _Mapping]]] = ..., buckets: _Optional[_Iterable[_Union[HealthBucket, _Mapping]]] = ..., breaker_state: _Optional[str] = ..., limiter: _Optional[_Union[LimiterWaits, _Mapping]] = ..., baselines: _Optional[_Iterable[_Union[SignalBaseline, _Mapping]]] = ...) -> None: ...

class SignalBaseline(_message.Message):
    __slots__ = ("signal", "current", "samples", "mean", "stddev", "threshold", "history_days", "alerting", "not_judged_reason", "failure_kind")
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STDDEV_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    HISTORY_DAYS_FIELD_NUMBER: _ClassVar[int]
    ALERTING_FIELD_NUMBER: _ClassVar[int]
    NOT_JUDGED_REASON_FIELD_NUMBER: _ClassVar[int]
    FAILURE_KIND_FIELD_NUMBER: _ClassVar[int]
    signal: str
    current: float
    samples: int
    mean: float
    stddev: float
    threshold: float
    history_days: int
    alerting: bool
    not_judged_reason: str
    failure_kind: str
    def __init__(self, signal: _Optional[str] = ..., current: _Optional[float] = ..., samples: _Optional[int] = ..., mean: _Optional[float] = ..., stddev: _Optional[float] = ..., threshold: _Optional[float] = ..., history_days: _Optional[int] = ..., alerting: _Optional[bool] = ..., not_judged_reason: _Optional[str] = ..., failure_kind: _Optional[str] = ...) -> None: ...

class GetUnknownReviewRequest(_message.Message):
    __slots__ = ("since_s", "channel")
    SINCE_S_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    since_s: int
    channel: str
    def __init__(self, since_s: _Optional[int] = ..., channel: _Optional[str] = ...) -> None: ...

class UnknownReviewEntry(_message.Message):
    __slots__ = ("action_id", "task_id", "name", "entered_unknown_at", "settled_at", "resolved_by", "note")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTERED_UNKNOWN_AT_FIELD_NUMBER: _ClassVar[int]
    SETTLED_AT_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    task_id: str
    name: str
    entered_unknown_at: str
    settled_at: str
    resolved_by: str
    note: str
    def __init__(self, action_id: _Optional[str] = ..., task_id: _Optional[str] = ..., name: _Optional[str] = ..., entered_unknown_at: _Optional[str] = ..., settled_at: _Optional[str] = ..., resolved_by: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class UnknownReviewGroup(_message.Message):
    __slots__ = ("channel", "settled_by", "state", "count", "actions")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    SETTLED_BY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    channel: str
    settled_by: str
    state: ActionState
    count: int
    actions: _containers.RepeatedCompositeFieldContainer[UnknownReviewEntry]
    def __init__(self, channel: _Optional[str] = ..., settled_by: _Optional[str] = ..., state: _Optional[_Union[ActionState, str]] = ..., count: _Optional[int] = ..., actions: _Optional[_Iterable[_Union[UnknownReviewEntry, _Mapping]]] = ...) -> None: ...

class GetUnknownReviewResponse(_message.Message):
    __slots__ = ("groups", "total", "since", "generated_at", "partial_failures")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    GENERATED_AT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[UnknownReviewGroup]
    total: int
    since: str
    generated_at: str
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, groups: _Optional[_Iterable[_Union[UnknownReviewGroup, _Mapping]]] = ..., total: _Optional[int] = ..., since: _Optional[str] = ..., generated_at: _Optional[str] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class GetChannelHealthResponse(_message.Message):
    __slots__ = ("channels", "window_s", "bucket_s", "replica", "generated_at", "partial_failures")
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    BUCKET_S_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    GENERATED_AT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    channels: _containers.RepeatedCompositeFieldContainer[ChannelHealth]
    window_s: int
    bucket_s: int
    replica: str
    generated_at: str
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, channels: _Optional[_Iterable[_Union[ChannelHealth, _Mapping]]] = ..., window_s: _Optional[int] = ..., bucket_s: _Optional[int] = ..., replica: _Optional[str] = ..., generated_at: _Optional[str] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

from google.api import annotations_pb2 as _annotations_pb2
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

class OnDuplicate(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ON_DUPLICATE_UNSPECIFIED: _ClassVar[OnDuplicate]
    ON_DUPLICATE_SKIP: _ClassVar[OnDuplicate]
    ON_DUPLICATE_OVERWRITE: _ClassVar[OnDuplicate]
    ON_DUPLICATE_ERROR: _ClassVar[OnDuplicate]

class DocumentOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DOCUMENT_OUTCOME_UNSPECIFIED: _ClassVar[DocumentOutcome]
    DOCUMENT_OUTCOME_ACCEPTED: _ClassVar[DocumentOutcome]
    DOCUMENT_OUTCOME_SKIPPED: _ClassVar[DocumentOutcome]
    DOCUMENT_OUTCOME_FAILED: _ClassVar[DocumentOutcome]

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_QUEUED: _ClassVar[TaskState]
    TASK_STATE_PROCESSING: _ClassVar[TaskState]
    TASK_STATE_COMPLETED: _ClassVar[TaskState]
    TASK_STATE_FAILED: _ClassVar[TaskState]
    TASK_STATE_CANCELLING: _ClassVar[TaskState]
    TASK_STATE_CANCELLED: _ClassVar[TaskState]

class TaskPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_PHASE_UNSPECIFIED: _ClassVar[TaskPhase]
    TASK_PHASE_CHUNKING: _ClassVar[TaskPhase]
    TASK_PHASE_EMBEDDING: _ClassVar[TaskPhase]
    TASK_PHASE_INDEXING: _ClassVar[TaskPhase]

class AgentDecisionHint(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGENT_DECISION_HINT_UNSPECIFIED: _ClassVar[AgentDecisionHint]
    AGENT_DECISION_HINT_POLL_AGAIN: _ClassVar[AgentDecisionHint]
    AGENT_DECISION_HINT_DONE_FETCH_DOC: _ClassVar[AgentDecisionHint]
    AGENT_DECISION_HINT_INSPECT_ERROR_CODE: _ClassVar[AgentDecisionHint]
    AGENT_DECISION_HINT_STOP: _ClassVar[AgentDecisionHint]
ON_DUPLICATE_UNSPECIFIED: OnDuplicate
ON_DUPLICATE_SKIP: OnDuplicate
ON_DUPLICATE_OVERWRITE: OnDuplicate
ON_DUPLICATE_ERROR: OnDuplicate
DOCUMENT_OUTCOME_UNSPECIFIED: DocumentOutcome
DOCUMENT_OUTCOME_ACCEPTED: DocumentOutcome
DOCUMENT_OUTCOME_SKIPPED: DocumentOutcome
DOCUMENT_OUTCOME_FAILED: DocumentOutcome
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_QUEUED: TaskState
TASK_STATE_PROCESSING: TaskState
TASK_STATE_COMPLETED: TaskState
TASK_STATE_FAILED: TaskState
TASK_STATE_CANCELLING: TaskState
TASK_STATE_CANCELLED: TaskState
TASK_PHASE_UNSPECIFIED: TaskPhase
TASK_PHASE_CHUNKING: TaskPhase
TASK_PHASE_EMBEDDING: TaskPhase
TASK_PHASE_INDEXING: TaskPhase
AGENT_DECISION_HINT_UNSPECIFIED: AgentDecisionHint
AGENT_DECISION_HINT_POLL_AGAIN: AgentDecisionHint
AGENT_DECISION_HINT_DONE_FETCH_DOC: AgentDecisionHint
AGENT_DECISION_HINT_INSPECT_ERROR_CODE: AgentDecisionHint
AGENT_DECISION_HINT_STOP: AgentDecisionHint

class Namespace(_message.Message):
    __slots__ = ("name", "embedding_model", "dimension", "document_count", "chunk_count", "created_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    embedding_model: str
    dimension: int
    document_count: int
    chunk_count: int
    created_at: str
    def __init__(self, name: _Optional[str] = ..., embedding_model: _Optional[str] = ..., dimension: _Optional[int] = ..., document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., created_at: _Optional[str] = ...) -> None: ...

class CreateNamespaceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateNamespaceResponse(_message.Message):
    __slots__ = ("namespace", "partial_failures")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class GetNamespaceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetNamespaceResponse(_message.Message):
    __slots__ = ("namespace", "partial_failures")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class ListNamespacesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListNamespacesResponse(_message.Message):
    __slots__ = ("namespaces", "next_page_token", "partial_failures")
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedCompositeFieldContainer[Namespace]
    next_page_token: str
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, namespaces: _Optional[_Iterable[_Union[Namespace, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class DeleteNamespaceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteNamespaceResponse(_message.Message):
    __slots__ = ("partial_failures",)
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class DocumentInput(_message.Message):
    __slots__ = ("document_id", "text", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    text: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, document_id: _Optional[str] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateDocumentRequest(_message.Message):
    __slots__ = ("namespace", "document", "on_duplicate")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    ON_DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    document: DocumentInput
    on_duplicate: OnDuplicate
    def __init__(self, namespace: _Optional[str] = ..., document: _Optional[_Union[DocumentInput, _Mapping]] = ..., on_duplicate: _Optional[_Union[OnDuplicate, str]] = ...) -> None: ...

class CreateDocumentResponse(_message.Message):
    __slots__ = ("task", "partial_failures")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    task: Task
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class BatchCreateDocumentsRequest(_message.Message):
    __slots__ = ("namespace", "documents", "on_duplicate")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    ON_DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    documents: _containers.RepeatedCompositeFieldContainer[DocumentInput]
    on_duplicate: OnDuplicate
    def __init__(self, namespace: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[DocumentInput, _Mapping]]] = ..., on_duplicate: _Optional[_Union[OnDuplicate, str]] = ...) -> None: ...

class BatchDocumentResult(_message.Message):
    __slots__ = ("batch_index", "document_id", "outcome", "task_id")
    BATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    batch_index: int
    document_id: str
    outcome: DocumentOutcome
    task_id: str
    def __init__(self, batch_index: _Optional[int] = ..., document_id: _Optional[str] = ..., outcome: _Optional[_Union[DocumentOutcome, str]] = ..., task_id: _Optional[str] = ...) -> None: ...

class BatchMeta(_message.Message):
    __slots__ = ("coverage_ratio", "failed")
    COVERAGE_RATIO_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    coverage_ratio: float
    failed: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, coverage_ratio: _Optional[float] = ..., failed: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class BatchCreateDocumentsResponse(_message.Message):
    __slots__ = ("results", "meta")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BatchDocumentResult]
    meta: BatchMeta
    def __init__(self, results: _Optional[_Iterable[_Union[BatchDocumentResult, _Mapping]]] = ..., meta: _Optional[_Union[BatchMeta, _Mapping]] = ...) -> None: ...

class DeleteDocumentRequest(_message.Message):
    __slots__ = ("namespace", "document_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    document_id: str
    def __init__(self, namespace: _Optional[str] = ..., document_id: _Optional[str] = ...) -> None: ...

class DeleteDocumentResponse(_message.Message):
    __slots__ = ("partial_failures",)
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "namespace", "document_id", "state", "phase", "percent", "agent_decision_hint", "poll_after_ms", "error", "created_at", "updated_at")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    PERCENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_DECISION_HINT_FIELD_NUMBER: _ClassVar[int]
    POLL_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    namespace: str
    document_id: str
    state: TaskState
    phase: TaskPhase
    percent: int
    agent_decision_hint: AgentDecisionHint
    poll_after_ms: int
    error: _partial_failure_pb2.PartialFailure
    created_at: str
    updated_at: str
    def __init__(self, task_id: _Optional[str] = ..., namespace: _Optional[str] = ..., document_id: _Optional[str] = ..., state: _Optional[_Union[TaskState, str]] = ..., phase: _Optional[_Union[TaskPhase, str]] = ..., percent: _Optional[int] = ..., agent_decision_hint: _Optional[_Union[AgentDecisionHint, str]] = ..., poll_after_ms: _Optional[int] = ..., error: _Optional[_Union[_partial_failure_pb2.PartialFailure, _Mapping]] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task", "partial_failures")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    task: Task
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class CancelTaskResponse(_message.Message):
    __slots__ = ("task", "partial_failures")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    task: Task
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

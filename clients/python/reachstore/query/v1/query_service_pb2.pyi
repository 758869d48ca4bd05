from google.api import annotations_pb2 as _annotations_pb2
from reachstore.common.v1 import access_pb2 as _access_pb2
from reachstore.common.v1 import partial_failure_pb2 as _partial_failure_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueryRequest(_message.Message):
    __slots__ = ("namespaces", "query", "top_k", "filter", "timeout_ms", "allow_partial", "namespace")
    class FilterEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_PARTIAL_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    query: str
    top_k: int
    filter: _containers.ScalarMap[str, str]
    timeout_ms: int
    allow_partial: bool
    namespace: str
    def __init__(self, namespaces: _Optional[_Iterable[str]] = ..., query: _Optional[str] = ..., top_k: _Optional[int] = ..., filter: _Optional[_Mapping[str, str]] = ..., timeout_ms: _Optional[int] = ..., allow_partial: _Optional[bool] = ..., namespace: _Optional[str] = ...) -> None: ...

class QueryResult(_message.Message):
    __slots__ = ("namespace", "document_id", "chunk_index", "text", "score", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    document_id: str
    chunk_index: int
    text: str
    score: float
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, namespace: _Optional[str] = ..., document_id: _Optional[str] = ..., chunk_index: _Optional[int] = ..., text: _Optional[str] = ..., score: _Optional[float] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class QueryMeta(_message.Message):
    __slots__ = ("coverage_ratio", "namespaces_queried", "namespaces_succeeded", "namespaces_failed")
    COVERAGE_RATIO_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_QUERIED_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FAILED_FIELD_NUMBER: _ClassVar[int]
    coverage_ratio: float
    namespaces_queried: _containers.RepeatedScalarFieldContainer[str]
    namespaces_succeeded: _containers.RepeatedScalarFieldContainer[str]
    namespaces_failed: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, coverage_ratio: _Optional[float] = ..., namespaces_queried: _Optional[_Iterable[str]] = ..., namespaces_succeeded: _Optional[_Iterable[str]] = ..., namespaces_failed: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("results", "meta")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[QueryResult]
    meta: QueryMeta
    def __init__(self, results: _Optional[_Iterable[_Union[QueryResult, _Mapping]]] = ..., meta: _Optional[_Union[QueryMeta, _Mapping]] = ...) -> None: ...

class GetDocumentRequest(_message.Message):
    __slots__ = ("namespace", "document_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    document_id: str
    def __init__(self, namespace: _Optional[str] = ..., document_id: _Optional[str] = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ("namespace", "document_id", "text", "metadata", "chunk_count", "content_sha256", "updated_at")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_SHA256_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    document_id: str
    text: str
    metadata: _containers.ScalarMap[str, str]
    chunk_count: int
    content_sha256: str
    updated_at: str
    def __init__(self, namespace: _Optional[str] = ..., document_id: _Optional[str] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., chunk_count: _Optional[int] = ..., content_sha256: _Optional[str] = ..., updated_at: _Optional[str] = ...) -> None: ...

class GetDocumentResponse(_message.Message):
    __slots__ = ("document", "partial_failures")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    document: Document
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, document: _Optional[_Union[Document, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class ListDocumentsRequest(_message.Message):
    __slots__ = ("namespace", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDocumentsResponse(_message.Message):
    __slots__ = ("documents", "next_page_token", "partial_failures")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    next_page_token: str
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class ListNamespaceHealthRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "window_s")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    window_s: int
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., window_s: _Optional[int] = ...) -> None: ...

class MissingCount(_message.Message):
    __slots__ = ("category", "error_code", "count")
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    category: _partial_failure_pb2.Category
    error_code: str
    count: int
    def __init__(self, category: _Optional[_Union[_partial_failure_pb2.Category, str]] = ..., error_code: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class NamespaceHealth(_message.Message):
    __slots__ = ("name", "document_count", "chunk_count", "index_state", "queries", "missing", "coverage_ratio", "missing_by", "last_missing_at", "owners", "warming_owners")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    INDEX_STATE_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_RATIO_FIELD_NUMBER: _ClassVar[int]
    MISSING_BY_FIELD_NUMBER: _ClassVar[int]
    LAST_MISSING_AT_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    WARMING_OWNERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    document_count: int
    chunk_count: int
    index_state: str
    queries: int
    missing: int
    coverage_ratio: float
    missing_by: _containers.RepeatedCompositeFieldContainer[MissingCount]
    last_missing_at: str
    owners: _containers.RepeatedScalarFieldContainer[str]
    warming_owners: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., index_state: _Optional[str] = ..., queries: _Optional[int] = ..., missing: _Optional[int] = ..., coverage_ratio: _Optional[float] = ..., missing_by: _Optional[_Iterable[_Union[MissingCount, _Mapping]]] = ..., last_missing_at: _Optional[str] = ..., owners: _Optional[_Iterable[str]] = ..., warming_owners: _Optional[_Iterable[str]] = ...) -> None: ...

class ListNamespaceHealthResponse(_message.Message):
    __slots__ = ("namespaces", "next_page_token", "window_s", "replica", "partial_failures")
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedCompositeFieldContainer[NamespaceHealth]
    next_page_token: str
    window_s: int
    replica: str
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, namespaces: _Optional[_Iterable[_Union[NamespaceHealth, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., window_s: _Optional[int] = ..., replica: _Optional[str] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

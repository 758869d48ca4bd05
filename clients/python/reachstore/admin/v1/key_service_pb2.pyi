from google.api import annotations_pb2 as _annotations_pb2
from reachstore.common.v1 import access_pb2 as _access_pb2
from reachstore.common.v1 import partial_failure_pb2 as _partial_failure_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApiKey(_message.Message):
    __slots__ = ("key_id", "tenant", "name", "scopes", "namespaces", "created_at", "expires_at", "revoked_at", "channels", "groups")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    tenant: str
    name: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    created_at: str
    expires_at: str
    revoked_at: str
    channels: _containers.RepeatedScalarFieldContainer[str]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key_id: _Optional[str] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., namespaces: _Optional[_Iterable[str]] = ..., created_at: _Optional[str] = ..., expires_at: _Optional[str] = ..., revoked_at: _Optional[str] = ..., channels: _Optional[_Iterable[str]] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateKeyRequest(_message.Message):
    __slots__ = ("name", "scopes", "namespaces", "ttl_seconds", "channels", "groups")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    ttl_seconds: int
    channels: _containers.RepeatedScalarFieldContainer[str]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., namespaces: _Optional[_Iterable[str]] = ..., ttl_seconds: _Optional[int] = ..., channels: _Optional[_Iterable[str]] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateKeyResponse(_message.Message):
    __slots__ = ("key", "secret", "partial_failures")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    key: ApiKey
    secret: str
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, key: _Optional[_Union[ApiKey, _Mapping]] = ..., secret: _Optional[str] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class ListKeysRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListKeysResponse(_message.Message):
    __slots__ = ("keys", "next_page_token", "partial_failures")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[ApiKey]
    next_page_token: str
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, keys: _Optional[_Iterable[_Union[ApiKey, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class GetCurrentKeyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetCurrentKeyResponse(_message.Message):
    __slots__ = ("key", "partial_failures")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    key: ApiKey
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, key: _Optional[_Union[ApiKey, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

class RevokeKeyRequest(_message.Message):
    __slots__ = ("key_id",)
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    def __init__(self, key_id: _Optional[str] = ...) -> None: ...

class RevokeKeyResponse(_message.Message):
    __slots__ = ("key", "partial_failures")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FAILURES_FIELD_NUMBER: _ClassVar[int]
    key: ApiKey
    partial_failures: _containers.RepeatedCompositeFieldContainer[_partial_failure_pb2.PartialFailure]
    def __init__(self, key: _Optional[_Union[ApiKey, _Mapping]] = ..., partial_failures: _Optional[_Iterable[_Union[_partial_failure_pb2.PartialFailure, _Mapping]]] = ...) -> None: ...

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Category(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CATEGORY_UNSPECIFIED: _ClassVar[Category]
    CATEGORY_AUTH: _ClassVar[Category]
    CATEGORY_PERMANENT: _ClassVar[Category]
    CATEGORY_TRANSIENT: _ClassVar[Category]
    CATEGORY_TIMEOUT: _ClassVar[Category]
    CATEGORY_QUOTA: _ClassVar[Category]
CATEGORY_UNSPECIFIED: Category
CATEGORY_AUTH: Category
CATEGORY_PERMANENT: Category
CATEGORY_TRANSIENT: Category
CATEGORY_TIMEOUT: Category
CATEGORY_QUOTA: Category

class PartialFailure(_message.Message):
    __slots__ = ("namespace", "document_id", "batch_index", "action_id", "category", "error_code", "message", "retryable", "retry_after_ms", "structured_data")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_DATA_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    document_id: str
    batch_index: int
    action_id: str
    category: Category
    error_code: str
    message: str
    retryable: bool
    retry_after_ms: int
    structured_data: _struct_pb2.Struct
    def __init__(self, namespace: _Optional[str] = ..., document_id: _Optional[str] = ..., batch_index: _Optional[int] = ..., action_id: _Optional[str] = ..., category: _Optional[_Union[Category, str]] = ..., error_code: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ..., retry_after_ms: _Optional[int] = ..., structured_data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

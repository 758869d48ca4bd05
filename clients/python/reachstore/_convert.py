"""Protobuf messages <-> SDK models: the one place that knows both shapes (storage and
keys here; reach and audit in ``_convert_reach`` and ``_convert_audit``).

Both clients and both transports build their requests and read their responses through
these functions - the REST transport parses JSON into the same protobuf messages first -
so a model means the same thing whichever way it travelled. Enum numbers become the
lowercase words the REST bridge prints, with the same rule (the enum's UPPER_SNAKE name
is the prefix dropped).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, cast

from google.protobuf import struct_pb2
from google.protobuf.descriptor import EnumDescriptor

from reachstore._models import (
    ApiKey,
    BatchMeta,
    BatchResponse,
    BatchResult,
    Document,
    DocumentInput,
    Failure,
    Namespace,
    QueryMeta,
    SearchRequest,
    SearchResponse,
    SearchResult,
    Task,
)
from reachstore.admin.v1 import key_service_pb2 as key_pb2
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb2
from reachstore.query.v1 import query_service_pb2 as query_pb2

# --- enums --------------------------------------------------------------------------------


def _upper_snake(camel: str) -> str:
    # The bridge's rule: "TaskState" -> "TASK_STATE", "HTTPStatus" -> "HTTP_STATUS".
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", camel).upper()


@functools.cache
def enum_tables(enum: EnumDescriptor) -> tuple[dict[int, str], dict[str, int]]:
    """(number -> word, word -> number) for one enum, e.g. CATEGORY_PERMANENT <-> permanent."""
    prefix = _upper_snake(enum.name) + "_"
    words = {value.number: value.name.removeprefix(prefix).lower() for value in enum.values}
    return words, {word: number for number, word in words.items()}


def enum_word(enum: EnumDescriptor, number: int) -> str:
    """The lowercase word of an enum value. A number this SDK does not know (sent by a
    newer server) comes back as its decimal string rather than being hidden."""
    return enum_tables(enum)[0].get(number, str(number))


def enum_number(enum: EnumDescriptor, word: str) -> int:
    """The enum number of a lowercase word; ValueError naming the valid words otherwise."""
    table = enum_tables(enum)[1]
    if word not in table:
        valid = sorted(w for w in table if w != "unspecified")
        raise ValueError(f"{word!r} is not a valid {enum.name}; use one of {valid}")
    return table[word]


CATEGORY = pf_pb2.Category.DESCRIPTOR
TASK_STATE = ingest_pb2.TaskState.DESCRIPTOR
TASK_PHASE = ingest_pb2.TaskPhase.DESCRIPTOR
HINT = ingest_pb2.AgentDecisionHint.DESCRIPTOR
OUTCOME = ingest_pb2.DocumentOutcome.DESCRIPTOR
ON_DUPLICATE = ingest_pb2.OnDuplicate.DESCRIPTOR


# --- Struct -> plain Python ------------------------------------------------------------------


def _value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return struct_to_dict(value.struct_value)
    if kind == "list_value":
        return [_value(item) for item in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        # Struct stores every number as a double. Limits and counts were sent as integers,
        # and the REST bridge gives them back as integers: do the same, so `== 100` holds
        # whichever transport answered.
        if number.is_integer() and abs(number) <= 2**53:
            return int(number)
        return number
    if kind in ("string_value", "bool_value"):
        return getattr(value, kind)
    return None


def struct_to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A ``google.protobuf.Struct`` as a plain dict (nested Structs and lists included)."""
    return {key: _value(item) for key, item in struct.fields.items()}


def dict_to_struct(data: Mapping[str, Any] | None, what: str) -> struct_pb2.Struct:
    """A plain mapping as a Struct; ``what`` names it in the error for a value JSON
    cannot hold."""
    struct = struct_pb2.Struct()
    try:
        struct.update(dict(data or {}))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must hold JSON values only: {exc}") from exc
    return struct


# --- responses -> models -----------------------------------------------------------------------


def failure_from_pb(failure: pf_pb2.PartialFailure) -> Failure:
    return Failure(
        category=enum_word(CATEGORY, failure.category),
        error_code=failure.error_code,
        message=failure.message,
        retryable=failure.retryable,
        retry_after_ms=failure.retry_after_ms if failure.HasField("retry_after_ms") else None,
        structured_data=struct_to_dict(failure.structured_data),
        namespace=failure.namespace,
        document_id=failure.document_id,
        batch_index=failure.batch_index if failure.HasField("batch_index") else None,
        action_id=failure.action_id,
    )


def search_response_from_pb(
    response: query_pb2.QueryResponse, request: SearchRequest | None = None
) -> SearchResponse:
    meta = response.meta
    return SearchResponse(
        results=[
            SearchResult(
                namespace=r.namespace,
                document_id=r.document_id,
                chunk_index=r.chunk_index,
                text=r.text,
                score=r.score,
                metadata=dict(r.metadata),
            )
            for r in response.results
        ],
        meta=QueryMeta(
            coverage_ratio=meta.coverage_ratio,
            namespaces_queried=list(meta.namespaces_queried),
            namespaces_succeeded=list(meta.namespaces_succeeded),
            namespaces_failed=[failure_from_pb(f) for f in meta.namespaces_failed],
        ),
        request=request,
    )


def namespace_from_pb(namespace: ingest_pb2.Namespace) -> Namespace:
    return Namespace(
        name=namespace.name,
        embedding_model=namespace.embedding_model,
        dimension=namespace.dimension,
        document_count=namespace.document_count,
        chunk_count=namespace.chunk_count,
        created_at=namespace.created_at,
    )


def document_from_pb(document: query_pb2.Document) -> Document:
    return Document(
        namespace=document.namespace,
        document_id=document.document_id,
        text=document.text,
        metadata=dict(document.metadata),
        chunk_count=document.chunk_count,
        content_sha256=document.content_sha256,
        updated_at=document.updated_at,
    )


def task_from_pb(task: ingest_pb2.Task) -> Task:
    return Task(
        task_id=task.task_id,
        namespace=task.namespace,
        document_id=task.document_id,
        state=enum_word(TASK_STATE, task.state),
        phase=enum_word(TASK_PHASE, task.phase),
        percent=task.percent,
        agent_decision_hint=enum_word(HINT, task.agent_decision_hint),
        poll_after_ms=task.poll_after_ms if task.HasField("poll_after_ms") else None,
        error=failure_from_pb(task.error) if task.HasField("error") else None,
        created_at=task.created_at,
        updated_at=task.updated_at,
    )


def batch_response_from_pb(response: ingest_pb2.BatchCreateDocumentsResponse) -> BatchResponse:
    failed = [failure_from_pb(f) for f in response.meta.failed]
    by_index = {f.batch_index: f for f in failed if f.batch_index is not None}
    return BatchResponse(
        results=[
            BatchResult(
                batch_index=r.batch_index,
                document_id=r.document_id,
                outcome=enum_word(OUTCOME, r.outcome),
                task_id=r.task_id or None,
                failure=by_index.get(r.batch_index),
            )
            for r in response.results
        ],
        meta=BatchMeta(coverage_ratio=response.meta.coverage_ratio, failed=failed),
    )


# --- arguments -> requests ------------------------------------------------------------------------


def namespaces_arg(namespaces: Iterable[str]) -> list[str]:
    """The namespaces of a search as a list. A bare string is refused: iterating it would
    search one namespace per character, and the server refuses the singular field too."""
    if isinstance(namespaces, (str, bytes)):
        raise TypeError(
            f"namespaces must be a list of names, not a single string; "
            f"pass [{namespaces!r}] to search one namespace"
        )
    names = list(namespaces)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"namespace names must be str, got {type(name).__name__}")
    return names


def search_request(
    namespaces: Iterable[str],
    query: str,
    top_k: int,
    filter: Mapping[str, str] | None,
    timeout_ms: int | None,
    allow_partial: bool | None,
) -> SearchRequest:
    """The arguments of a search, checked, as the model kept on its answer."""
    return SearchRequest(
        namespaces=namespaces_arg(namespaces),
        query=query,
        top_k=top_k,
        filter=dict(filter or {}),
        timeout_ms=timeout_ms or None,
        allow_partial=allow_partial,
    )


def query_request_pb(search: SearchRequest) -> query_pb2.QueryRequest:
    request = query_pb2.QueryRequest(
        namespaces=search.namespaces,
        query=search.query,
        top_k=search.top_k,
        filter=search.filter,
        timeout_ms=search.timeout_ms or 0,
    )
    # Left unset when None so the server's default (true) applies.
    if search.allow_partial is not None:
        request.allow_partial = search.allow_partial
    return request


def query_request(
    namespaces: Iterable[str],
    query: str,
    top_k: int,
    filter: Mapping[str, str] | None,
    timeout_ms: int | None,
    allow_partial: bool | None,
) -> query_pb2.QueryRequest:
    return query_request_pb(
        search_request(namespaces, query, top_k, filter, timeout_ms, allow_partial)
    )


_DOCUMENT_KEYS = frozenset({"text", "document_id", "metadata"})


def document_input_to_pb(document: DocumentInput | Mapping[str, Any]) -> ingest_pb2.DocumentInput:
    """A DocumentInput (or a dict with the same keys) as its proto. Unknown dict keys are
    refused here: silently dropping a misspelt ``metdata`` would store the wrong thing."""
    if isinstance(document, DocumentInput):
        text, document_id, metadata = document.text, document.document_id, document.metadata
    elif isinstance(document, Mapping):
        unknown = set(document) - _DOCUMENT_KEYS
        if unknown:
            raise ValueError(
                f"unknown document keys {sorted(unknown)}; allowed: {sorted(_DOCUMENT_KEYS)}"
            )
        if "text" not in document:
            raise ValueError("a document needs a 'text'")
        text = document["text"]
        document_id = document.get("document_id")
        metadata = document.get("metadata")
    else:
        raise TypeError(
            f"a document must be a DocumentInput or a dict, got {type(document).__name__}"
        )
    return ingest_pb2.DocumentInput(
        document_id=document_id or "", text=text, metadata=dict(metadata or {})
    )


def on_duplicate_to_pb(word: str) -> ingest_pb2.OnDuplicate:
    """``"error"``, ``"skip"`` or ``"overwrite"`` as the OnDuplicate number."""
    if word == "unspecified":
        raise ValueError("on_duplicate must be 'error', 'skip' or 'overwrite'")
    return cast(ingest_pb2.OnDuplicate, enum_number(ON_DUPLICATE, word))


def enum_arg(enum: EnumDescriptor, word: str, what: str) -> int:
    """An argument given as a lowercase word (``"optional"``), as its enum number; the
    ValueError names the argument and the words it takes. The proto name
    (``"REQUIREMENT_OPTIONAL"``) is taken too, as the JSON API takes it, so a request
    body written for the REST bridge reads the same here."""
    value = enum.values_by_name.get(word) if isinstance(word, str) else None
    if value is not None and value.number != 0:
        return int(value.number)
    if word == "unspecified":
        valid = sorted(w for w in enum_tables(enum)[1] if w != "unspecified")
        raise ValueError(f"{what} must be one of {valid}")
    try:
        return enum_number(enum, word)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def strings_arg(values: Iterable[str] | None, what: str) -> list[str]:
    """A list of strings; a bare string is refused (it would become one item per letter)."""
    if values is None:
        return []
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{what} must be a list of strings, not a single string")
    return [str(v) for v in values]


# --- keys -------------------------------------------------------------------------------------


def api_key_from_pb(key: key_pb2.ApiKey) -> ApiKey:
    return ApiKey(
        key_id=key.key_id,
        tenant=key.tenant,
        name=key.name,
        scopes=list(key.scopes),
        namespaces=list(key.namespaces),
        channels=list(key.channels),
        groups=list(key.groups),
        created_at=key.created_at,
        expires_at=key.expires_at,
        revoked_at=key.revoked_at,
    )

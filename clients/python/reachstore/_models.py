"""The SDK's value types: frozen dataclasses, free of protobuf and of any transport.

Enum values are the lowercase words the REST bridge prints (``"permanent"``,
``"completed"``, ``"done_fetch_doc"``), so code written against the gRPC client reads the
same as code written against JSON. Absent optional numbers are ``None``, never 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

# Task states after which nothing more will happen to a task.
TERMINAL_TASK_STATES = frozenset({"completed", "failed", "cancelled"})


@dataclasses.dataclass(frozen=True)
class Failure(Mapping[str, Any]):
    """One part of a request that did not succeed (a ``PartialFailure``).

    Readable both as attributes (``failure.retryable``) and as a read-only mapping
    (``failure["retryable"]``), because agents and examples written against the JSON API
    index it like a dict. Decide from ``category`` and ``retryable``, never from
    ``message``.
    """

    category: str
    error_code: str
    message: str
    retryable: bool
    # None when the failure is not retryable (the server leaves the field out).
    retry_after_ms: int | None
    # hash=False: a dict cannot be hashed, and two failures that agree on everything else
    # may still be kept in a set.
    structured_data: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    # Exactly one locating field names the failed part; the others stay empty / None.
    namespace: str = ""
    document_id: str = ""
    batch_index: int | None = None
    action_id: str = ""

    # --- Mapping protocol over the field names ---------------------------------------

    def __getitem__(self, key: str) -> Any:
        if key not in _FAILURE_KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_FAILURE_KEYS)

    def __len__(self) -> int:
        return len(_FAILURE_KEYS)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict in the JSON API's shape (structured_data copied)."""
        out = {key: getattr(self, key) for key in _FAILURE_KEYS}
        out["structured_data"] = dict(self.structured_data)
        return out


# JSON key order of a PartialFailure: locating fields first, as the proto declares them.
_FAILURE_KEYS: tuple[str, ...] = (
    "namespace",
    "document_id",
    "batch_index",
    "action_id",
    "category",
    "error_code",
    "message",
    "retryable",
    "retry_after_ms",
    "structured_data",
)


# --- query -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """One chunk of a stored document that answers the question."""

    namespace: str
    document_id: str
    chunk_index: int
    text: str
    score: float
    metadata: dict[str, str] = dataclasses.field(default_factory=dict, hash=False)


@dataclasses.dataclass(frozen=True)
class QueryMeta:
    """How complete an answer is. Below 1.0 means some namespaces are missing from it."""

    coverage_ratio: float
    namespaces_queried: list[str]
    namespaces_succeeded: list[str]
    namespaces_failed: list[Failure]

    @property
    def complete(self) -> bool:
        """True when every queried namespace answered."""
        return not self.namespaces_failed and self.coverage_ratio >= 1.0


@dataclasses.dataclass(frozen=True)
class SearchRequest:
    """What a search asked, kept on its answer so that ``retry_failed`` can ask again
    for exactly the namespaces that may answer now."""

    namespaces: list[str]
    query: str
    top_k: int = 10
    filter: dict[str, str] = dataclasses.field(default_factory=dict, hash=False)
    # Server-side budget per namespace; None means the server's default.
    timeout_ms: int | None = None
    # None leaves the server's default (true) in force.
    allow_partial: bool | None = None


@dataclasses.dataclass(frozen=True)
class SearchResponse:
    """The merged answer of a search: results best first, plus its completeness.

    ``request`` is what was asked (None for an answer built by hand); it takes no part
    in comparisons, so two answers are equal when they say the same thing.
    """

    results: list[SearchResult]
    meta: QueryMeta
    request: SearchRequest | None = dataclasses.field(default=None, compare=False, repr=False)


# --- namespaces and documents ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Namespace:
    """A named set of documents searched together, bound to one embedding model."""

    name: str
    embedding_model: str
    dimension: int
    document_count: int
    chunk_count: int
    # RFC 3339 UTC, exactly as the server sent it.
    created_at: str


@dataclasses.dataclass(frozen=True)
class Document:
    """A stored document. ``text`` is empty in listings; fetch the document to read it."""

    namespace: str
    document_id: str
    text: str
    metadata: dict[str, str] = dataclasses.field(hash=False)
    chunk_count: int
    content_sha256: str
    # RFC 3339 UTC, when the current version became searchable.
    updated_at: str


@dataclasses.dataclass(frozen=True)
class DocumentInput:
    """A document to submit. An empty ``document_id`` lets the server pick one."""

    text: str
    document_id: str | None = None
    metadata: Mapping[str, str] | None = None


# --- tasks --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Task:
    """Progress of the asynchronous ingestion of one document.

    ``agent_decision_hint`` says what to do next: ``poll_again`` (after
    ``poll_after_ms``), ``done_fetch_doc``, ``inspect_error_code`` (see ``error``) or
    ``stop``.
    """

    task_id: str
    namespace: str
    document_id: str
    state: str
    # "unspecified" when not processing (queued or finished).
    phase: str
    percent: int
    agent_decision_hint: str
    poll_after_ms: int | None
    error: Failure | None
    created_at: str
    updated_at: str

    @property
    def done(self) -> bool:
        """True once the task is completed, failed or cancelled."""
        return self.state in TERMINAL_TASK_STATES


# --- batches --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BatchResult:
    """What happened to one document of a batch: ``accepted``, ``skipped`` or ``failed``.

    ``failure`` is the matching entry of ``meta.failed`` for a failed document, joined here
    by batch index so callers need not search for it.
    """

    batch_index: int
    document_id: str
    outcome: str
    # None unless the document was accepted.
    task_id: str | None
    failure: Failure | None = None


@dataclasses.dataclass(frozen=True)
class BatchMeta:
    """Completeness of a batch: accepted-or-skipped over submitted, and what was refused."""

    coverage_ratio: float
    failed: list[Failure]


@dataclasses.dataclass(frozen=True)
class BatchResponse:
    """One result per submitted document, in request order, plus the batch's completeness."""

    results: list[BatchResult]
    meta: BatchMeta


# --- keys -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ApiKey:
    """An API key as stored: everything but its secret. Times are RFC 3339 UTC; an empty
    ``expires_at`` never expires, an empty ``revoked_at`` is not revoked."""

    key_id: str
    tenant: str
    name: str
    scopes: list[str]
    # Name patterns (``*``, ``?``); empty means every namespace / channel of the tenant.
    namespaces: list[str]
    channels: list[str]
    groups: list[str]
    created_at: str
    expires_at: str
    revoked_at: str

    @property
    def revoked(self) -> bool:
        return bool(self.revoked_at)


@dataclasses.dataclass(frozen=True)
class CreatedKey:
    """A new key and its secret, which is shown only this once (and never in ``repr``,
    so it does not end up in logs by accident)."""

    key: ApiKey
    secret: str = dataclasses.field(repr=False)

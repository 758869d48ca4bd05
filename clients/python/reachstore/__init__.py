"""reachstore Python SDK: typed clients for every service of a reachstore system.

::

    from reachstore import Client

    with Client.local() as client:              # or Client.rest("http://127.0.0.1:8420")
        resp = client.search(["policy", "orders"], question)
        if resp.meta.coverage_ratio < 1:
            for failed in resp.meta.namespaces_failed or []:
                if failed["retryable"]:
                    retry_later(failed["namespace"], wait_ms=failed["retry_after_ms"] or 1000)
                else:
                    note_missing(failed["namespace"], failed["category"])
        answer_with(resp.results)

``Client`` blocks, ``AsyncClient`` is the same for asyncio; both speak gRPC or, through
``.rest(...)``, the REST bridge. Everything public is re-exported here; the
``_``-prefixed modules are private. The generated protobuf packages
(``reachstore.common.v1`` etc.) live beside them.
"""

from reachstore._async_client import AsyncClient
from reachstore._audit_models import AppendResult, AuditEvent, ChainBreak, Checkpoint, VerifyResult
from reachstore._client import Client
from reachstore._errors import (
    AlreadyExistsError,
    AuthError,
    DeadlineError,
    InvalidArgumentError,
    NotFoundError,
    PermanentError,
    QuotaError,
    ReachstoreError,
    TaskWaitTimeoutError,
    TransientError,
)
from reachstore._models import (
    ApiKey,
    BatchMeta,
    BatchResponse,
    BatchResult,
    CreatedKey,
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
from reachstore._reach_models import (
    ActionInput,
    CancelResult,
    Channel,
    HistoryEntry,
    ReachAction,
    ReachResult,
    ReachTask,
    Receipt,
    Resolution,
    UnknownReview,
    UnknownReviewEntry,
    UnknownReviewGroup,
)
from reachstore._retry import RetryPolicy
from reachstore._tls import Tls

__all__ = [
    "ActionInput",
    "AlreadyExistsError",
    "ApiKey",
    "AppendResult",
    "AsyncClient",
    "AuditEvent",
    "AuthError",
    "BatchMeta",
    "BatchResponse",
    "BatchResult",
    "CancelResult",
    "ChainBreak",
    "Channel",
    "Checkpoint",
    "Client",
    "CreatedKey",
    "DeadlineError",
    "Document",
    "DocumentInput",
    "Failure",
    "HistoryEntry",
    "InvalidArgumentError",
    "Namespace",
    "NotFoundError",
    "PermanentError",
    "QueryMeta",
    "QuotaError",
    "ReachAction",
    "ReachResult",
    "ReachTask",
    "ReachstoreError",
    "Receipt",
    "UnknownReview",
    "UnknownReviewEntry",
    "UnknownReviewGroup",
    "Resolution",
    "RetryPolicy",
    "SearchRequest",
    "SearchResponse",
    "SearchResult",
    "Task",
    "TaskWaitTimeoutError",
    "Tls",
    "TransientError",
    "VerifyResult",
]

"""reachstore Python SDK: a typed, synchronous gRPC client for a reachstore system.

::

    from reachstore import Client

    with Client.local() as client:
        resp = client.search(["policy", "orders"], question)
        if resp.meta.coverage_ratio < 1:
            for failed in resp.meta.namespaces_failed or []:
                if failed["retryable"]:
                    retry_later(failed["namespace"], wait_ms=failed["retry_after_ms"] or 1000)
                else:
                    note_missing(failed["namespace"], failed["category"])
        answer_with(resp.results)

Everything public is re-exported here; the ``_``-prefixed modules are private. The
generated protobuf packages (``reachstore.common.v1`` etc.) live beside them.
"""

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
    BatchMeta,
    BatchResponse,
    BatchResult,
    Document,
    DocumentInput,
    Failure,
    Namespace,
    QueryMeta,
    SearchResponse,
    SearchResult,
    Task,
)

__all__ = [
    "AlreadyExistsError",
    "AuthError",
    "BatchMeta",
    "BatchResponse",
    "BatchResult",
    "Client",
    "DeadlineError",
    "Document",
    "DocumentInput",
    "Failure",
    "InvalidArgumentError",
    "Namespace",
    "NotFoundError",
    "PermanentError",
    "QueryMeta",
    "QuotaError",
    "ReachstoreError",
    "SearchResponse",
    "SearchResult",
    "Task",
    "TaskWaitTimeoutError",
    "TransientError",
]

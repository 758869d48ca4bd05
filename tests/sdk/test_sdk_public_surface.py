"""The SDK's public names are a promise: adding or removing one is a deliberate change."""

from __future__ import annotations

import reachstore

PUBLIC = {
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
}


def test_the_package_root_exports_exactly_the_public_names() -> None:
    assert set(reachstore.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(reachstore, name).__module__.startswith("reachstore._")

"""The SDK's public names are a promise: adding or removing one is a deliberate change."""

from __future__ import annotations

import inspect

import reachstore
from reachstore import AsyncClient, Client

PUBLIC = {
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
}

# One method per operation, on both clients (a CLI and agents are written against these).
OPERATIONS = {
    "search",
    "retry_failed",
    "create_namespace",
    "get_namespace",
    "list_namespaces",
    "delete_namespace",
    "add_document",
    "add_documents",
    "get_document",
    "list_documents",
    "delete_document",
    "get_task",
    "cancel_task",
    "wait_for_task",
    "create_key",
    "list_keys",
    "current_key",
    "revoke_key",
    "submit_task",
    "reach",
    "get_reach_task",
    "wait_for_reach_task",
    "list_reach_tasks",
    "get_action",
    "cancel_action",
    "resolve_action",
    "list_channels",
    "unknown_review",
    "list_events",
    "get_event",
    "verify_audit",
    "get_checkpoint",
    "append_events",
}
LISTINGS = {name for name in OPERATIONS if name.startswith("list_") and name != "list_channels"}


def _public_methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, inspect.isfunction) if name[0] != "_"}


def test_the_package_root_exports_exactly_the_public_names() -> None:
    assert set(reachstore.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(reachstore, name).__module__.startswith("reachstore._")


def test_both_clients_have_every_operation_with_the_same_signature() -> None:
    assert _public_methods(Client) - {"close"} == OPERATIONS
    assert _public_methods(AsyncClient) - {"close"} == OPERATIONS
    for name in OPERATIONS:
        sync, aio = getattr(Client, name), getattr(AsyncClient, name)
        assert inspect.signature(sync).parameters == inspect.signature(aio).parameters, name
        # Listings are async iterators; everything else is a coroutine.
        assert inspect.iscoroutinefunction(aio) is (name not in LISTINGS), name
    for factory in ("local", "rest"):
        assert inspect.signature(getattr(Client, factory)).parameters == (
            inspect.signature(getattr(AsyncClient, factory)).parameters
        )


def test_the_reach_methods_have_the_names_and_arguments_callers_rely_on() -> None:
    def params(name: str) -> list[str]:
        return list(inspect.signature(getattr(Client, name)).parameters)[1:]

    assert params("submit_task")[:6] == [
        "entity_id",
        "actions",
        "idempotency_key",
        "logical_time",
        "validate_only",
        "trace_id",
    ]
    assert params("reach")[:3] == ["action", "entity_id", "idempotency_key"]
    assert params("get_reach_task")[:3] == ["task_id", "wait_ms", "known_version"]
    assert params("wait_for_reach_task") == ["task_id", "timeout"]
    assert params("list_reach_tasks")[:4] == ["state", "channel", "entity_id", "page_size"]
    assert params("resolve_action")[:3] == ["action_id", "outcome", "note"]
    assert params("verify_audit")[:4] == ["tenant", "all_tenants", "from_seq", "to_seq"]
    assert params("get_checkpoint")[:1] == ["tenant"]

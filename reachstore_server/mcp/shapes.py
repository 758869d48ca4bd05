"""SDK results as a tool's ``structuredContent`` (with the ``outputSchema`` each follows),
and the one line of text beside it that says what is missing.

The structured shapes are the REST API's: a failure is the PartialFailure object every
interface prints (``category``, ``error_code``, ``retryable``, ``retry_after_ms``,
``structured_data``, and which part failed); a query's completeness is its ``meta``. A
model that reads only text still sees what is missing: the text's first line is the
coverage note ("2 of 3 namespaces answered; orders timed out, retry after 1.5 s").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reachstore import (
    BatchResponse,
    Failure,
    ReachAction,
    ReachstoreError,
    ReachTask,
    Receipt,
    SearchResponse,
    Task,
)

CATEGORIES = ["auth", "permanent", "transient", "timeout", "quota", "unspecified"]

FAILURE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A PartialFailure: which part failed, what kind of problem, and whether "
    "and when to retry. Decide from category and retryable, never from message.",
    "required": ["category", "error_code", "message", "retryable", "retry_after_ms"],
    "properties": {
        "namespace": {"type": "string"},
        "document_id": {"type": "string"},
        "batch_index": {"type": ["integer", "null"]},
        "action_id": {"type": "string"},
        "category": {"type": "string", "enum": CATEGORIES},
        "error_code": {"type": "string"},
        "message": {"type": "string"},
        "retryable": {"type": "boolean"},
        "retry_after_ms": {"type": ["integer", "null"]},
        "structured_data": {"type": "object"},
    },
}

_NOTE = {"type": "string", "description": "One line saying what is missing, if anything."}
_FAILURE_OR_NULL = {"anyOf": [FAILURE_SCHEMA, {"type": "null"}]}


def _obj(required: Sequence[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": properties}


QUERY_OUTPUT = _obj(
    ["results", "meta", "coverage_note"],
    results={
        "type": "array",
        "items": _obj(
            ["namespace", "document_id", "chunk_index", "text", "score"],
            namespace={"type": "string"},
            document_id={"type": "string"},
            chunk_index={"type": "integer"},
            text={"type": "string"},
            score={"type": "number"},
            metadata={"type": "object", "additionalProperties": {"type": "string"}},
        ),
    },
    meta=_obj(
        ["coverage_ratio", "namespaces_queried", "namespaces_succeeded", "namespaces_failed"],
        coverage_ratio={"type": "number", "minimum": 0, "maximum": 1},
        namespaces_queried={"type": "array", "items": {"type": "string"}},
        namespaces_succeeded={"type": "array", "items": {"type": "string"}},
        namespaces_failed={"type": "array", "items": FAILURE_SCHEMA},
    ),
    coverage_note=_NOTE,
)

INGEST_OUTPUT = _obj(
    ["results", "meta", "coverage_note"],
    results={
        "type": "array",
        "items": _obj(
            ["batch_index", "document_id", "outcome", "task_id"],
            batch_index={"type": "integer"},
            document_id={"type": "string"},
            outcome={"type": "string", "enum": ["accepted", "skipped", "failed"]},
            task_id={"type": ["string", "null"]},
            failure=_FAILURE_OR_NULL,
        ),
    },
    meta=_obj(
        ["coverage_ratio", "failed"],
        coverage_ratio={"type": "number", "minimum": 0, "maximum": 1},
        failed={"type": "array", "items": FAILURE_SCHEMA},
    ),
    coverage_note=_NOTE,
)

RECEIPT_SCHEMA = _obj(
    ["attempt", "operation", "status_code", "outcome"],
    attempt={"type": "integer"},
    operation={"type": "string"},
    external_id={"type": "string"},
    status_code={"type": "integer"},
    snippet={"type": "string"},
    duration_ms={"type": "integer"},
    outcome={"type": "string"},
    created_at={"type": "string"},
)

ACTION_SCHEMA = _obj(
    ["action_id", "channel", "state", "idempotency_key", "attempts", "failure", "receipts"],
    action_id={"type": "string"},
    name={"type": "string"},
    channel={"type": "string"},
    action_type={"type": "string"},
    state={"type": "string"},
    idempotency_key={"type": "string"},
    attempts={"type": "integer"},
    failure=_FAILURE_OR_NULL,
    failure_kind={"type": "string"},
    receipts={"type": "array", "items": RECEIPT_SCHEMA},
    last_reason={"type": "string"},
)

REACH_HINTS = ["poll_again", "done", "inspect_error_code", "wait_for_operator"]

REACH_TOOL_OUTPUT = _obj(
    [
        "task_id",
        "action_id",
        "channel",
        "state",
        "idempotency_key",
        "request_key",
        "deduplicated",
    ],
    task_id={"type": "string"},
    action_id={"type": "string"},
    channel={
        "type": "string",
        "description": "The channel the action is on. An earlier action of the same type, "
        "entity and key parameters in the window is found whichever channel it went "
        "through, so this can differ from the tool's own channel.",
    },
    state={"type": "string"},
    idempotency_key={
        "type": "string",
        "description": "The action's key: the same intent always has the same one.",
    },
    request_key={
        "type": "string",
        "description": "The key this call derived from its arguments and sent with the task.",
    },
    deduplicated={
        "type": "boolean",
        "description": "True when this call found the action an earlier call had reserved.",
    },
    receipt={"anyOf": [RECEIPT_SCHEMA, {"type": "null"}]},
    failure=_FAILURE_OR_NULL,
    agent_decision_hint={"type": "string", "enum": REACH_HINTS},
    status_note=_NOTE,
)

REACH_STATUS_OUTPUT = _obj(
    ["task_id", "state", "agent_decision_hint", "actions", "partial_failures"],
    task_id={"type": "string"},
    entity_id={"type": "string"},
    state={"type": "string"},
    agent_decision_hint={"type": "string", "enum": REACH_HINTS},
    poll_after_ms={"type": ["integer", "null"]},
    version={"type": "integer"},
    actions={"type": "array", "items": ACTION_SCHEMA},
    partial_failures={"type": "array", "items": FAILURE_SCHEMA},
    status_note=_NOTE,
)

TASK_STATUS_OUTPUT = _obj(
    ["kind", "task_id", "state", "agent_decision_hint"],
    kind={"type": "string", "enum": ["ingest", "reach"]},
    task_id={"type": "string"},
    state={"type": "string"},
    agent_decision_hint={"type": "string"},
    poll_after_ms={"type": ["integer", "null"]},
    namespace={"type": "string"},
    document_id={"type": "string"},
    phase={"type": "string"},
    percent={"type": "integer"},
    error=_FAILURE_OR_NULL,
    actions={"type": "array", "items": ACTION_SCHEMA},
    partial_failures={"type": "array", "items": FAILURE_SCHEMA},
    status_note=_NOTE,
)


def failure_dict(failure: Failure) -> dict[str, Any]:
    return failure.to_dict()


def _failure_or_none(failure: Failure | None) -> dict[str, Any] | None:
    return None if failure is None else failure_dict(failure)


def seconds(ms: int) -> str:
    """``1500`` -> ``1.5 s``: how long to wait, as people say it."""
    return f"{ms / 1000:g} s"


def retry_advice(failure: Mapping[str, Any] | Failure) -> str:
    if not failure["retryable"]:
        return "not retryable"
    wait = failure["retry_after_ms"]
    return f"retry after {seconds(wait)}" if wait is not None else "retryable"


def _what_failed(part: str, failure: Failure) -> str:
    if failure.category == "timeout":
        return f"{part} timed out, {retry_advice(failure)}"
    return f"{part} failed ({failure.category} {failure.error_code}), {retry_advice(failure)}"


def coverage_note(answered: int, asked: int, noun: str, failures: Iterable[Failure]) -> str:
    """``2 of 3 namespaces answered; orders timed out, retry after 1.5 s``."""
    verb = "answered" if noun == "namespaces" else "accepted"
    head = f"{answered} of {asked} {noun} {verb}"
    parts = [_what_failed(f.namespace or f.document_id or f"#{f.batch_index}", f) for f in failures]
    return f"{head}; {'; '.join(parts)}" if parts else f"{head}; complete"


# --- query and ingest -------------------------------------------------------------------------


def query_content(response: SearchResponse) -> dict[str, Any]:
    meta = response.meta
    return {
        "results": [dataclasses.asdict(r) for r in response.results],
        "meta": {
            "coverage_ratio": meta.coverage_ratio,
            "namespaces_queried": list(meta.namespaces_queried),
            "namespaces_succeeded": list(meta.namespaces_succeeded),
            "namespaces_failed": [failure_dict(f) for f in meta.namespaces_failed],
        },
        "coverage_note": coverage_note(
            len(meta.namespaces_succeeded),
            len(meta.namespaces_queried),
            "namespaces",
            meta.namespaces_failed,
        ),
    }


def query_text(content: Mapping[str, Any]) -> str:
    lines = [content["coverage_note"]]
    for rank, result in enumerate(content["results"], 1):
        lines.append(
            f"{rank}. [{result['namespace']}/{result['document_id']} #{result['chunk_index']}] "
            f"{result['text']}"
        )
    return "\n".join(lines)


def ingest_content(response: BatchResponse) -> dict[str, Any]:
    taken = [r for r in response.results if r.outcome != "failed"]
    return {
        "results": [
            {
                "batch_index": r.batch_index,
                "document_id": r.document_id,
                "outcome": r.outcome,
                "task_id": r.task_id,
                "failure": _failure_or_none(r.failure),
            }
            for r in response.results
        ],
        "meta": {
            "coverage_ratio": response.meta.coverage_ratio,
            "failed": [failure_dict(f) for f in response.meta.failed],
        },
        "coverage_note": coverage_note(
            len(taken), len(response.results), "documents", response.meta.failed
        ),
    }


def ingest_text(content: Mapping[str, Any]) -> str:
    lines = [content["coverage_note"]]
    for r in content["results"]:
        if r["task_id"]:
            lines.append(f"{r['document_id']}: {r['outcome']}, task {r['task_id']}")
    lines.append("Follow each task with task_status; it is searchable once completed.")
    return "\n".join(lines)


# --- tasks and actions ----------------------------------------------------------------------


def ingest_task_content(task: Task) -> dict[str, Any]:
    content = {
        "kind": "ingest",
        "task_id": task.task_id,
        "state": task.state,
        "agent_decision_hint": task.agent_decision_hint,
        "poll_after_ms": task.poll_after_ms,
        "namespace": task.namespace,
        "document_id": task.document_id,
        "phase": task.phase,
        "percent": task.percent,
        "error": _failure_or_none(task.error),
    }
    advice = f", poll again after {seconds(task.poll_after_ms)}" if task.poll_after_ms else ""
    error = f"; {task.error.error_code} ({task.error.category})" if task.error else ""
    content["status_note"] = (
        f"ingest task {task.state} ({task.percent} %){error}: "
        f"{task.agent_decision_hint}{advice if task.agent_decision_hint == 'poll_again' else ''}"
    )
    return content


def reach_hint(task: ReachTask) -> str:
    """What an agent does next with a reach task, in the words ingest tasks use."""
    if task.state == "succeeded":
        return "done"
    if task.state == "failed":
        return "inspect_error_code"
    if task.settled:
        return "wait_for_operator"  # only a person can move it on (needs_review)
    return "poll_again"


def receipt_dict(receipt: Receipt) -> dict[str, Any]:
    return dataclasses.asdict(receipt)


def action_content(action: ReachAction) -> dict[str, Any]:
    return {
        "action_id": action.action_id,
        "name": action.name,
        "channel": action.channel,
        "action_type": action.action_type,
        "state": action.state,
        "idempotency_key": action.idempotency_key,
        "attempts": action.attempts,
        "failure": _failure_or_none(action.failure),
        "failure_kind": action.failure_kind,
        "receipts": [receipt_dict(r) for r in action.receipts],
        "last_reason": action.history[-1].reason if action.history else "",
    }


def reach_task_content(task: ReachTask, actions: Sequence[ReachAction]) -> dict[str, Any]:
    hint = reach_hint(task)
    states = ", ".join(f"{a.name or a.action_id} {a.state}" for a in actions) or "no actions"
    failures = "; ".join(_what_failed(f.action_id or "action", f) for f in task.partial_failures)
    return {
        "task_id": task.task_id,
        "entity_id": task.entity_id,
        "state": task.state,
        "agent_decision_hint": hint,
        "poll_after_ms": task.poll_after_ms,
        "version": task.version,
        "actions": [action_content(a) for a in actions],
        "partial_failures": [failure_dict(f) for f in task.partial_failures],
        "status_note": f"reach task {task.state} ({states}): {hint}"
        + (f"; {failures}" if failures else ""),
    }


def reach_task_status(task: ReachTask, actions: Sequence[ReachAction]) -> dict[str, Any]:
    """The reach task as ``task_status`` shows it: the fields every task has, plus actions."""
    full = reach_task_content(task, actions)
    return {
        "kind": "reach",
        "task_id": full["task_id"],
        "state": full["state"],
        "agent_decision_hint": full["agent_decision_hint"],
        "poll_after_ms": full["poll_after_ms"],
        "actions": full["actions"],
        "partial_failures": full["partial_failures"],
        "status_note": full["status_note"],
    }


def reach_tool_content(
    task: ReachTask, action: ReachAction, request_key: str, deduplicated: bool
) -> dict[str, Any]:
    hint = reach_hint(task)
    receipt = action.receipts[-1] if action.receipts else None
    which = f"action {action.action_id} on channel {action.channel}"
    found = f"found {which}, reserved by an earlier call" if deduplicated else f"reserved {which}"
    failure = ""
    if action.failure is not None:
        failure = f"; {action.failure.error_code} ({action.failure.category})"
    return {
        "task_id": task.task_id,
        "action_id": action.action_id,
        "channel": action.channel,
        "state": action.state,
        "idempotency_key": action.idempotency_key,
        "request_key": request_key,
        "deduplicated": deduplicated,
        "receipt": None if receipt is None else receipt_dict(receipt),
        "failure": _failure_or_none(action.failure),
        "agent_decision_hint": hint,
        "status_note": f"{found}: {action.state}{failure}; {hint} "
        f"(reach_status with task_id {task.task_id})",
    }


# --- refusals -------------------------------------------------------------------------------


def error_content(error: ReachstoreError) -> dict[str, Any]:
    """A request refused as a whole: the REST API's ``{"error": {...}}`` body."""
    body = failure_dict(error.failure)
    body["details"] = [failure_dict(d) for d in error.details]
    return {"error": body}


def error_text(content: Mapping[str, Any]) -> str:
    error = content["error"]
    lines = [
        f"refused: {error['error_code']} ({error['category']}): {error['message']}; "
        f"{retry_advice(error)}"
    ]
    lines += [
        _what_failed(d.get("namespace") or d.get("document_id") or "part", Failure(**d))
        for d in error["details"]
    ]
    return "\n".join(lines)

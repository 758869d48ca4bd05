"""What each tool does, over the SDK, and the one place its outcome becomes a tool result.

A tool that ran returns ``structuredContent`` (the ``outputSchema`` of its tool) and a
text whose first line says what is missing. A request refused as a whole — by the
services (a bad key, a missing scope, ``INCOMPLETE_RESULT`` with ``allow_partial: false``,
``PARAMS_REJECTED``) or here (an argument outside the tool's schema, as
``INVALID_ARGUMENT`` naming the field) — is ``isError`` with the REST API's error body:
the same code, category and retry advice.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import Any

from mcp_types import CallToolResult, TextContent

from reachstore import (
    ApiKey,
    AsyncClient,
    AuthError,
    DocumentInput,
    Failure,
    InvalidArgumentError,
    NotFoundError,
    PermanentError,
    ReachAction,
    ReachstoreError,
    ReachTask,
)
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.common import errors
from reachstore_server.mcp import catalogue, keying, shapes
from reachstore_server.mcp.catalogue import ArgumentError, ToolSpec


def _ok(content: dict[str, Any], text: Callable[[Mapping[str, Any]], str]) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=text(content))], structured_content=content)


def refused(error: ReachstoreError) -> CallToolResult:
    content = shapes.error_content(error)
    return CallToolResult(
        content=[TextContent(text=shapes.error_text(content))],
        structured_content=content,
        is_error=True,
    )


def _category_word(category: int) -> str:
    return pf_pb2.Category.Name(category).removeprefix("CATEGORY_").lower()


def _failure(spec: errors.ErrorSpec, message: str, data: dict[str, Any]) -> Failure:
    """A failure with the catalogue's code and category (common/errors.py), as the
    services would answer it."""
    return Failure(
        category=_category_word(spec.category),
        error_code=spec.code,
        message=message,
        retryable=False,
        retry_after_ms=None,
        structured_data=data,
    )


def invalid_argument(field: str, rule: str) -> InvalidArgumentError:
    """The catalogue's INVALID_ARGUMENT, as the services answer a bad field."""
    spec = errors.INVALID_ARGUMENT
    return InvalidArgumentError(_failure(spec, f"{field}: {rule}", {"field": field, "rule": rule}))


def auth_malformed() -> AuthError:
    """AUTH_MALFORMED, as the services answer a credential that is not a key."""
    return AuthError(_failure(errors.AUTH_MALFORMED, errors.AUTH_MALFORMED.description, {}))


def internal() -> PermanentError:
    """INTERNAL, with the catalogue's text only."""
    return PermanentError(_failure(errors.INTERNAL, errors.INTERNAL.description, {}))


async def call(
    client: AsyncClient, key: ApiKey, secret: str, spec: ToolSpec, arguments: Mapping[str, Any]
) -> CallToolResult:
    """Runs one tool for the caller ``key`` speaks for; ``secret`` is that key as the
    caller sent it (the idempotency keys' secret, keying.py)."""
    try:
        if spec.channel is not None:
            return await _send(client, key, secret, spec, arguments)
        # Every tool's arguments pass here (or through _send's check), so every integer
        # argument is an int from here on.
        arguments = catalogue.check_arguments(spec.tool.input_schema, arguments)
        handler = _FIXED[spec.name]
        return await handler(client, arguments)
    except ArgumentError as exc:
        return refused(invalid_argument(exc.field, exc.rule))
    except ReachstoreError as exc:
        return refused(exc)


# --- storage ----------------------------------------------------------------------------------


async def _query(client: AsyncClient, args: Mapping[str, Any]) -> CallToolResult:
    response = await client.search(
        args["namespaces"],
        args["question"],
        args.get("top_k", 10),
        filter=args.get("filter"),
        timeout_ms=args.get("timeout_ms"),
        allow_partial=args.get("allow_partial"),
    )
    return _ok(shapes.query_content(response), shapes.query_text)


async def _ingest(client: AsyncClient, args: Mapping[str, Any]) -> CallToolResult:
    if ("document" in args) == ("documents" in args):
        raise ArgumentError("documents", "give either document (one) or documents (a batch)")
    given = [args["document"]] if "document" in args else args["documents"]
    documents = [
        DocumentInput(d["text"], d.get("document_id") or None, d.get("metadata")) for d in given
    ]
    response = await client.add_documents(
        args["namespace"], documents, args.get("on_duplicate", "error")
    )
    return _ok(shapes.ingest_content(response), shapes.ingest_text)


# --- tasks ------------------------------------------------------------------------------------


async def _followed(client: AsyncClient, task: ReachTask, wait_ms: int) -> ReachTask:
    """The task once it settles or ``wait_ms`` passes, long-polling its version."""
    deadline = time.monotonic() + wait_ms / 1000
    while not task.settled:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            break
        task = await client.get_reach_task(
            task.task_id, wait_ms=min(left, catalogue.MAX_WAIT_MS), known_version=task.version
        )
    return task


async def _task_status(client: AsyncClient, args: Mapping[str, Any]) -> CallToolResult:
    kind, task_id, wait_ms = args.get("kind", "auto"), args["task_id"], args.get("wait_ms", 0)
    if kind in ("auto", "ingest"):
        try:
            task = await client.get_task(task_id)
        except NotFoundError:
            if kind == "ingest":
                raise
        else:
            deadline = time.monotonic() + wait_ms / 1000
            while not task.done and task.poll_after_ms is not None:
                pause = min(task.poll_after_ms / 1000, deadline - time.monotonic())
                if pause <= 0:
                    break
                await asyncio.sleep(pause)
                task = await client.get_task(task_id)
            content = shapes.ingest_task_content(task)
            return _ok(content, lambda c: str(c["status_note"]))
    reach_task = await _followed(client, await client.get_reach_task(task_id), wait_ms)
    content = shapes.reach_task_status(reach_task, reach_task.actions)
    return _ok(content, lambda c: str(c["status_note"]))


async def _reach_status(client: AsyncClient, args: Mapping[str, Any]) -> CallToolResult:
    task = await _followed(
        client, await client.get_reach_task(args["task_id"]), args.get("wait_ms", 0)
    )
    actions = [await client.get_action(a.action_id) for a in task.actions]
    return _ok(shapes.reach_task_content(task, actions), lambda c: str(c["status_note"]))


_FIXED = {
    "query": _query,
    "ingest": _ingest,
    "task_status": _task_status,
    "reach_status": _reach_status,
}


# --- reach ------------------------------------------------------------------------------------


def _same_intent(action: ReachAction, args: Mapping[str, Any]) -> bool:
    return action.action_type == args["action_type"] and keying.canonical_json(
        action.params
    ) == keying.canonical_json(args["params"])


async def _earlier_action(
    client: AsyncClient,
    args: Mapping[str, Any],
    request_key: str,
    now: dt.datetime,
    lookback: dt.timedelta,
) -> tuple[ReachTask, ReachAction] | None:
    """The task, and its action, that answered an earlier call of the previous window,
    if that call was made within ``lookback`` of ``now``: a retry comes soon after its
    first call, and an older one is not the call being retried. The earlier call either
    reserved a task with ``request_key``, or was answered with an action another task had
    reserved (the same action type and parameters for the entity, sent by another tool or
    another key of the tenant: the reach service's own key matched), which is the same
    intent on whichever channel it is. Every task of the entity in that time is searched,
    newest first, however many there are."""
    since = now - lookback
    async for task in client.list_reach_tasks(entity_id=args["entity_id"]):
        created = dt.datetime.fromisoformat(task.created_at)
        if created < since:
            break
        if task.idempotency_key == request_key and task.actions:
            return task, task.actions[0]
        for action in task.actions:
            if _same_intent(action, args):
                return task, action
    return None


async def _send(
    client: AsyncClient, key: ApiKey, secret: str, spec: ToolSpec, arguments: Mapping[str, Any]
) -> CallToolResult:
    channel = spec.channel
    assert channel is not None
    # The channel's own schema is the reach service's to check (PARAMS_REJECTED names the
    # field, with the rules in CEL beside it); the arguments around it are checked here.
    outer = dict(spec.tool.input_schema)
    outer["properties"] = {**outer["properties"], "params": {"type": "object"}}
    args = catalogue.check_arguments(outer, arguments)
    if "action_type" not in args and channel.action_types:
        args["action_type"] = channel.action_types[0]
    now = dt.datetime.now(dt.UTC)
    window = channel.window or keying.DEFAULT_WINDOW
    current, previous = keying.keys_for(
        secret, key.tenant, key.key_id, spec.name, args, now, window
    )
    earlier = None
    lookback = keying.lookback(window)
    if previous is not None and lookback is not None:
        earlier = await _earlier_action(client, args, previous, now, lookback)
    if earlier is not None:
        task, found = earlier
        # The key the answering task was reserved with when it is one this call derives;
        # else this window's: the look-back also finds this window's own first call (by
        # its intent), and the previous window's key, which no task holds, was reported
        # for it.
        request_key = previous if previous and task.idempotency_key == previous else current
        deduplicated, action_id = True, found.action_id
    else:
        result = await client.reach(
            {
                "name": args["action_type"],
                "channel": channel.name,
                "action_type": args["action_type"],
                "params": args["params"],
            },
            entity_id=args["entity_id"],
            idempotency_key=current,
        )
        request_key, deduplicated, action_id = current, result.deduplicated, result.action_id
        task = await client.get_reach_task(result.task_id)
    task = await _followed(client, task, args.get("wait_ms", 0))
    action = await client.get_action(action_id)
    content = shapes.reach_tool_content(task, action, request_key, deduplicated)
    return _ok(content, lambda c: str(c["status_note"]))

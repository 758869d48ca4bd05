"""From a submitted task to a ``TaskPlan``: every check, all or nothing, no side effect.

A task is accepted whole or refused whole. Every action is checked (so the caller learns
about all offending actions at once, one detail each): the channel is configured and on
the key's allow-list; the action type is one of the channel's; the parameters fit the
channel's JSON Schema, its CEL rules and the channel's own validate; dependencies name
actions of the same task without cycles. Then each action gets its idempotency key, made
under the deployment's key secret, and the keys an earlier reservation of the same intent
may be stored under (a previous secret's, the legacy form:
``reachstore_server/reach/idempotency.py``).
``validate_only`` stops here, so it runs exactly the checks a real submit runs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from reachstore_server.common import errors, names
from reachstore_server.common.auth import Caller
from reachstore_server.common.timefmt import parse_rfc3339
from reachstore_server.common.tracing import TRACE_RE
from reachstore_server.reach.channels.base import Channel, InvalidParams, Outgoing
from reachstore_server.reach.config import ReachConfig
from reachstore_server.reach.idempotency import KeySecrets, build_key, look_up_keys
from reachstore_server.reach.store import ActionPlan, TaskPlan

MAX_ACTIONS = 50
MAX_PARAMS_BYTES = 64 * 1024
MAX_TEXT = 128
MAX_DETAILS = 50


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """One submitted action, decoded from the request."""

    name: str
    channel: str
    action_type: str
    params: dict[str, Any]
    depends_on: tuple[str, ...]
    required: bool


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    entity_id: str
    idempotency_key: str
    logical_time: str
    trace_id: str
    actions: tuple[ActionSpec, ...]


@dataclasses.dataclass
class _Problem:
    index: int
    name: str
    field: str
    rule: str
    permission: bool = False


def plan_task(
    spec: TaskSpec,
    caller: Caller,
    config: ReachConfig,
    channels: Mapping[str, Channel],
    metadata_trace: str,
    now: dt.datetime,
    *,
    key_secrets: KeySecrets,
) -> TaskPlan:
    """The reservable plan, or a ``ReachstoreError`` naming every problem."""
    entity = _printable("entity_id", spec.entity_id, required=True)
    caller_key = _printable("idempotency_key", spec.idempotency_key, required=False)
    logical_time = _logical_time(spec.logical_time, now, config.logical_time_tolerance_s)
    trace_id = _trace_id(spec.trace_id, metadata_trace)
    if not spec.actions:
        raise errors.invalid("actions", f"list 1 to {MAX_ACTIONS} actions")
    if len(spec.actions) > MAX_ACTIONS:
        raise errors.over_limit(
            errors.INVALID_ARGUMENT, "actions", "actions", MAX_ACTIONS, len(spec.actions)
        )
    for i, action in enumerate(spec.actions):
        # Each entry names another action of the task, so more than that is never valid.
        names.check_count(action.depends_on, f"actions[{i}].depends_on", MAX_ACTIONS, "names")
    problems: list[_Problem] = []
    _check_graph(spec.actions, problems)
    plans: list[ActionPlan] = []
    seen_keys: dict[str, str] = {}
    for i, action in enumerate(spec.actions):
        before = len(problems)
        _check_action(i, action, caller, entity, config, channels, problems)
        if len(problems) > before:
            continue
        cfg = config.channels[action.channel]
        intent = (
            caller.tenant,
            entity,
            action.action_type,
            action.params,
            cfg.idempotency_params,
            logical_time,
            cfg.window,
        )
        try:
            key = build_key(key_secrets.current, *intent)
            earlier = look_up_keys(key_secrets, *intent)
        except (ValueError, TypeError) as exc:  # a value a key cannot hold (NaN, NFC twins)
            problems.append(_Problem(i, action.name, "params", str(exc)))
            continue
        text = str(key)
        if text in seen_keys:
            problems.append(
                _Problem(
                    i,
                    action.name,
                    "",
                    f"repeats action {seen_keys[text]!r} (same type and key parameters)",
                )
            )
            continue
        seen_keys[text] = action.name
        plans.append(
            ActionPlan(
                action.name,
                action.channel,
                action.action_type,
                action.params,
                action.depends_on,
                action.required,
                text,
                key.window,
                earlier,
            )
        )
    if problems:
        raise _rejection(problems)
    return TaskPlan(
        tenant=caller.tenant,
        entity_id=entity,
        caller_key=caller_key or None,
        request_digest=_digest(spec),
        logical_time=logical_time,
        trace_id=trace_id,
        submitted_by=caller.key_id,
        actions=tuple(plans),
    )


def _check_action(
    i: int,
    action: ActionSpec,
    caller: Caller,
    entity: str,
    config: ReachConfig,
    channels: Mapping[str, Channel],
    problems: list[_Problem],
) -> None:
    where = f"actions[{i}]"
    if not names.is_namespace_name(action.name):
        problems.append(
            _Problem(i, action.name, f"{where}.name", f"must be {names.NAMESPACE_RULE}")
        )
    cfg = config.channels.get(action.channel)
    channel = channels.get(action.channel)
    # An unknown channel and one outside the key's allow-list answer alike: a key learns
    # nothing about channels it may not use.
    if cfg is None or channel is None or not caller.may_reach(action.channel):
        problems.append(
            _Problem(
                i,
                action.name,
                f"{where}.channel",
                f"channel {action.channel[:64]!r} is not available to this key; "
                "ListChannels shows the usable ones",
                permission=True,
            )
        )
        return
    if action.action_type not in cfg.action_types:
        problems.append(
            _Problem(
                i,
                action.name,
                f"{where}.action_type",
                f"must be one of {', '.join(cfg.action_types)}",
            )
        )
        return
    size = len(json.dumps(action.params, ensure_ascii=False).encode())
    if size > MAX_PARAMS_BYTES:
        problems.append(
            _Problem(i, action.name, f"{where}.params", f"at most {MAX_PARAMS_BYTES} bytes of JSON")
        )
        return
    violations = cfg.rules.check(
        action.params,
        {"tenant": caller.tenant, "key_id": caller.key_id, "groups": list(caller.groups)},
        {"type": action.action_type, "entity_id": entity, "name": action.name},
    )
    for v in violations:
        field = f"{where}.params" + (f".{v.field}" if v.field else "")
        problems.append(_Problem(i, action.name, field, v.rule))
    if violations:
        return
    try:
        channel.validate(
            Outgoing("", "", action.action_type, action.params, "", caller.tenant, entity)
        )
    except InvalidParams as exc:
        field = f"{where}.params" + (f".{exc.field}" if exc.field else "")
        problems.append(_Problem(i, action.name, field, exc.rule))


def _check_graph(actions: Sequence[ActionSpec], problems: list[_Problem]) -> None:
    """Dependencies must name other actions of the task, once each, without cycles."""
    index: dict[str, int] = {}
    for i, action in enumerate(actions):
        if action.name in index:
            problems.append(
                _Problem(i, action.name, f"actions[{i}].name", "names must be unique in a task")
            )
        index.setdefault(action.name, i)
    for i, action in enumerate(actions):
        if len(set(action.depends_on)) != len(action.depends_on):
            problems.append(
                _Problem(i, action.name, f"actions[{i}].depends_on", "lists a name twice")
            )
        for dep in action.depends_on:
            if dep == action.name or dep not in index:
                problems.append(
                    _Problem(
                        i,
                        action.name,
                        f"actions[{i}].depends_on",
                        f"{dep[:64]!r} is not another action of this task",
                    )
                )
    if problems:
        return
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    graph = {a.name: a.depends_on for a in actions}

    def visit(name: str) -> bool:
        state[name] = 1
        for dep in graph[name]:
            if state.get(dep) == 1 or (dep not in state and visit(dep)):
                return True
        state[name] = 2
        return False

    for action in actions:
        if action.name not in state and visit(action.name):
            i = index[action.name]
            problems.append(
                _Problem(i, action.name, f"actions[{i}].depends_on", "dependencies form a cycle")
            )
            return


def _rejection(problems: list[_Problem]) -> errors.ReachstoreError:
    permission = [p for p in problems if p.permission]
    spec = errors.CHANNEL_NOT_ALLOWED if permission else errors.PARAMS_REJECTED
    shown = (permission or problems)[:MAX_DETAILS]
    details = [
        errors.make_failure(
            spec,
            f"{p.field or p.name}: {p.rule}",
            batch_index=p.index,
            structured_data={"action": p.name, "field": p.field, "rule": p.rule},
        )
        for p in shown
    ]
    first = shown[0]
    return errors.ReachstoreError(
        spec,
        f"{len(shown)} problem(s) in the task's actions; the first: {first.field}: {first.rule}",
        field=first.field or None,
        structured_data={"problems": len(problems)},
        details=details,
    )


def _printable(field: str, value: str, required: bool) -> str:
    if not value:
        if required:
            raise errors.invalid(field, f"required: 1 to {MAX_TEXT} printable characters")
        return ""
    if len(value) > MAX_TEXT or not value.isprintable():
        raise errors.invalid(field, f"1 to {MAX_TEXT} printable characters")
    return value


def _logical_time(text: str, now: dt.datetime, tolerance_s: float) -> dt.datetime:
    """The moment whose window keys the actions: the server's clock, or the caller's
    ``logical_time`` when it lies within ``tolerance_s`` of it. The server owns the window:
    a caller that could name any moment could mint a fresh key (and a second send) for the
    same action by naming another day; within the tolerance a retry that crosses a window
    boundary still names the first attempt's moment and keeps its key."""
    if not text:
        return now
    value = parse_rfc3339(text, "logical_time")
    off = (value - now).total_seconds()
    if abs(off) > tolerance_s:
        raise errors.invalid(
            "logical_time",
            f"must lie within {tolerance_s:g} s of the server's clock "
            f"({now.isoformat().replace('+00:00', 'Z')}; this one is {off:+.0f} s off); "
            "leave it out to use the server's clock",
        )
    return value


def _trace_id(given: str, from_metadata: str) -> str:
    if given:
        if not TRACE_RE.fullmatch(given):
            raise errors.invalid("trace_id", "32 lowercase hex characters (a W3C trace id)")
        return given
    return from_metadata or secrets.token_hex(16)


def _digest(spec: TaskSpec) -> str:
    """What a reused caller key must match: the task's content, not its trace id."""
    content = {
        "entity_id": spec.entity_id,
        "logical_time": spec.logical_time,
        "actions": [dataclasses.asdict(a) for a in spec.actions],
    }
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()

"""`reachstore reach submit|get|action|resolve|channels|unknowns`: reach tasks from the
command line.

A task's actions are given as JSON, one ``--action`` each, or as a file holding the body
of ``POST /api/v1/reach/tasks``; what a task did is printed one action per line, with the
action id an operator needs to resolve it and, for an action that did not succeed, its
error code, category, kind (business or technical) and retry advice. ``unknowns`` is the
weekly UNKNOWN review (``reachstore_server/reach/unknown_review.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reachstore import Client, ReachAction, ReachTask, TaskWaitTimeoutError
from reachstore_server.cli_client import exit_codes
from reachstore_server.cli_client.connection import client_command, positive_float, wrapped
from reachstore_server.cli_client.output import clean, note, plural, print_json, retry_advice, say

DEFAULT_WAIT_S = 60.0
# The task body fields that flags may also give; a flag wins over the file.
TASK_FIELDS = ("entity_id", "idempotency_key", "logical_time", "trace_id")


# --- reading the task ---------------------------------------------------------------------


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise exit_codes.UsageError(f"{where}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise exit_codes.UsageError(f"{where}: must be a JSON object")
    return value


def _action(raw: Mapping[str, Any]) -> dict[str, Any]:
    """An action as the SDK takes it. The REST body spells the requirement as the enum
    name (``REQUIREMENT_OPTIONAL``), which a file copied from the README will do too."""
    action = dict(raw)
    requirement = action.get("requirement")
    if isinstance(requirement, str):
        action["requirement"] = requirement.removeprefix("REQUIREMENT_").lower()
    return action


def read_task(args: argparse.Namespace) -> dict[str, Any]:
    """The task to submit: the file's body (if any), then the flags over it."""
    body: dict[str, Any] = {}
    if args.file:
        where = "stdin" if args.file == "-" else args.file
        try:
            text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        except OSError as exc:
            raise exit_codes.UsageError(f"{where}: {exc.strerror}") from None
        body = _json_object(text, where)
    actions = body.get("actions", [])
    if not isinstance(actions, list) or not all(isinstance(a, dict) for a in actions):
        raise exit_codes.UsageError("actions: must be a list of JSON objects")
    actions += [_json_object(text, "--action") for text in args.action or []]
    if not actions:
        raise exit_codes.UsageError("no actions: give --action JSON (repeatable) or --file")
    task = {field: body.get(field) for field in TASK_FIELDS}
    for field in TASK_FIELDS:
        if getattr(args, field, None):
            task[field] = getattr(args, field)
    if not task["entity_id"]:
        raise exit_codes.UsageError("no entity: give --entity or entity_id in the file")
    task["actions"] = [_action(a) for a in actions]
    return task


# --- printing -------------------------------------------------------------------------------


def action_line(action: ReachAction) -> str:
    attempts = f"  {plural(action.attempts, 'attempt')}" if action.attempts else ""
    # A validated-only task reserved nothing: no id yet, but the key it would use.
    ident = action.action_id or f"key {action.idempotency_key}"
    line = (
        f"  {clean(action.name)}  {ident}  {clean(action.channel)}/"
        f"{clean(action.action_type)}  {action.state}{attempts}"
    )
    if action.resolution:
        line += f"  resolved {action.resolution.outcome}: {clean(action.resolution.note)}"
    failure = action.failure
    if failure is not None:
        kind = f", {action.failure_kind}" if action.failure_kind != "unspecified" else ""
        line += (
            f"  {failure.error_code} ({failure.category}{kind}, {retry_advice(failure)}): "
            f"{clean(failure.message)}"
        )
    return line


def print_task(task: ReachTask) -> None:
    actions = plural(len(task.actions), "action")
    if task.validated_only:
        say(f"valid: nothing reserved; the task would run {actions}")
    else:
        entity = clean(task.entity_id)
        say(
            f"reach task {task.task_id}: {task.state} (entity {entity}, {actions}, "
            f"version {task.version})"
        )
    if task.deduplicated:
        say("  deduplicated: this task had been reserved before; nothing new was reserved")
    for action in task.actions:
        say(action_line(action))
    review = [a for a in task.actions if a.needs_review]
    if review:
        ids = ", ".join(a.action_id for a in review)
        say(f"waiting for review: {ids} (reachstore reach resolve ACTION_ID ...)")


def task_outcome(task: ReachTask) -> int:
    """0 only for a task that succeeded; failed, waiting for review or still running are
    all partial results: the task exists and says what is missing."""
    return exit_codes.COMPLETE if task.state == "succeeded" else exit_codes.PARTIAL


def _show(args: argparse.Namespace, task: ReachTask) -> None:
    if args.json:
        print_json(task)
    else:
        print_task(task)


def _waited(args: argparse.Namespace, client: Client, task_id: str) -> int:
    try:
        task = client.wait_for_reach_task(task_id, timeout=args.wait_timeout)
    except TaskWaitTimeoutError as exc:
        if not isinstance(exc.task, ReachTask):
            raise
        note(f"task {task_id} was still {exc.task.state} after {args.wait_timeout:g} s")
        task = exc.task
    _show(args, task)
    return task_outcome(task)


# --- commands -------------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace, client: Client) -> int:
    task = read_task(args)
    try:
        submitted = client.submit_task(
            task["entity_id"],
            task["actions"],
            idempotency_key=task["idempotency_key"],
            logical_time=task["logical_time"],
            validate_only=args.validate_only,
            trace_id=task["trace_id"],
        )
    except (ValueError, TypeError) as exc:  # the SDK's own checks of the actions' shape
        raise exit_codes.UsageError(f"actions: {exc}") from None
    if args.wait and not submitted.validated_only:
        return _waited(args, client, submitted.task_id)
    _show(args, submitted)
    return exit_codes.COMPLETE


def cmd_get(args: argparse.Namespace, client: Client) -> int:
    if args.wait:
        return _waited(args, client, args.task_id)
    task = client.get_reach_task(args.task_id)
    _show(args, task)
    return task_outcome(task)


def cmd_action(args: argparse.Namespace, client: Client) -> int:
    action = client.get_action(args.action_id)
    if args.json:
        print_json(action)
        return exit_codes.COMPLETE
    say(action_line(action).strip())
    for receipt in action.receipts:
        say(
            f"  receipt {receipt.attempt} {receipt.operation}: {receipt.outcome}, status "
            f"{receipt.status_code}, {receipt.duration_ms} ms  {clean(receipt.snippet)}".rstrip()
        )
    for entry in action.history:
        say(f"  {entry.at}  {entry.from_state} → {entry.to_state}  {entry.reason}")
    return exit_codes.COMPLETE


def cmd_resolve(args: argparse.Namespace, client: Client) -> int:
    action = client.resolve_action(args.action_id, args.outcome, args.note)
    if args.json:
        print_json(action)
    else:
        say(action_line(action).strip())
    return exit_codes.COMPLETE


def cmd_channels(args: argparse.Namespace, client: Client) -> int:
    channels = client.list_channels()
    if args.json:
        print_json({"channels": channels})
        return exit_codes.COMPLETE
    for channel in channels:
        say(
            f"{clean(channel.name)}  {channel.kind}  {','.join(channel.action_types)}  "
            f"breaker {channel.breaker_state}  {clean(channel.description)}"
        )
    if not channels:
        say("no channels this key may use")
    return exit_codes.COMPLETE


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


# The longest period the reach service reviews (the dedupe retention's floor keeps it).
MAX_REVIEW_S = 90 * 86400


def duration_s(text: str) -> int:
    """``--since``: a whole number of seconds, or one with a unit (``90m``, ``12h``,
    ``7d``, ``2w``)."""
    raw = text.strip().lower()
    number, unit = (raw[:-1], raw[-1]) if raw and raw[-1] in _UNITS else (raw, "s")
    if not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a period: a whole number with s, m, h, d or w (e.g. 7d)"
        )
    # Checked on the digits first: a number of any length must not reach the request.
    if len(number) > 10 or int(number) * _UNITS[unit] > MAX_REVIEW_S:
        raise argparse.ArgumentTypeError(f"{text!r} is too long a period: at most 90d")
    return int(number) * _UNITS[unit]


def cmd_unknowns(args: argparse.Namespace, client: Client) -> int:
    review = client.unknown_review(since_s=args.since, channel=args.channel)
    if args.json:
        print_json(review)
        return exit_codes.COMPLETE
    say(
        f"{plural(review.total, 'action')} entered UNKNOWN since {review.since} "
        f"({plural(len(review.groups), 'group')})"
    )
    for group in review.groups:
        say(
            f"{clean(group.channel)}  settled by {group.settled_by}  now {group.state}  "
            f"{group.count}"
        )
        for entry in group.actions:
            settled = f"settled {entry.settled_at}" if entry.settled_at else "still open"
            who = (
                f"  by {clean(entry.resolved_by)}: {clean(entry.note)}" if entry.resolved_by else ""
            )
            say(
                f"  {entry.action_id} {clean(entry.name)} (task {entry.task_id})  unknown "
                f"{entry.entered_unknown_at}, {settled}{who}"
            )
        if group.count > len(group.actions):
            say(f"  ... and {group.count - len(group.actions)} more")
    return exit_codes.COMPLETE


# --- the parser ---------------------------------------------------------------------------


def _add_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait",
        action="store_true",
        help="wait until the task is done or only a person can move it on (needs review)",
    )
    parser.add_argument(
        "--wait-timeout",
        type=positive_float,
        default=DEFAULT_WAIT_S,
        help=f"give up waiting after this many seconds (default {DEFAULT_WAIT_S:g}; exit 3)",
    )


def add_reach_parser(
    commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]
) -> None:
    reach = commands.add_parser(
        "reach",
        help="submit reach tasks, follow them, resolve actions under review",
        epilog=exit_codes.HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = reach.add_subparsers(dest="action", required=True)

    submit = actions.add_parser(
        "submit",
        parents=parents,
        help="submit a task of one or more actions",
        description=wrapped(
            """Reserves a task, each action under its idempotency key, and prints it. Exit
            0 once reserved (or, with --validate-only, valid); with --wait the task's end
            decides: 0 succeeded, 3 failed, waits for review or still runs."""
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    submit.add_argument("--entity", dest="entity_id", help="the business entity (entity_id)")
    submit.add_argument(
        "--action",
        action="append",
        metavar="JSON",
        help='an action: {"name", "channel", "action_type", "params", "depends_on", '
        '"requirement": "required"|"optional"}; repeatable',
    )
    submit.add_argument(
        "--file",
        metavar="PATH",
        help="a JSON task as POST /api/v1/reach/tasks takes it ('-': stdin); flags win",
    )
    submit.add_argument("--idempotency-key", help="makes repeats safe across time windows")
    submit.add_argument("--logical-time", help="the business time of the task (RFC 3339)")
    submit.add_argument("--trace-id", help="sent to receivers as traceparent")
    submit.add_argument(
        "--validate-only", action="store_true", help="run every check, reserve nothing"
    )
    _add_wait(submit)
    submit.set_defaults(func=client_command(cmd_submit))

    get = actions.add_parser(
        "get",
        parents=parents,
        help="a task and its actions",
        description="Exit 0 when the task succeeded, 3 when it failed, waits for review "
        "or still runs.",
    )
    get.add_argument("task_id", metavar="TASK_ID")
    _add_wait(get)
    get.set_defaults(func=client_command(cmd_get))

    action = actions.add_parser(
        "action", parents=parents, help="one action with its receipts and history"
    )
    action.add_argument("action_id", metavar="ACTION_ID")
    action.set_defaults(func=client_command(cmd_action))

    resolve = actions.add_parser(
        "resolve",
        parents=parents,
        help="settle an unknown or under-review action after checking the receiver "
        "(operator scope)",
    )
    resolve.add_argument("action_id", metavar="ACTION_ID")
    resolve.add_argument("--outcome", required=True, choices=("succeeded", "failed"))
    resolve.add_argument("--note", required=True, help="what was checked, for the audit trail")
    resolve.set_defaults(func=client_command(cmd_resolve))

    channels = actions.add_parser(
        "channels", parents=parents, help="the channels this key may use, as tools"
    )
    channels.set_defaults(func=client_command(cmd_channels))

    unknowns = actions.add_parser(
        "unknowns",
        parents=parents,
        help="the weekly UNKNOWN review: actions that passed through UNKNOWN, by channel "
        "and by how they were settled (operator scope)",
    )
    unknowns.add_argument(
        "--since",
        type=duration_s,
        default=7 * 86400,
        metavar="PERIOD",
        help="how far back: 1h to 90d, e.g. 7d (the default), 36h, 2w",
    )
    unknowns.add_argument("--channel", help="only this channel")
    unknowns.set_defaults(func=client_command(cmd_unknowns))

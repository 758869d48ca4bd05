"""`reachstore tasks list|watch`: ingest tasks by id, and the poller `ingest` shares.

The API has no listing of ingest tasks (a task is found by the id its submission
returned), so `tasks list` without ids lists the tasks that the ingest state files in the
current folder still follow.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from reachstore import Client, NotFoundError, QuotaError, Task
from reachstore_server.cli_client import exit_codes
from reachstore_server.cli_client.connection import client_command, positive_float
from reachstore_server.cli_client.ingest_state import FILE_PREFIX, PENDING, IngestState
from reachstore_server.cli_client.output import Progress, clean, note, plural, print_json, say

# Between polls when the server gives no advice, and at least this long whatever it says.
DEFAULT_PAUSE_MS = 500
MIN_PAUSE_MS = 50
# At most this many GetTask calls in one round, so a burst of finished tasks cannot starve
# the submission of the next batch.
MAX_CALLS_PER_ROUND = 100


class TaskPoller:
    """Follows ingest tasks until they end, with the server's ``poll_after_ms`` between
    rounds and its ``retry_after_ms`` when over a call-rate limit.

    With ``in_order`` (for `ingest`) a round walks the tasks in submission order and stops
    at the first one still running: the ingest service works first in, first out, so the
    tasks behind it are almost never done yet, and a round costs one call per finished
    task plus one instead of one per task followed. Without it every task is asked each
    round, which suits a handful of ids being watched.
    """

    def __init__(self, client: Client, *, in_order: bool) -> None:
        self.client = client
        self.in_order = in_order
        self._pending: dict[str, None] = {}  # insertion-ordered set
        self.latest: dict[str, Task] = {}  # the last state seen of tasks still running
        self.next_poll = time.monotonic()

    def add(self, task_id: str) -> None:
        self._pending[task_id] = None

    def __len__(self) -> int:
        return len(self._pending)

    def poll(self) -> tuple[list[Task], list[str]]:
        """One round: the tasks that ended, and the ids the server does not know (any
        more, or on this system)."""
        finished: list[Task] = []
        lost: list[str] = []
        # Every task asked had ended (a burst of finished ones): ask the next ones soon.
        pause_ms = MIN_PAUSE_MS
        for task_id in list(itertools.islice(self._pending, MAX_CALLS_PER_ROUND)):
            try:
                task = self.client.get_task(task_id)
            except NotFoundError:
                del self._pending[task_id]
                self.latest.pop(task_id, None)
                lost.append(task_id)
                continue
            except QuotaError as exc:
                if not exc.retryable:
                    raise
                pause_ms = exc.retry_after_ms or DEFAULT_PAUSE_MS
                break
            if task.done:
                del self._pending[task_id]
                self.latest.pop(task_id, None)
                finished.append(task)
                continue
            self.latest[task_id] = task
            pause_ms = task.poll_after_ms or DEFAULT_PAUSE_MS
            if self.in_order:
                break
        self.next_poll = time.monotonic() + max(MIN_PAUSE_MS, pause_ms) / 1000
        return finished, lost

    def running(self) -> list[Task]:
        """The last state seen of each task still followed, in the order they were added."""
        return [self.latest[t] for t in self._pending if t in self.latest]

    def wait(self) -> None:
        time.sleep(max(0.0, self.next_poll - time.monotonic()))


def task_state(task: Task) -> str:
    if task.state == "processing":
        return f"processing/{task.phase} {task.percent}%"
    return task.state


def task_line(task: Task) -> str:
    state = task_state(task)
    error = f"  {task.error.error_code} ({task.error.category})" if task.error else ""
    return f"{task.task_id}  {state:<24}  {clean(task.namespace)}  {clean(task.document_id)}{error}"


def _followed_in_state_files(folder: Path) -> list[str]:
    """Task ids that the ingest state files here have not seen end."""
    ids: list[str] = []
    for path in sorted(folder.glob(f"{FILE_PREFIX}*.json")):
        state = IngestState.read(path)
        records = state.records.values() if state else []
        ids += [r.task_id for r in records if r.status == PENDING and r.task_id]
    return ids


def cmd_tasks_list(args: argparse.Namespace, client: Client) -> int:
    task_ids = args.task_ids or _followed_in_state_files(Path.cwd())
    tasks: list[Task] = []
    missing: list[str] = []
    for task_id in task_ids:
        try:
            tasks.append(client.get_task(task_id))
        except NotFoundError:
            missing.append(task_id)
    if args.json:
        print_json({"tasks": tasks, "not_found": missing})
    else:
        if not task_ids:
            say("no tasks: name task ids, or run this where an ingest left its state file")
        for task in tasks:
            say(task_line(task))
        for task_id in missing:
            say(f"{clean(task_id)}  not found")
    if missing:
        note(f"TASK_NOT_FOUND (permanent): {', '.join(clean(t) for t in missing)}")
    return tasks_outcome(tasks, missing)


def tasks_outcome(tasks: list[Task], missing: list[str]) -> int:
    """Complete when every task completed; refused when none was found; partial else
    (failed, cancelled, still running, or some not found)."""
    if missing and not tasks:
        return exit_codes.FAILED
    if missing or any(t.state != "completed" for t in tasks):
        return exit_codes.PARTIAL
    return exit_codes.COMPLETE


def cmd_tasks_watch(args: argparse.Namespace, client: Client) -> int:
    poller = TaskPoller(client, in_order=False)
    for task_id in dict.fromkeys(args.task_ids):
        poller.add(task_id)
    total = len(poller)
    ended: list[Task] = []
    missing: list[str] = []
    progress = Progress(total, "tasks")
    deadline = time.monotonic() + args.wait_timeout if args.wait_timeout else None
    while len(poller):
        finished, lost = poller.poll()
        ended += finished
        missing += lost
        for task in finished:
            if not args.json:
                progress.clear()  # the finished task takes the bar's line; it is redrawn below
                say(task_line(task))
        running = poller.running()
        detail = task_state(running[0]) if len(running) == 1 else ""
        progress.update(len(ended) + len(missing), detail)
        if not len(poller) or (deadline is not None and time.monotonic() >= deadline):
            break
        poller.wait()
    progress.finish(len(ended) + len(missing))
    still = poller.running()
    if missing:
        note(f"TASK_NOT_FOUND (permanent): {', '.join(clean(t) for t in missing)}")
    if still:
        note(f"{plural(len(still), 'task')} still running after {args.wait_timeout:g} s")
    if args.json:
        print_json({"tasks": ended + still, "not_found": missing})
    return tasks_outcome(ended + still, missing)


def add_tasks_parser(
    commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]
) -> None:
    tasks = commands.add_parser(
        "tasks",
        help="show and follow ingest tasks",
        epilog=exit_codes.HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = tasks.add_subparsers(dest="action", required=True)
    listing = actions.add_parser(
        "list",
        parents=parents,
        help="the state of tasks (default: those the ingest state files here still follow)",
        description="Exit 0 when every task completed, 3 when some failed, were cancelled, "
        "still run or were not found, 1 when none was found.",
    )
    listing.add_argument("task_ids", nargs="*", metavar="TASK_ID")
    listing.set_defaults(func=client_command(cmd_tasks_list))
    watch = actions.add_parser(
        "watch",
        parents=parents,
        help="follow tasks with live progress until they end",
        description="Exit 0 when every task completed, 3 when some failed, were cancelled, "
        "still ran when the wait ended or were not found, 1 when none was found.",
    )
    watch.add_argument("task_ids", nargs="+", metavar="TASK_ID")
    watch.add_argument(
        "--wait-timeout",
        type=positive_float,
        default=None,
        help="stop waiting after this many seconds (default: until every task ended)",
    )
    watch.set_defaults(func=client_command(cmd_tasks_watch))

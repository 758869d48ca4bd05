"""What the API says at the end: every action of every task, with receipts and history.

Read over gRPC only (ListTasks to find every task, including any whose submission never
got an answer; GetAction for each action's receipts and history), the way an agent or an
operator would see it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

import grpc
from google.protobuf import json_format

from reachstore.reach.v1 import reach_service_pb2 as pb
from tests.e2e.test_reach_crash import list_tasks, state_name, wait_until_quiet
from tests.faults.cluster import Cluster

# States no action may be left in once the workers had time to finish (no action here
# has dependencies, so "blocked" would be a bug too).
STUCK = frozenset({"blocked", "ready", "submitting", "pending"})


@dataclasses.dataclass(frozen=True)
class ActionView:
    action_id: str
    task_id: str
    channel: str
    state: str
    intent: str
    idem_key: str
    attempts: int
    receipts: tuple[pb.Receipt, ...]
    history: tuple[pb.HistoryEntry, ...]

    @classmethod
    def of(cls, action: pb.Action) -> ActionView:
        params = json_format.MessageToDict(action.params)
        return cls(
            action.action_id,
            action.task_id,
            action.channel,
            state_name(action),
            str(params.get("intent", "")),
            action.idempotency_key,
            action.attempts,
            tuple(action.receipts),
            tuple(action.history),
        )

    def reasons(self) -> list[str]:
        return [entry.reason for entry in self.history]

    def describe(self) -> list[str]:
        lines = [
            f"action {self.action_id} (task {self.task_id}) on {self.channel}: {self.state}, "
            f"{self.attempts} attempt(s), key {self.idem_key}"
        ]
        for entry in self.history:
            lines.append(
                f"  history {entry.at} "
                f"{pb.ActionState.Name(entry.from_state).removeprefix('ACTION_STATE_').lower()}"
                f" -> {pb.ActionState.Name(entry.to_state).removeprefix('ACTION_STATE_').lower()}"
                f" ({entry.reason})"
            )
        for r in self.receipts:
            lines.append(
                f"  receipt attempt {r.attempt} {r.operation}: {r.outcome}, status {r.status_code}"
                f", {r.duration_ms} ms, {r.snippet[:80]!r}"
            )
        return lines


def drain(cluster: Cluster, timeout_s: float) -> tuple[bool, float]:
    """Waits until no action is still being worked on (or ``timeout_s`` passed); whether
    it got quiet, and how long that took."""
    start = time.monotonic()
    tasks = wait_until_quiet(cluster.stub(), timeout_s)
    busy = [a for t in tasks for a in t.actions if state_name(a) in STUCK | {"unknown"}]
    return not busy, time.monotonic() - start


def read_actions(cluster: Cluster, known: Iterable[str]) -> tuple[dict[str, ActionView], set[str]]:
    """Every action of every task, read one by one; and those of ``known`` not found."""
    stub = cluster.stub()
    ids = {a.action_id for t in list_tasks(stub) for a in t.actions} | set(known)
    views: dict[str, ActionView] = {}
    missing: set[str] = set()
    for action_id in sorted(ids):
        try:
            reply = stub.GetAction(pb.GetActionRequest(action_id=action_id), timeout=10)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            missing.add(action_id)
            continue
        views[action_id] = ActionView.of(reply.action)
    return views, missing

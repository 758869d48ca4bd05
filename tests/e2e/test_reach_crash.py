"""The reach layer under crashes and concurrency: real `python -m reachstore_server.reach.main`
processes, killed with SIGKILL or run side by side, sending to a real HTTP receiver.

Each test prints what it did and what it observed (run with ``-s`` to see it); the same
summary is part of every assertion message.
"""

from __future__ import annotations

import collections
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy
from google.protobuf import json_format, struct_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from reachstore_server.reach.config import LEASE_MARGIN_S
from tests.e2e.processes import ROOT, ServiceProcess
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

SERVICE = pb.DESCRIPTOR.services_by_name["ReachService"].full_name
PII_SECRET = "reach-crash-tests-pii-secret"
PLAIN = "plain-hook"  # no Idempotency-Key header, not idempotent: a lost send is UNKNOWN
KEYED = "keyed-hook"  # sends Idempotency-Key: a lost send is re-sent with the same key
# Action states a worker will still move on its own.
OPEN = frozenset({"ready", "submitting", "pending", "unknown"})
# Where an action may end: finished, or waiting for a person to look.
ALLOWED_ENDS = frozenset({"succeeded", "failed", "skipped", "cancelled", "unknown", "needs_review"})
FOR_A_PERSON = frozenset({"unknown", "needs_review"})
# Reasons a worker gives an action back after marking it ``submitting`` without sending it
# (its lease no longer had room for the send; another worker took the rate token).
WITHDRAWN_MARKS = frozenset({"lease_too_short_to_send", "rate_limit_wait"})
# The two engines of the ``database_url`` fixture, PostgreSQL's marked as needing it.
PG_MARKED = [
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.postgres),
]


# ------------------------------------------------------------------------------ helpers


class SlowReceiver(HttpReceiver):
    """An ``HttpReceiver`` that takes ``delay`` seconds (uniformly drawn) before handling
    each delivery, like a receiver doing real work, so that a kill often lands while a
    send is in flight. The delay comes before the delivery is recorded and takes effect:
    a sender killed meanwhile still has its request arrive."""

    def __init__(self, delay: tuple[float, float], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._delay = delay

    def _deliver(self, handler: Any, body: bytes) -> None:
        time.sleep(random.uniform(*self._delay))
        super()._deliver(handler, body)


def write_config(path: Path, receiver: HttpReceiver, *, workers: int, lease_s: float) -> Path:
    """Two webhook channels to ``receiver``: PLAIN without idempotency-key support and
    KEYED with it (the channel says the receiver de-duplicates). Their status look-up
    answers 404 for every id, so an UNKNOWN outcome can never be decided and goes to
    NEEDS_REVIEW after two quick look-ups. The timeouts use what the lease leaves."""
    read_timeout = min(5.0, (lease_s - LEASE_MARGIN_S) / 2)

    def channel(name: str, header: bool) -> str:
        return f"""
[channels.{name}]
kind = "webhook"
description = "{name}: posts to the test receiver"
action_types = ["notify"]
idempotent = false
receiver_deduplicates = {str(header).lower()}
window = "day"

[channels.{name}.webhook]
url = "{receiver.base_url}/{name}"
status_url = "{receiver.base_url}/undecidable/{{external_id}}"
idempotency_header = {str(header).lower()}
connect_timeout_s = 0.5
read_timeout_s = {read_timeout}

[channels.{name}.retry]
base_s = 0.05
cap_s = 0.2

[channels.{name}.unknown]
base_s = 0.2
cap_s = 0.4
max_polls = 2
"""

    path.write_text(
        f"[engine]\nworkers = {workers}\nlease_s = {lease_s}\n"
        + channel(PLAIN, header=False)
        + channel(KEYED, header=True),
        encoding="utf-8",
    )
    return path


class ReachProcess(ServiceProcess):
    """One reach service process, with its gRPC stub and its log named after its
    worker id."""

    def __init__(self, workdir: Path, database_url: str, config: Path, worker_id: str) -> None:
        super().__init__(
            "reachstore_server.reach.main",
            SERVICE,
            workdir,
            worker_id,
            {
                "REACHSTORE_DATABASE_URL": database_url,
                "REACHSTORE_REACH_CONFIG": str(config),
                "REACHSTORE_PII_SECRET": PII_SECRET,
                "REACHSTORE_WORKER_ID": worker_id,
                "REACHSTORE_DATA_DIR": str(workdir / "data"),
            },
        )
        self.worker_id = worker_id
        self.stub: pb_grpc.ReachServiceStub

    def start(self, timeout: float = 30.0) -> ReachProcess:
        super().start(timeout)
        self.stub = pb_grpc.ReachServiceStub(self.channel)
        return self

    def transitions(self) -> Iterator[tuple[str, str, str]]:
        """(action id, new state, reason) of every state change this process made, in
        order, from the structured fields of its log lines."""
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "action_id" in entry and "state" in entry:
                yield entry["action_id"], entry["state"], entry.get("reason", "")


def state_name(action: pb.Action) -> str:
    """An action's state as the lowercase word the store uses ("needs_review")."""
    return pb.ActionState.Name(action.state).removeprefix("ACTION_STATE_").lower()


def action_spec(name: str, channel: str, params: dict[str, Any], *deps: str) -> pb.ActionSpec:
    values = struct_pb2.Struct()
    values.update(params)
    return pb.ActionSpec(
        name=name, channel=channel, action_type="notify", params=values, depends_on=deps
    )


def list_tasks(stub: pb_grpc.ReachServiceStub) -> list[pb.Task]:
    """Every task of the local tenant, with its actions."""
    tasks: list[pb.Task] = []
    token = ""
    while True:
        reply = stub.ListTasks(pb.ListTasksRequest(page_size=100, page_token=token), timeout=10)
        tasks.extend(reply.tasks)
        token = reply.next_page_token
        if not token:
            return tasks


def actions_of(tasks: Iterable[pb.Task]) -> list[pb.Action]:
    return [action for task in tasks for action in task.actions]


def wait_until_quiet(stub: pb_grpc.ReachServiceStub, timeout: float) -> list[pb.Task]:
    """Polls until no action is in a state a worker still moves (``OPEN``), or until
    ``timeout``; returns the tasks as last seen either way (the caller's assertions say
    what is wrong)."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = list_tasks(stub)
        if time.monotonic() > deadline or not any(state_name(a) in OPEN for a in actions_of(tasks)):
            return tasks
        time.sleep(0.25)


def stored_states(engine: sqlalchemy.Engine) -> collections.Counter[str]:
    """Actions per state, read from the database itself (while no reach process runs,
    this is exactly what a kill left behind)."""
    with engine.connect() as conn:
        rows = conn.execute(
            sqlalchemy.text("SELECT state, COUNT(*) FROM reach_actions GROUP BY state")
        )
        return collections.Counter({state: count for state, count in rows})


def connections_closed(engine: sqlalchemy.Engine, timeout: float = 10.0) -> None:
    """Waits until no other session is connected to the database. A process killed just
    after sending a COMMIT has that commit still to land: PostgreSQL finishes the
    statement it has read before it notices the closed socket, so what a kill left behind
    is known only once the killed process's sessions have ended."""
    if engine.dialect.name != "postgresql":
        return  # SQLite writes in the process itself: once it is dead, nothing lands
    deadline = time.monotonic() + timeout
    others = sqlalchemy.text(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
    )
    while True:
        with engine.connect() as conn:
            if not conn.execute(others).scalar_one():
                return
        assert time.monotonic() < deadline, "the killed process's sessions did not end"
        time.sleep(0.02)


def in_flight(engine: sqlalchemy.Engine) -> set[str]:
    """Ids of the actions marked SUBMITTING in the database: sends a kill cut off (or
    whose answer it kept from being recorded), until a worker takes them over."""
    connections_closed(engine)
    with engine.connect() as conn:
        rows = conn.execute(
            sqlalchemy.text("SELECT action_id FROM reach_actions WHERE state = 'submitting'")
        )
        return {action_id for (action_id,) in rows}


def blocked_behind_a_person(action: pb.Action, by_name: dict[str, pb.Action]) -> bool:
    """A BLOCKED action is legitimately stuck only while a dependency waits for a person
    (or is itself blocked that way): none failed, and not all of them succeeded."""
    deps = [by_name[d] for d in action.depends_on]
    states = [state_name(d) for d in deps]
    if not deps or all(s == "succeeded" for s in states):
        return False
    return all(
        s == "succeeded"
        or s in FOR_A_PERSON
        or (s == "blocked" and blocked_behind_a_person(d, by_name))
        for s, d in zip(states, deps, strict=True)
    )


def describe(action: pb.Action, task: pb.Task) -> str:
    """An action as ``<id> <name> <state>``, with the states of the actions it waits for."""
    text = f"{action.action_id} {action.name} {state_name(action)}"
    if action.depends_on:
        states = {a.name: state_name(a) for a in task.actions}
        text += " (after " + ", ".join(f"{d} {states[d]}" for d in action.depends_on) + ")"
    return text


def misreported_tasks(tasks: Iterable[pb.Task]) -> list[str]:
    """Tasks every action of which succeeded, yet not reported SUCCEEDED."""
    return [
        f"{t.task_id} {pb.TaskState.Name(t.state)}"
        for t in tasks
        if all(state_name(a) == "succeeded" for a in t.actions)
        and t.state != pb.TASK_STATE_SUCCEEDED
    ]


def counts(values: Iterable[str]) -> str:
    """A printed tally of ``values``: ``a=3 b=1``."""
    return " ".join(f"{k}={v}" for k, v in sorted(collections.Counter(values).items()))


def error_reason(error: grpc.RpcError) -> tuple[str, pf_pb2.PartialFailure | None]:
    """The ErrorInfo reason and the PartialFailure of a rich gRPC error status."""
    status = rpc_status.from_call(error)
    assert status is not None, f"no rich status in {error}"
    reason, failure = "", None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
        elif detail.Is(pf_pb2.PartialFailure.DESCRIPTOR):
            failure = pf_pb2.PartialFailure()
            detail.Unpack(failure)
    return reason, failure


# A client in its own OS process: connects, says "ready", submits one task when a line
# arrives on stdin, and prints the outcome as one JSON line.
SUBMITTER = """
import json, sys
import grpc
from google.protobuf import json_format
from reachstore.reach.v1 import reach_service_pb2 as pb, reach_service_pb2_grpc as pb_grpc

address, request = sys.argv[1], json_format.Parse(sys.argv[2], pb.SubmitTaskRequest())
with grpc.insecure_channel(address) as channel:
    grpc.channel_ready_future(channel).result(timeout=20)
    stub = pb_grpc.ReachServiceStub(channel)
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        reply = stub.SubmitTask(request, timeout=20)
    except grpc.RpcError as exc:
        print(json.dumps({"error": f"{exc.code().name}: {exc.details()}"}))
    else:
        print(json.dumps({
            "task_id": reply.task.task_id,
            "deduplicated": reply.deduplicated,
            "actions": [a.action_id for a in reply.task.actions],
        }))
"""


def submit_from_processes(
    address: str, requests: Sequence[pb.SubmitTaskRequest]
) -> list[dict[str, Any]]:
    """Submits each request from an OS process of its own, all at the same moment: every
    process connects first, and all are released together once all are connected."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SUBMITTER, address, json_format.MessageToJson(request)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for request in requests
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", "a submitter did not connect"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        return [json.loads(proc.communicate(timeout=30)[0]) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def answers(results: Iterable[dict[str, Any]]) -> list[str]:
    """What each submitter got, shortly: "<task id> deduplicated=<flag>" or the error."""
    return [
        f"{r['task_id']} deduplicated={r['deduplicated']}" if "task_id" in r else r["error"]
        for r in results
    ]


# -------------------------------------------------------------------------------- tests

CRASH_TASKS = 50  # six actions each: 150 per channel
CRASH_KILLS = 5


def crash_task(n: int) -> pb.SubmitTaskRequest:
    """Three actions on each channel; on each, the third waits for the first two."""
    params = {"order": n}
    return pb.SubmitTaskRequest(
        entity_id=f"order-{n}",
        actions=[
            action_spec("p0", PLAIN, {**params, "step": "p0"}),
            action_spec("p1", PLAIN, {**params, "step": "p1"}),
            action_spec("p2", PLAIN, {**params, "step": "p2"}, "p0", "p1"),
            action_spec("k0", KEYED, {**params, "step": "k0"}),
            action_spec("k1", KEYED, {**params, "step": "k1"}),
            action_spec("k2", KEYED, {**params, "step": "k2"}, "k0", "k1"),
        ],
    )


@pytest.mark.parametrize("database_url", PG_MARKED, indirect=True)
def test_kill_9_at_random_moments_loses_nothing_and_never_resends_blindly(
    tmp_path: Path, database_url: str
) -> None:
    """SIGKILL the reach process at random moments while it works through 300 actions,
    restart it each time (same database and configuration, a new worker id). In the end
    every action has finished or waits for a person, none is lost, the receiver got no
    action of the channel without key support twice, and every action of the channel
    with key support took effect exactly once."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    engine = sqlalchemy.create_engine(database_url)
    receiver = SlowReceiver((0.01, 0.05), dedupe=True)
    config = tmp_path / "reach.toml"
    procs: list[ReachProcess] = []
    log: list[str] = [
        f"crash test on {engine.dialect.name}, seed {seed}: {CRASH_TASKS * 6} actions in "
        f"{CRASH_TASKS} tasks, half on {PLAIN}, half on {KEYED}"
    ]

    def launch() -> ReachProcess:
        """Starts the next reach process: same database and configuration, new worker id."""
        process = ReachProcess(tmp_path, database_url, config, f"crash-{len(procs)}")
        procs.append(process)
        return process.start()

    try:
        with receiver:
            write_config(config, receiver, workers=4, lease_s=2)
            current = launch()
            submitted = [
                current.stub.SubmitTask(crash_task(n), timeout=10) for n in range(CRASH_TASKS)
            ]
            cut_off: set[str] = set()  # actions whose send a kill cut off
            for kill in range(1, CRASH_KILLS + 1):
                if not OPEN & stored_states(engine).keys():
                    log.append(f"kill {kill}: skipped, no work left")
                    break
                receiver.wait_for(receiver.total() + 1, timeout=3)  # it is sending
                pause = rng.uniform(0.1, 0.8)
                time.sleep(pause)
                current.kill()
                now_cut = in_flight(engine) - cut_off
                cut_off |= now_cut
                log.append(
                    f"kill {kill} ({pause:.2f} s after a delivery): {len(now_cut)} sends cut "
                    f"off; stored: {counts(stored_states(engine).elements())}"
                )
                current = launch()
            tasks = wait_until_quiet(current.stub, timeout=60)
            exit_code = current.stop()
        receiver_errors = list(receiver.errors)
    finally:
        for process in procs:
            process.stop()
        engine.dispose()

    sent_ids = {a.action_id for t in submitted for a in t.task.actions}
    actions = actions_of(tasks)
    by_id = {a.action_id: a for a in actions}
    per_action = receiver.deliveries_by("X-Reachstore-Action-Id")
    plain = [a for a in actions if a.channel == PLAIN]
    keyed = [a for a in actions if a.channel == KEYED]
    plain_twice = sorted(a.action_id for a in plain if per_action[a.action_id] > 1)
    review = [a for a in plain if state_name(a) in FOR_A_PERSON]
    plain_cut = [a for a in plain if a.action_id in cut_off]
    keyed_cut = [a for a in keyed if a.action_id in cut_off]
    keyed_resent = [a for a in keyed if per_action[a.action_id] > 1]
    keyed_effects = collections.Counter(receiver.effects(a.idempotency_key) for a in keyed)
    stuck: list[str] = []
    waiting = 0  # blocked behind an action that waits for a person
    for task in tasks:
        names = {a.name: a for a in task.actions}
        for a in task.actions:
            state = state_name(a)
            if state == "blocked" and blocked_behind_a_person(a, names):
                waiting += 1
            elif state not in ALLOWED_ENDS:
                stuck.append(describe(a, task))
    recoveries = [
        reason
        for process in procs
        for _, _, reason in process.transitions()
        if reason.startswith("worker_lost")
    ]
    log += [
        f"sends cut off by the kills: {len(cut_off)}; they ended as {PLAIN}: "
        f"{counts(state_name(a) for a in plain_cut)}, {KEYED}: "
        f"{counts(state_name(a) for a in keyed_cut)}; taken over (per the logs): "
        f"{counts(recoveries)}",
        f"final states: {counts(state_name(a) for a in actions)} ({waiting} blocked behind "
        "an action that waits for a person)",
        f"{PLAIN}: deliveries per action {counts(str(per_action[a.action_id]) for a in plain)};"
        f" {len(review)} wait for a person, {sum(per_action[a.action_id] for a in review)}"
        " of them reached the receiver; delivered twice: "
        f"{len(plain_twice)}",
        f"{KEYED}: {len(keyed_resent)} re-sent with the same key after a kill "
        f"(deliveries per action {counts(str(per_action[a.action_id]) for a in keyed)}); "
        f"effects per key {counts(str(n) for n in keyed_effects.elements())}",
        f"receiver: {receiver.total()} deliveries, {receiver.effects_total()} effects",
    ]
    summary = "\n".join(log)
    print(summary)

    assert exit_code == 0, f"{summary}\nthe last process did not stop cleanly"
    assert not receiver_errors, f"{summary}\nreceiver errors: {receiver_errors}"
    assert cut_off, f"{summary}\nno kill landed mid-send: the crash path was not exercised"
    assert set(by_id) == sent_ids, f"{summary}\nlost: {sent_ids - set(by_id)}"
    assert len(tasks) == CRASH_TASKS and all(len(t.actions) == 6 for t in tasks), summary
    assert not stuck, f"{summary}\nnot finished and not waiting for a person: {stuck}"
    misreported = misreported_tasks(tasks)
    assert not misreported, f"{summary}\nall actions succeeded, yet: {misreported}"
    assert not plain_twice, f"{summary}\n{PLAIN} actions delivered twice: {plain_twice}"
    resent = [a.action_id for a in plain_cut if state_name(a) not in FOR_A_PERSON]
    assert not resent, f"{summary}\ncut-off {PLAIN} sends not left to a person: {resent}"
    wrong = [
        a.action_id for a in plain if state_name(a) == "succeeded" and per_action[a.action_id] != 1
    ]
    assert not wrong, f"{summary}\nsucceeded without exactly one delivery: {wrong}"
    not_done = [
        describe(a, t)
        for t in tasks
        for a in t.actions
        if a.channel == KEYED and state_name(a) != "succeeded"
    ]
    assert not not_done, f"{summary}\n{KEYED} re-sends lost sends, yet: {not_done}"
    assert set(keyed_effects) == {1}, f"{summary}\n{KEYED} effects per key: {keyed_effects}"


@pytest.mark.parametrize("database_url", PG_MARKED, indirect=True)
def test_the_same_task_from_several_processes_is_reserved_and_sent_once(
    tmp_path: Path, database_url: str
) -> None:
    """Four OS processes submit the same task at once without a caller key, four others
    another task with the same caller key: each group gets one task (one answer not
    deduplicated), each action reaches the receiver once, and the caller key reused for
    other content is refused with IDEMPOTENCY_KEY_REUSED."""

    def task(entity: str, key: str = "", note: str = "hello") -> pb.SubmitTaskRequest:
        return pb.SubmitTaskRequest(
            entity_id=entity,
            idempotency_key=key,
            actions=[
                action_spec("tell", PLAIN, {"note": note, "step": "tell"}),
                action_spec("record", KEYED, {"note": note, "step": "record"}),
                action_spec("confirm", KEYED, {"note": note, "step": "confirm"}, "record"),
            ],
        )

    receiver = HttpReceiver()
    reach = ReachProcess(tmp_path, database_url, tmp_path / "reach.toml", "dup-0")
    try:
        with receiver:
            write_config(tmp_path / "reach.toml", receiver, workers=8, lease_s=5)
            reach.start()
            results = submit_from_processes(
                reach.address, [task("ticket-1")] * 4 + [task("ticket-2", "caller-key-2")] * 4
            )
            with pytest.raises(grpc.RpcError) as refused:
                reach.stub.SubmitTask(task("ticket-2", "caller-key-2", note="other"), timeout=10)
            tasks = wait_until_quiet(reach.stub, timeout=30)
        receiver_errors = list(receiver.errors)
    finally:
        reach.stop()

    no_key, with_key = results[:4], results[4:]
    per_action = receiver.deliveries_by("X-Reachstore-Action-Id")
    actions = actions_of(tasks)
    reason, failure = error_reason(refused.value)
    summary = "\n".join(
        [
            f"duplicate submissions on {sqlalchemy.make_url(database_url).get_backend_name()}",
            f"no caller key, 4 processes: {answers(no_key)}",
            f"caller key, 4 processes: {answers(with_key)}",
            f"same key, other content: {refused.value.code().name} {reason}",
            f"tasks stored: {len(tasks)}; action states: {counts(state_name(a) for a in actions)}",
            f"receiver: {receiver.total()} deliveries, per action "
            f"{counts(str(per_action[a.action_id]) for a in actions)}",
        ]
    )
    print(summary)

    assert not receiver_errors, f"{summary}\nreceiver errors: {receiver_errors}"
    for group in (no_key, with_key):
        assert all("task_id" in r for r in group), summary
        assert len({r["task_id"] for r in group}) == 1, summary
        assert len({tuple(r["actions"]) for r in group}) == 1, summary
        assert sorted(r["deduplicated"] for r in group) == [False, True, True, True], summary
    assert no_key[0]["task_id"] != with_key[0]["task_id"], summary
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, summary
    assert reason == "IDEMPOTENCY_KEY_REUSED", summary
    assert failure is not None and failure.error_code == "IDEMPOTENCY_KEY_REUSED", summary
    assert failure.structured_data["task_id"] == with_key[0]["task_id"], summary
    assert len(tasks) == 2 and len(actions) == 6, summary
    assert all(state_name(a) == "succeeded" for a in actions), summary
    assert not misreported_tasks(tasks), f"{summary}\n{misreported_tasks(tasks)}"
    assert receiver.total() == 6, summary
    assert all(per_action[a.action_id] == 1 for a in actions), summary


@pytest.mark.postgres
def test_two_workers_on_one_postgresql_database_send_each_action_once(
    tmp_path: Path, pg_database: str
) -> None:
    """Two reach processes (two worker ids, two ports) on one PostgreSQL database work
    through 200 actions submitted to either of them, in tasks whose last action waits for
    the other four (their answers arrive at about the same time): no action reaches the
    receiver twice or is sent by both workers (as their logs show), both workers take
    part, and every action succeeds, so every task does."""
    receiver = SlowReceiver((0.01, 0.012))
    config = tmp_path / "reach.toml"
    workers = [ReachProcess(tmp_path, pg_database, config, f"pg-worker-{i}") for i in (1, 2)]
    try:
        with receiver:
            write_config(config, receiver, workers=4, lease_s=5)
            for worker in workers:
                worker.start()
            for n in range(40):
                workers[n % 2].stub.SubmitTask(
                    pb.SubmitTaskRequest(
                        entity_id=f"invoice-{n}",
                        actions=[
                            action_spec(f"a{i}", PLAIN, {"invoice": n, "step": i}, *deps)
                            for i, deps in enumerate([(), (), (), (), ("a0", "a1", "a2", "a3")])
                        ],
                    ),
                    timeout=10,
                )
            tasks = wait_until_quiet(workers[0].stub, timeout=45)
        receiver_errors = list(receiver.errors)
    finally:
        for worker in workers:
            worker.stop()

    actions = actions_of(tasks)
    per_action = receiver.deliveries_by("X-Reachstore-Action-Id")
    senders: dict[str, list[str]] = collections.defaultdict(list)
    for worker in workers:
        last: dict[str, str] = {}
        for action_id, to_state, reason in worker.transitions():
            if to_state == "submitting":
                senders[action_id].append(worker.worker_id)
            elif reason in WITHDRAWN_MARKS and last.get(action_id) == "submitting":
                senders[action_id].pop()  # marked, then given back unsent
            last[action_id] = to_state
    sent_by = collections.Counter(s for names in senders.values() for s in names)
    summary = "\n".join(
        [
            f"two workers on PostgreSQL: {len(actions)} actions in {len(tasks)} tasks",
            f"final states: {counts(state_name(a) for a in actions)}",
            f"sends per worker (from their logs): {dict(sent_by)}",
            f"receiver: {receiver.total()} deliveries, per action "
            f"{counts(str(per_action[a.action_id]) for a in actions)}",
        ]
    )
    print(summary)

    assert not receiver_errors, f"{summary}\nreceiver errors: {receiver_errors}"
    assert len(actions) == 200, summary
    twice = [a.action_id for a in actions if per_action[a.action_id] > 1]
    assert not twice, f"{summary}\ndelivered more than once: {twice}"
    by_both = {a: s for a, s in senders.items() if len(s) > 1}
    assert not by_both, f"{summary}\nsent more than once: {by_both}"
    assert all(sent_by[w.worker_id] > 0 for w in workers), f"{summary}\none worker idled"
    not_done = [describe(a, t) for t in tasks for a in t.actions if state_name(a) != "succeeded"]
    assert not not_done, f"{summary}\nnot succeeded: {not_done}"
    assert receiver.total() == 200 and len(senders) == 200, summary
    misreported = misreported_tasks(tasks)
    assert not misreported, f"{summary}\nall actions succeeded, yet: {misreported}"

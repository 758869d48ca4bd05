"""The reach benchmark's clients: ``concurrency`` threads, each submitting one action at a
time and following it to its end over gRPC.

One action is: ``SubmitTask`` (one ``notify`` action on ``bench-hook`` with params
``{"n": <unique>}``, so every idempotency key is new), then ``GetTask`` long-polls
(``wait_ms``, ``known_version`` = the version last seen) until the task is SUCCEEDED. Its
latency is the client's time from sending SubmitTask to receiving the SUCCEEDED answer;
the task's own ``created_at`` -> ``finished_at`` (the store's clock, whole milliseconds) is
kept next to it, so the part spent noticing the change shows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import _pg_work as pgw
import grpc
from _reach_service import ACTION_TYPE, CHANNEL
from _stats import Pids, cpu_seconds, latency_stats
from google.protobuf import struct_pb2

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc

ENTITY = "bench"
WAIT_MS = 5000
ACTION_DEADLINE_SECONDS = 60.0  # an action not finished by then fails the run
_FINAL = (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED)


@dataclasses.dataclass(frozen=True)
class Sample:
    seconds: float  # client: SubmitTask sent -> SUCCEEDED received
    submit_seconds: float  # the SubmitTask call alone
    server_seconds: float  # the task's created_at -> finished_at
    get_calls: int
    key: str  # the action's idempotency key, as the receiver must see it


def machine_cpu_seconds() -> float:
    """CPU seconds all cores spent busy so far (user, nice, system, irq, softirq), from
    /proc/stat: with the processes' own figures it shows how much else ran meanwhile."""
    with open("/proc/stat", encoding="ascii") as f:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _timestamp(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def one_action(stub: pb_grpc.ReachServiceStub, n: int) -> Sample:
    params = struct_pb2.Struct()
    params.update({"n": n})
    request = pb.SubmitTaskRequest(
        entity_id=ENTITY,
        actions=[
            pb.ActionSpec(name="notify", channel=CHANNEL, action_type=ACTION_TYPE, params=params)
        ],
    )
    started = time.perf_counter()
    task = stub.SubmitTask(request, timeout=30).task
    submitted = time.perf_counter()
    gets = 0
    while task.state not in _FINAL:
        if time.perf_counter() - started > ACTION_DEADLINE_SECONDS:
            raise RuntimeError(
                f"task {task.task_id} not finished after {ACTION_DEADLINE_SECONDS:.0f} s "
                f"({pb.TaskState.Name(task.state)})"
            )
        task = stub.GetTask(
            pb.GetTaskRequest(task_id=task.task_id, wait_ms=WAIT_MS, known_version=task.version),
            timeout=WAIT_MS / 1000 + 10,
        ).task
        gets += 1
    seconds = time.perf_counter() - started
    if task.state != pb.TASK_STATE_SUCCEEDED:
        action = task.actions[0]
        raise RuntimeError(
            f"task {task.task_id} {pb.TaskState.Name(task.state)}: action "
            f"{pb.ActionState.Name(action.state)}, {action.failure.code} {action.failure.message}"
        )
    return Sample(
        seconds=seconds,
        submit_seconds=submitted - started,
        server_seconds=_timestamp(task.finished_at) - _timestamp(task.created_at),
        get_calls=gets,
        key=task.actions[0].idempotency_key,
    )


def _phase(
    stubs: Sequence[pb_grpc.ReachServiceStub],
    concurrency: int,
    count: int,
    numbers: Iterator[int],
) -> tuple[list[Sample], float]:
    """``count`` actions by ``concurrency`` threads, thread i talking to ``stubs[i % n]``
    (one reach process each); the samples and the wall time from the first submit to the
    last answer."""
    lock = threading.Lock()
    left = count
    samples: list[Sample] = []
    failures: list[BaseException] = []
    go = threading.Event()

    def take() -> int | None:
        nonlocal left
        with lock:
            if left == 0 or failures:
                return None
            left -= 1
            return next(numbers)

    def work(stub: pb_grpc.ReachServiceStub) -> None:
        go.wait()
        while (n := take()) is not None:
            try:
                sample = one_action(stub, n)
            except BaseException as exc:  # noqa: BLE001 - reported by the caller
                with lock:
                    failures.append(exc)
                return
            with lock:
                samples.append(sample)

    threads = [
        threading.Thread(target=work, args=(stubs[i % len(stubs)],), daemon=True)
        for i in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    started = time.perf_counter()
    go.set()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"an action failed: {failures[0]}") from failures[0]
    return samples, seconds


def run_load(
    addresses: Sequence[str],
    concurrency: int,
    warmup: int,
    actions: int,
    numbers: Iterator[int],
    pids: Pids,
    during_measurement: Callable[[], AbstractContextManager[Any]] = nullcontext,
    database: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Warm-up, then the measured ``actions``; figures of the measured part, and the
    idempotency keys of all of them (for the delivery check).

    ``database`` (PostgreSQL: the admin URL and the database's name) also counts what the
    database did per measured action (``_pg_work``: commits, rollbacks, rows): its
    counters once they have settled after the warm-up, again 11 s later (the idle
    background: the executors' polls, subtracted for the 11 s the counters need to settle
    after the measured part), and after it. That waiting is outside every timed figure."""
    with contextlib.ExitStack() as channels:
        stubs = [
            pb_grpc.ReachServiceStub(channels.enter_context(grpc.insecure_channel(address)))
            for address in addresses
        ]
        warm, _ = _phase(stubs, concurrency, warmup, numbers) if warmup else ([], 0.0)
        if database is not None:
            settled = pgw.settled_snapshot(*database)
            quiet = pgw.settled_snapshot(*database)
            first_xid = pgw.next_xid(database[0])
        cpu_before, machine_before = cpu_seconds(pids), machine_cpu_seconds()
        with during_measurement():
            samples, seconds = _phase(stubs, concurrency, actions, numbers)
        cpu_after, machine_after = cpu_seconds(pids), machine_cpu_seconds()
        work: dict[str, float] | None = None
        if database is not None:
            done = pgw.delta(quiet, pgw.settled_snapshot(*database))
            idle = pgw.idle_rates(pgw.delta(settled, quiet))
            work = {
                name: (done[name] - idle[name] * pgw.STATS_FLUSH_WAIT_SECONDS) / actions
                for name in pgw.COUNTERS
            }
            work["writing_transactions"] = pgw.writing_transactions(*database, first_xid) / actions
    client = latency_stats([s.seconds for s in samples])
    server = latency_stats([s.server_seconds for s in samples])
    return {
        "concurrency": concurrency,
        "warmup": warmup,
        "actions": actions,
        "seconds": seconds,
        "actions_per_s": actions / seconds,
        "latency": client,
        "submit_latency": latency_stats([s.submit_seconds for s in samples]),
        "server_latency": server,
        "get_calls_per_action": sum(s.get_calls for s in samples) / len(samples),
        "cpu_ms_per_action": {
            name: 1000 * (cpu_after[name] - cpu_before[name]) / actions for name in cpu_after
        },
        # cores busy on average over the measured part: these processes, and the machine
        "busy_cores": {
            "ours": sum(cpu_after[n] - cpu_before[n] for n in cpu_after) / seconds,
            "machine": (machine_after - machine_before) / seconds,
        },
        "keys": [s.key for s in itertools.chain(warm, samples)],
        "database_per_action": work,
    }

"""Long polls are left out of admission because they "hold no worker while they wait"
(docs/OPERATIONS.md, "Load shedding"), but each one reads the database when it starts, five
times a second while it waits, and once more when it ends, and nothing bounds how many
there are.

A waiting ``GetTask`` reads its task's version at once and again every
``FALLBACK_POLL_SECONDS`` (0.2 s, reachstore_server/reach/watch.py), and reads the whole
task when it changes, each read on the process's default thread pool
(reachstore_server/reach/api/servicer.py, ``_wait_for_change``). A real `reachstore up`,
one open task (its action accepted by the receiver and pending there, its version moving
as reach follows it up), and 1000 callers long-polling it, each polling again as soon as
its poll ends, as the API invites: thousands of database reads a second that admission
never sees. Meanwhile an agent lists its tasks, allowing 1 s: the calls admission does
bound queue behind the pollers' reads, and some are neither served in time nor refused at
once; they run out their deadline, for as long as the pollers keep coming back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import multiprocessing
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from tests.e2e.system import RunningSystem
from tests.e2e.test_reach_crash import action_spec
from tests.reach.peers import HttpReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

POLLERS = 1000
WAIT_MS = 30000
PROBE_DEADLINE_S = 1.0
POLL_S = 12.0


def _probes(address: str, count: int) -> list[tuple[str, float]]:
    """The agent's calls, one after the other, from this process."""
    ended: list[tuple[str, float]] = []
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.ReachServiceStub(channel)
        for _ in range(count):
            started = time.monotonic()
            try:
                stub.ListTasks(pb.ListTasksRequest(page_size=5), timeout=PROBE_DEADLINE_S)
                outcome = "OK"
            except grpc.RpcError as exc:
                outcome = exc.code().name
            ended.append((outcome, time.monotonic() - started))
            time.sleep(0.2)
    return ended


async def _poll(address: str, task_id: str, seconds: float) -> None:
    """POLLERS callers, each long-polling the task again as soon as a poll ends."""
    channels = [grpc.aio.insecure_channel(address) for _ in range(POLLERS // 100)]
    until = time.monotonic() + seconds

    async def poller(n: int) -> None:
        stub = pb_grpc.ReachServiceStub(channels[n % len(channels)])
        while time.monotonic() < until:
            try:
                await stub.GetTask(
                    pb.GetTaskRequest(task_id=task_id, wait_ms=WAIT_MS),
                    timeout=max(until - time.monotonic(), 0.1),
                )
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.5)

    try:
        await asyncio.gather(*(poller(n) for n in range(POLLERS)))
    finally:
        for channel in channels:
            await channel.close()


def _pollers(address: str, task_id: str, seconds: float) -> None:
    """In a process of its own, so the agent's calls do not share the pollers' loop."""
    asyncio.run(_poll(address, task_id, seconds))


def _under_polls(address: str, task_id: str) -> list[tuple[str, float]]:
    pollers = multiprocessing.get_context("fork").Process(
        target=_pollers, args=(address, task_id, POLL_S)
    )
    pollers.start()
    try:
        time.sleep(3.0)  # every poller is at work
        return _probes(address, 20)
    finally:
        pollers.join(timeout=POLL_S + 30)
        if pollers.is_alive():
            pollers.kill()


@contextlib.contextmanager
def pending_task(tmp_path: Path) -> Iterator[tuple[RunningSystem, str]]:
    """A real `reachstore up` and one open task: its action accepted by the receiver and
    pending there, so the task rests and long polls of it wait."""
    config = tmp_path / "reach.toml"
    with HttpReceiver(default="accept:600") as receiver:
        config.write_text(
            f"""
[channels.hook]
kind = "webhook"
description = "posts to the test receiver, which accepts and keeps the work pending"
action_types = ["notify"]
idempotency_params = ["n"]
[channels.hook.webhook]
url = "{receiver.url}"
status_url = "{receiver.status_url}"
""",
            encoding="utf-8",
        )
        system = RunningSystem(tmp_path / "data", {"REACHSTORE_REACH_CONFIG": str(config)})
        system.start()
        try:
            with grpc.insecure_channel(system.reach_addr) as channel:
                stub = pb_grpc.ReachServiceStub(channel)
                task_id = stub.SubmitTask(
                    pb.SubmitTaskRequest(
                        entity_id=f"E-{uuid.uuid4().hex[:8]}",
                        actions=[action_spec("a0", "hook", {"n": 1})],
                    ),
                    timeout=15,
                ).task.task_id
                deadline = time.monotonic() + 30
                while True:  # the action is sent and pending at the receiver: the task rests
                    task = stub.GetTask(pb.GetTaskRequest(task_id=task_id), timeout=10).task
                    if task.actions[0].state == pb.ACTION_STATE_PENDING:
                        break
                    assert time.monotonic() < deadline, task
                    time.sleep(0.2)
                time.sleep(1.0)
            yield system, task_id
        finally:
            assert system.stop() == 0


def test_long_polls_do_not_starve_the_calls_admission_bounds(tmp_path: Path) -> None:
    with pending_task(tmp_path) as (system, task_id):
        quiet = _probes(system.reach_addr, 10)
        probes = _under_polls(system.reach_addr, task_id)
    outcomes = collections.Counter(outcome for outcome, _ in probes)
    seen = (
        f"ListTasks alone: {dict(collections.Counter(o for o, _ in quiet))}, median "
        f"{statistics.median(s for _, s in quiet):.3f} s; beside {POLLERS} long polls: "
        f"{dict(outcomes)}, median {statistics.median(s for _, s in probes):.3f} s"
    )
    assert all(outcome == "OK" for outcome, _ in quiet), seen
    # Served, or refused at once with a wait: never left to run out its deadline.
    assert outcomes["DEADLINE_EXCEEDED"] == 0, seen

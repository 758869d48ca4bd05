"""Reach's ``GetTask`` escapes admission altogether, also when it is not a long poll
(docs/OPERATIONS.md, "Load shedding": "Long polls (``GetTask`` with ``wait_ms``) are not
counted").

Admission leaves out every method whose request *has* a ``wait_ms`` field
(reachstore_server/common/grpc_server.py, ``_admitted_methods``), not the calls that set
it: a ``GetTask`` with ``wait_ms`` 0 is a plain database read like ``GetAction``, and no
bound applies to it. A flood of them is served without limit, each taking a thread of the
process's default pool and a database connection, beside the calls admission does bound.
A real `reachstore up` whose services serve one call at once and let none wait
(REACHSTORE_ADMIT_CONCURRENCY=1, REACHSTORE_ADMIT_WAIT_MS=0): 64 concurrent ``GetAction``
calls are mostly refused, as the bound says; 64 concurrent ``GetTask`` calls without a wait
are all served.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from tests.e2e.system import RunningSystem

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

CALLS = 64
ROUNDS = 5


async def _at_once(address: str, which: str) -> collections.Counter[str]:
    ended: collections.Counter[str] = collections.Counter()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ReachServiceStub(channel)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "GetAction": lambda: stub.GetAction(
                pb.GetActionRequest(action_id="a-none"), timeout=10
            ),
            "GetTask": lambda: stub.GetTask(pb.GetTaskRequest(task_id="t-none"), timeout=10),
        }

        async def one() -> None:
            try:
                await calls[which]()
                ended["served"] += 1
            except grpc.aio.AioRpcError as exc:
                unavailable = exc.code() == grpc.StatusCode.UNAVAILABLE
                ended["refused" if unavailable else "served"] += 1

        for _ in range(ROUNDS):
            await asyncio.gather(*(one() for _ in range(CALLS)))
    return ended


def test_a_get_task_without_a_wait_is_bounded_like_any_read(tmp_path: Path) -> None:
    system = RunningSystem(
        tmp_path, {"REACHSTORE_ADMIT_CONCURRENCY": "1", "REACHSTORE_ADMIT_WAIT_MS": "0"}
    )
    system.start()
    try:
        actions = asyncio.run(_at_once(system.reach_addr, "GetAction"))
        tasks = asyncio.run(_at_once(system.reach_addr, "GetTask"))
    finally:
        assert system.stop() == 0
    seen = f"{ROUNDS} x {CALLS} at once: GetAction {dict(actions)}; GetTask {dict(tasks)}"
    assert actions["refused"] > 0, seen  # the bound holds for a read
    assert tasks["refused"] > 0, seen  # and for the same read under another name

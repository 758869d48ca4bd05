"""Under a flood of reads, an agent cannot cancel an action: ``CancelAction`` is ranked as
new work and waits behind every read (docs/OPERATIONS.md, "Load shedding": reads are
preferred over *new ingest*).

Admission ranks a call by the scope it needs (reachstore_server/common/grpc_server.py,
``_WORKLOAD_SCOPES``): the ``reach`` scope counts as "adding work", so ``CancelAction``,
which withdraws work (an action about to be sent, a send to be called back), is a write and
takes a freed slot only when no read is waiting. A real reach service serving 2 calls at
once (REACHSTORE_ADMIT_CONCURRENCY=2, so that the bound, not this machine's speed, is what
the flood meets; with the default 16 a larger flood does the same) and 64 clients listing
tasks as fast as they are answered: the read line never empties, so every cancel waits its
whole allowance and is refused, while the reads keep being served. The action an
agent meant to stop goes out meanwhile; a flood of cheap reads (any key with the ``read``
scope) is enough to take cancelling away from every tenant of the process.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable
from pathlib import Path

import grpc
import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from tests.e2e.system import RunningSystem

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

READERS = 64
FLOOD_S = 8.0


async def _contest(address: str) -> dict[str, collections.Counter[str]]:
    ended: dict[str, collections.Counter[str]] = {
        "ListTasks (flood)": collections.Counter(),
        "GetAction": collections.Counter(),
        "CancelAction": collections.Counter(),
    }
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ReachServiceStub(channel)
        until = time.monotonic() + FLOOD_S

        async def call(name: str, made: Awaitable[object]) -> None:
            try:
                await made
                ended[name]["served"] += 1
            except grpc.aio.AioRpcError as exc:
                served = exc.code() != grpc.StatusCode.UNAVAILABLE
                ended[name]["served" if served else exc.code().name] += 1

        async def reader() -> None:
            while time.monotonic() < until:
                await call(
                    "ListTasks (flood)", stub.ListTasks(pb.ListTasksRequest(page_size=5), timeout=5)
                )

        async def probe(name: str) -> None:
            await asyncio.sleep(1.0)  # the flood is under way
            while time.monotonic() < until - 1.0:
                made: Awaitable[object]
                if name == "GetAction":
                    made = stub.GetAction(pb.GetActionRequest(action_id="a-none"), timeout=5)
                else:
                    made = stub.CancelAction(pb.CancelActionRequest(action_id="a-none"), timeout=5)
                await call(name, made)
                await asyncio.sleep(0.1)

        await asyncio.gather(
            *(reader() for _ in range(READERS)), probe("GetAction"), probe("CancelAction")
        )
    return ended


def test_cancelling_is_not_starved_by_a_flood_of_reads(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path, {"REACHSTORE_ADMIT_CONCURRENCY": "2"})
    system.start()
    try:
        ended = asyncio.run(_contest(system.reach_addr))
    finally:
        assert system.stop() == 0
    seen = ", ".join(f"{name}: {dict(counts)}" for name, counts in ended.items())
    flood, reads, cancels = ended.values()
    assert flood["served"] > 0 and reads["served"] > 0, seen
    # A cancel is served at least as often as a read of the same cost.
    cancel_share = cancels["served"] / max(sum(cancels.values()), 1)
    read_share = reads["served"] / max(sum(reads.values()), 1)
    assert cancel_share >= read_share / 2, seen

"""Callers that give up, while queued for a slot or while being served, must not take the
slot with them (docs/OPERATIONS.md, "Load shedding").

A slot that a cancelled call never hands back shrinks the bound for good: after enough
abandoned calls the service refuses everything forever, and no burst being over brings it
back. A real query service with 4 slots and searches slowed to a known 300 ms; rounds of
callers that cancel while they wait in line, callers that cancel while their search runs,
and callers whose slot is handed over in the same instant they give up. Afterwards, with
the service quiet, the full capacity must be there: 4 calls served at once and 12 more
queued and served within the wait allowed, none refused.

This attack found the guarantee holding (the test passes); it is kept because the existing
tests only check callers leaving the line in-process (tests/unit/test_admission.py).
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

import grpc
import httpx
import pytest

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.conftest import ingest
from tests.e2e.system import RunningSystem

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

DELAY_MS = 300
SLOTS = 4
ROUNDS = 6


async def _abuse(address: str) -> collections.Counter[str]:
    """One round: SLOTS slow calls served, 3 * SLOTS callers queued behind them, and every
    caller but a few cancels at a different moment (in line, mid-search, at hand-over)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.QueryServiceStub(channel)
        request = pb.QueryRequest(namespaces=["slow"], query="rivers", top_k=3)
        ended: collections.Counter[str] = collections.Counter()

        async def one(cancel_after: float | None) -> None:
            call = stub.Query(request, timeout=5.0)
            if cancel_after is not None:
                await asyncio.sleep(cancel_after)
                call.cancel()
            try:
                await call
                ended["OK"] += 1
            except asyncio.CancelledError:
                ended["cancelled"] += 1
            except grpc.aio.AioRpcError as exc:
                ended[exc.code().name] += 1

        moments = [None, 0.05, 0.15, 0.29, 0.30, 0.31, 0.45, 0.6]
        await asyncio.gather(*(one(moments[n % len(moments)]) for n in range(SLOTS * 4)))
        return ended


async def _capacity(address: str, count: int) -> collections.Counter[str]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.QueryServiceStub(channel)
        request = pb.QueryRequest(namespaces=["slow"], query="rivers", top_k=3)

        async def one() -> str:
            try:
                await stub.Query(request, timeout=5.0)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name
            return "OK"

        return collections.Counter(await asyncio.gather(*(one() for _ in range(count))))


def test_cancelled_callers_leave_every_slot_behind(tmp_path: Path) -> None:
    system = RunningSystem(
        tmp_path,
        {
            "REACHSTORE_FAULT_NAMESPACE_DELAY_MS": f"slow={DELAY_MS}",
            "REACHSTORE_ADMIT_CONCURRENCY": str(SLOTS),
        },
    )
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            ingest(http, "slow", [{"document_id": "s", "text": "Rivers flow into lakes."}])
        assert asyncio.run(_capacity(system.query_addr, SLOTS)) == {"OK": SLOTS}
        rounds = [asyncio.run(_abuse(system.query_addr)) for _ in range(ROUNDS)]
        assert sum(r["cancelled"] for r in rounds) > ROUNDS * SLOTS, rounds
        time.sleep(1.0)  # the last searches of abandoned calls end

        # Full capacity again: SLOTS at once, and 2 * SLOTS more queued within the wait.
        after = asyncio.run(_capacity(system.query_addr, SLOTS * 3))
        assert after == {"OK": SLOTS * 3}, (rounds, after)
    finally:
        assert system.stop() == 0

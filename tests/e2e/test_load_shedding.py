"""More calls than a service can serve in time: what it cannot serve, it refuses at once,
transient, with a wait derived from its backlog, instead of letting every caller queue
until its deadline runs out (docs/OPERATIONS.md, "Load shedding").

A real `reachstore up`; the query service's searches are slowed by fault injection so that
the service's capacity is known (each search holds a search thread for 300 ms) whatever
the machine's speed, and a burst of callers, each with a 1.5 s deadline, asks for far more.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from grpc_status import rpc_status

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.conftest import ingest
from tests.e2e.system import RunningSystem

# Times its own burst: run with the machine to itself (the Makefile's "alone" pass).
pytestmark = [pytest.mark.e2e, pytest.mark.alone]

DELAY_MS = 300
DEADLINE_S = 1.5
BURST = 96


def _failure(error: grpc.aio.AioRpcError) -> pf_pb2.PartialFailure | None:
    status = rpc_status.from_call(error)
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(pf_pb2.PartialFailure.DESCRIPTOR):
            failure = pf_pb2.PartialFailure()
            detail.Unpack(failure)
            return failure
    return None


async def _burst(address: str, count: int) -> list[tuple[str, float, Any]]:
    """``count`` queries at once; each ends as (outcome, seconds, failure or None)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.QueryServiceStub(channel)
        request = pb.QueryRequest(namespaces=["slow"], query="rivers", top_k=3)

        async def one() -> tuple[str, float, Any]:
            started = time.monotonic()
            try:
                await stub.Query(request, timeout=DEADLINE_S)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name, time.monotonic() - started, _failure(exc)
            return "OK", time.monotonic() - started, None

        return await asyncio.gather(*(one() for _ in range(count)))


def test_a_burst_beyond_capacity_is_refused_at_once_not_timed_out(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path, {"REACHSTORE_FAULT_NAMESPACE_DELAY_MS": f"slow={DELAY_MS}"})
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            ingest(http, "slow", [{"document_id": "s", "text": "Rivers flow into lakes."}])
        # The service learns how long a call takes from the calls it serves.
        warm = asyncio.run(_burst(system.query_addr, 4))
        assert [outcome for outcome, _, _ in warm] == ["OK"] * 4, warm

        ended = asyncio.run(_burst(system.query_addr, BURST))
        outcomes = [outcome for outcome, _, _ in ended]
        served = outcomes.count("OK")
        refused = [(seconds, failure) for outcome, seconds, failure in ended if outcome != "OK"]
        # No caller waited out its deadline: each was served, or told at once to come back.
        assert "DEADLINE_EXCEEDED" not in outcomes, outcomes
        assert set(outcomes) <= {"OK", "UNAVAILABLE"}, outcomes
        assert served > 0 and refused, outcomes
        for seconds, failure in refused:
            assert failure is not None
            assert failure.error_code == "SERVICE_OVERLOADED"
            assert failure.category == pf_pb2.CATEGORY_TRANSIENT and failure.retryable
            # The advised wait comes from the backlog: at least one call's service time.
            assert failure.retry_after_ms >= DELAY_MS / 2, failure
            backlog = failure.structured_data
            assert backlog["limit"] >= 1 and backlog["drain_ms"] > 0, backlog
            assert seconds < DEADLINE_S
        # Refused at once: most refusals came well before the deadline, without queueing.
        quick = [seconds for seconds, _ in refused if seconds < DEADLINE_S / 2]
        assert len(quick) >= len(refused) // 2, sorted(seconds for seconds, _ in refused)

        # The service is not left behind: once the burst is over, a call is served at once.
        after = asyncio.run(_burst(system.query_addr, 1))
        assert after[0][0] == "OK", after
    finally:
        assert system.stop() == 0

"""A call whose deadline the service knows it cannot meet is admitted anyway and ends as
``DEADLINE_EXCEEDED``, instead of being refused at once (docs/OPERATIONS.md, "Load
shedding": a service admits work against "a deadline that cannot be met" and refuses what it
cannot serve in time with ``UNAVAILABLE``/``SERVICE_OVERLOADED``).

Admission compares a caller's deadline with the mean call time only when the call has to
wait for a slot (reachstore_server/common/admission.py, ``Admission.enter``). While a slot
is free, a call is admitted whatever its deadline: a real query service whose searches take
a known 1.2 s (fault injection), a mean it has measured at about 1.2 s, and a burst of
callers each allowing 0.6 s. The ones that found a free slot hold a search thread until
their deadline runs out and answer ``DEADLINE_EXCEEDED``, with no advice on when to come
back; only the callers that had to queue are told ``SERVICE_OVERLOADED`` with a wait. Under
pressure from impatient clients, the service spends its slots on answers nobody will read.
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.conftest import ingest
from tests.e2e.system import RunningSystem
from tests.e2e.test_load_shedding import _failure

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

DELAY_MS = 1200
SHORT_S = 0.6
BURST = 48


async def _burst(address: str, count: int, deadline_s: float) -> list[Any]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.QueryServiceStub(channel)
        request = pb.QueryRequest(namespaces=["slow"], query="rivers", top_k=3)
        await channel.channel_ready()

        async def one() -> tuple[str, float, Any]:
            started = time.monotonic()
            try:
                await stub.Query(request, timeout=deadline_s)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name, time.monotonic() - started, _failure(exc)
            return "OK", time.monotonic() - started, None

        return await asyncio.gather(*(one() for _ in range(count)))


def test_a_deadline_shorter_than_the_mean_call_is_refused_not_timed_out(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path, {"REACHSTORE_FAULT_NAMESPACE_DELAY_MS": f"slow={DELAY_MS}"})
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            ingest(http, "slow", [{"document_id": "s", "text": "Rivers flow into lakes."}])
        # The service learns what a call costs: about 1.2 s. The deadline is half of that, and
        # long enough that 48 refusals get out on a machine busy with other work.
        for _ in range(3):
            warm = asyncio.run(_burst(system.query_addr, 4, 5.0))
            assert [outcome for outcome, _, _ in warm] == ["OK"] * 4, warm

        ended = asyncio.run(_burst(system.query_addr, BURST, SHORT_S))
        outcomes = collections.Counter(outcome for outcome, _, _ in ended)
        codes = collections.Counter(f.error_code for _, _, f in ended if f is not None)
        slowest = max(elapsed for _, elapsed, _ in ended)
        seen = (
            f"{BURST} callers allowing {SHORT_S} s each: {dict(outcomes)}, {dict(codes)}, "
            f"slowest answer {slowest:.3f} s"
        )
        # Each caller is served or refused with advice; none is left to time out.
        assert outcomes["DEADLINE_EXCEEDED"] == 0, seen
    finally:
        assert system.stop() == 0

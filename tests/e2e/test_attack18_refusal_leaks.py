"""What a refusal under overload costs and tells, tried from the outside on a real
`reachstore up` whose searches are slowed by fault injection so the service is full:

- a flood of calls carrying made-up API keys must be shed like any other call, not each
  cost a read of the key table before the service even asks whether it has room;
- a refusal must not tell one caller how many calls the whole process (every tenant) is
  serving and queueing: the wait it advises is all a caller needs
  (docs/OPERATIONS.md, "Load shedding").
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import grpc
import httpx
import pytest

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.conftest import ingest
from tests.e2e.system import RunningSystem
from tests.e2e.test_load_shedding import _failure

# Times its own burst: run with the machine to itself (the Makefile's "alone" pass).
pytestmark = [pytest.mark.e2e, pytest.mark.alone]

DELAY_MS = 400
FILL = 48  # slow searches that keep every slot of the query service busy
FLOOD = 40  # calls with made-up keys sent while it is full


async def _overloaded(address: str) -> tuple[list[tuple[str, str]], list[pf_pb2.PartialFailure]]:
    """Fills the service with slow searches, then floods it with made-up keys; returns the
    flood's (status, error code) and every failure detail either kind of caller got."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.QueryServiceStub(channel)
        request = pb.QueryRequest(namespaces=["slow"], query="rivers", top_k=3)
        for _ in range(3):  # the service learns what a search costs
            await stub.Query(request, timeout=10)

        async def slow() -> pf_pb2.PartialFailure | None:
            try:
                await stub.Query(request, timeout=5)
            except grpc.aio.AioRpcError as exc:
                return _failure(exc)
            return None

        async def made_up() -> tuple[str, pf_pb2.PartialFailure | None]:
            key = f"rsk_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"
            try:
                await stub.Query(request, timeout=5, metadata=(("authorization", f"Bearer {key}"),))
            except grpc.aio.AioRpcError as exc:
                return exc.code().name, _failure(exc)
            return "OK", None

        fillers = [asyncio.ensure_future(slow()) for _ in range(FILL)]
        await asyncio.sleep(0.15)  # every slot taken, the rest waiting
        flood = await asyncio.gather(*(made_up() for _ in range(FLOOD)))
        failures = [f for _, f in flood if f is not None]
        failures += [f for f in await asyncio.gather(*fillers) if f is not None]
        return [(status, f.error_code if f else "") for status, f in flood], failures


def test_made_up_keys_are_shed_and_refusals_do_not_count_the_process(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path, {"REACHSTORE_FAULT_NAMESPACE_DELAY_MS": f"slow={DELAY_MS}"})
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            ingest(http, "slow", [{"document_id": "s", "text": "Rivers flow into lakes."}])
        flood, failures = asyncio.run(_overloaded(system.query_addr))

        # While the service is full, a made-up key is refused for lack of room before its
        # key is looked up: most of the flood never reaches the key table.
        shed = [code for status, code in flood if code == "SERVICE_OVERLOADED"]
        looked_up = [code for status, code in flood if code == "AUTH_INVALID_KEY"]
        assert len(shed) >= FLOOD // 2, flood
        assert len(looked_up) <= FLOOD // 2, flood
        assert all(status != "OK" for status, _ in flood), flood

        # A refusal advises a wait and names the bound; it does not count other callers.
        refusals = [f for f in failures if f.error_code == "SERVICE_OVERLOADED"]
        assert refusals, "nothing was refused: the service was not full"
        for failure in refusals:
            assert failure.retry_after_ms > 0, failure
            data = dict(failure.structured_data)
            assert "in_flight" not in data and "waiting" not in data, data
            assert "waiting" not in failure.message and "serving" not in failure.message, (
                failure.message
            )
    finally:
        assert system.stop() == 0

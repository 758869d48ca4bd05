"""Cheap calls make the query service take on more slow ones than it can serve in time:
they time out instead of being refused at once (docs/OPERATIONS.md, "Load shedding").

Admission judges whether a caller can wait for a slot by one moving mean of all call times
in the process (reachstore_server/common/admission.py): cheap look-ups and searches alike.
After a run of cheap calls (look-ups of documents that do not exist, a few milliseconds
each) the mean says a call costs almost nothing, so a burst of real searches (300 ms each,
by fault injection) is let into the line nearly whole: the expected wait of the 80th caller
is a few tens of milliseconds by that mean. The line then takes seconds to drain; callers
admitted near the end of their allowed wait start their search with less time left than it
takes, and answer ``DEADLINE_EXCEEDED``; the rest are refused only after waiting a full
second, not at once. With the mean measured on the searches themselves (the existing
tests/e2e/test_load_shedding.py warms up that way), the same burst is handled cleanly.
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

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

DELAY_MS = 300
DEADLINE_S = 1.1
BURST = 96
CHEAP = 200


async def _cheap(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.QueryServiceStub(channel)
        for _ in range(CHEAP):
            try:
                await stub.GetDocument(
                    pb.GetDocumentRequest(namespace="slow", document_id="missing"), timeout=5
                )
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.NOT_FOUND, exc


async def _burst(address: str) -> list[tuple[str, float]]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.QueryServiceStub(channel)
        request = pb.QueryRequest(namespaces=["slow"], query="rivers", top_k=3)

        async def one() -> tuple[str, float]:
            started = time.monotonic()
            try:
                await stub.Query(request, timeout=DEADLINE_S)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name, time.monotonic() - started
            return "OK", time.monotonic() - started

        ended: list[Any] = await asyncio.gather(*(one() for _ in range(BURST)))
        return ended


def test_cheap_calls_do_not_let_slow_ones_queue_past_their_deadline(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path, {"REACHSTORE_FAULT_NAMESPACE_DELAY_MS": f"slow={DELAY_MS}"})
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            ingest(http, "slow", [{"document_id": "s", "text": "Rivers flow into lakes."}])
        asyncio.run(_cheap(system.query_addr))
        ended = asyncio.run(_burst(system.query_addr))
    finally:
        assert system.stop() == 0
    outcomes = collections.Counter(outcome for outcome, _ in ended)
    refused_after = sorted(round(s, 2) for outcome, s in ended if outcome == "UNAVAILABLE")
    seen = (
        f"{BURST} searches allowing {DEADLINE_S} s after {CHEAP} cheap calls: {dict(outcomes)}; "
        f"refusals after {refused_after[:1]}..{refused_after[-1:]} s"
    )
    assert outcomes["DEADLINE_EXCEEDED"] == 0, seen

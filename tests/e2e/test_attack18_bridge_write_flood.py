"""Through the REST bridge, a flood of large document batches must not starve queries
(docs/OPERATIONS.md, "Load shedding": "Queries and reads are preferred over new ingest under
pressure").

Admission stands in front of each gRPC service; the bridge has none. Every request reaching
it is read, parsed from JSON and turned into a protobuf message on its one event loop before
any service can refuse it (reachstore_server/bridge/app.py, ``_call``), in arrival order,
reads and writes alike. A real `reachstore up`; a few clients post batches of 100
documents of 8 KB each as fast as they are answered (accepted, or refused with 503 and a
wait they ignore, as a misbehaving client would), while one agent asks a one-word question
through the same bridge, allowing 2 s. The question should be answered as quickly as
without the flood.

This attack found the guarantee holding (the test passes): the bridge's parsing of the
flood left the questions answered well within their time. It is kept because no other test
sends a flood through the bridge.
"""

from __future__ import annotations

import asyncio
import collections
import statistics
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ingest
from tests.e2e.system import RunningSystem

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

FLOODERS = 8
FLOOD_S = 12.0
QUERY_TIMEOUT_S = 2.0
TEXT = "Shipment records of the northern warehouse, lot and carrier noted. " * 120


def _batch(prefix: str, count: int = 100) -> dict[str, object]:
    return {
        "documents": [
            {"document_id": f"{prefix}-{n}", "text": f"{n} {TEXT}"} for n in range(count)
        ],
        "on_duplicate": "overwrite",
    }


async def _queries(url: str, until: float) -> list[tuple[str, float]]:
    """Questions one after the other until ``until``: (outcome, seconds) each."""
    ended: list[tuple[str, float]] = []
    async with httpx.AsyncClient(base_url=url, timeout=QUERY_TIMEOUT_S) as http:
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                reply = await http.post(
                    "/api/v1/query", json={"namespaces": ["kb"], "query": "rivers"}
                )
                outcome = str(reply.status_code)
            except httpx.TimeoutException:
                outcome = "timeout"
            ended.append((outcome, time.monotonic() - started))
            await asyncio.sleep(0.1)
    return ended


async def _flood(url: str, until: float) -> collections.Counter[str]:
    statuses: collections.Counter[str] = collections.Counter()
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:

        async def one(worker: int) -> None:
            round_ = 0
            while time.monotonic() < until:
                round_ += 1
                try:
                    reply = await http.post(
                        "/api/v1/namespaces/bulk/documents:batchCreate",
                        json=_batch(f"w{worker}r{round_}"),
                    )
                    statuses[str(reply.status_code)] += 1
                except httpx.HTTPError as exc:
                    statuses[type(exc).__name__] += 1

        await asyncio.gather(*(one(n) for n in range(FLOODERS)))
    return statuses


async def _under_flood(url: str) -> tuple[list[tuple[str, float]], collections.Counter[str]]:
    until = time.monotonic() + FLOOD_S
    flood = asyncio.create_task(_flood(url, until))
    await asyncio.sleep(1.0)  # the flood is under way
    asked = await _queries(url, until)
    return asked, await flood


def test_a_flood_of_batches_through_the_bridge_does_not_starve_queries(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path, {"REACHSTORE_INGEST_MAX_QUEUE_S": "2"})
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            ingest(http, "kb", [{"document_id": "r", "text": "Rivers flow into lakes."}])
            assert http.post("/api/v1/namespaces", json={"name": "bulk"}).status_code in (
                200,
                201,
                409,
            )
        quiet = asyncio.run(_queries(system.http_url, time.monotonic() + 3))
        asked, flood = asyncio.run(_under_flood(system.http_url))
        outcomes = collections.Counter(outcome for outcome, _ in asked)
        slowest = max(seconds for _, seconds in asked)
        seen = (
            f"alone: {len(quiet)} questions, median "
            f"{statistics.median(s for _, s in quiet):.3f} s; under the flood ({dict(flood)}): "
            f"{dict(outcomes)}, median {statistics.median(s for _, s in asked):.3f} s, "
            f"slowest {slowest:.2f} s"
        )
        assert all(outcome == "200" for outcome, _ in quiet), seen
        # Every question is answered, in time, while new documents wait or are refused.
        assert outcomes == {"200": len(asked)}, seen
        assert slowest < QUERY_TIMEOUT_S / 2, seen
    finally:
        assert system.stop() == 0

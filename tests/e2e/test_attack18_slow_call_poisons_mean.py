"""A few expensive queries make the query service refuse cheap ones it could serve at once,
and tell their callers to stay away for many seconds (docs/OPERATIONS.md, "Load shedding").

Admission keeps one moving mean of call times for the whole process
(reachstore_server/common/admission.py): every method, every namespace, cheap look-ups and
expensive searches alike. A handful of slow searches (here a namespace whose searches are
slowed to 6 s by fault injection; in production, a large namespace or a heavy filter, which
any holder of a read key can send) lift that mean to seconds. A burst of 48 cheap searches
of another namespace (100 ms each, drained in well under a second when the mean is right)
that follows is then judged by it: every caller beyond the 16 in flight is refused at once
(the expected wait, one whole mean, exceeds the 1 s a call may wait), and each refusal
advises a ``retry_after_ms`` of many seconds "derived from the backlog". Clients that obey
the advice stay away far longer than the backlog lasts; the service sheds work it could
serve in time.
"""

from __future__ import annotations

import asyncio
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

SLOW_MS = 6000
FAST_MS = 100
SLOW_CALLS = 6
BURST = 48
DEADLINE_S = 5.0


async def _queries(address: str, namespace: str, count: int, timeout_ms: int = 0) -> list[Any]:
    """``count`` queries of ``namespace`` at once; each ends as (outcome, seconds, failure)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.QueryServiceStub(channel)
        request = pb.QueryRequest(
            namespaces=[namespace], query="rivers", top_k=3, timeout_ms=timeout_ms
        )

        async def one() -> tuple[str, float, Any]:
            started = time.monotonic()
            try:
                await stub.Query(request, timeout=DEADLINE_S + SLOW_MS / 1000)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name, time.monotonic() - started, _failure(exc)
            return "OK", time.monotonic() - started, None

        return await asyncio.gather(*(one() for _ in range(count)))


async def _burst(address: str) -> list[Any]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.QueryServiceStub(channel)
        request = pb.QueryRequest(namespaces=["fast"], query="rivers", top_k=3)

        async def one() -> tuple[str, float, Any]:
            started = time.monotonic()
            try:
                await stub.Query(request, timeout=DEADLINE_S)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name, time.monotonic() - started, _failure(exc)
            return "OK", time.monotonic() - started, None

        return await asyncio.gather(*(one() for _ in range(BURST)))


def test_slow_calls_do_not_make_cheap_calls_refused_for_seconds(tmp_path: Path) -> None:
    system = RunningSystem(
        tmp_path, {"REACHSTORE_FAULT_NAMESPACE_DELAY_MS": f"slow={SLOW_MS},fast={FAST_MS}"}
    )
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            for name in ("fast", "slow"):
                ingest(http, name, [{"document_id": "d", "text": "Rivers flow into lakes."}])
        warm = asyncio.run(_queries(system.query_addr, "fast", 4))
        assert [outcome for outcome, _, _ in warm] == ["OK"] * 4, warm

        # The same burst with the mean untouched: how long the service takes to drain it.
        baseline = asyncio.run(_burst(system.query_addr))
        baseline_drain = max(seconds for _, seconds, _ in baseline)

        # A few expensive searches, well within the bound (6 calls, 16 slots).
        slow = asyncio.run(_queries(system.query_addr, "slow", SLOW_CALLS, SLOW_MS + 2000))
        assert [outcome for outcome, _, _ in slow] == ["OK"] * SLOW_CALLS, slow

        # The cheap burst again: nothing about it changed.
        ended = asyncio.run(_burst(system.query_addr))
        outcomes = [outcome for outcome, _, _ in ended]
        refused = [failure for outcome, _, failure in ended if outcome != "OK"]
        advised = sorted(f.retry_after_ms for f in refused if f is not None)
        drain = max(seconds for _, seconds, _ in ended)
        summary = (
            f"baseline: {[o for o, _, _ in baseline].count('OK')}/{BURST} served, drained in "
            f"{baseline_drain:.2f} s; after {SLOW_CALLS} slow calls: {outcomes.count('OK')}"
            f"/{BURST} served in {drain:.2f} s, retry_after_ms {advised[:1]}..{advised[-1:]}, "
            f"mean_call_ms {[dict(f.structured_data).get('mean_call_ms') for f in refused][:1]}"
        )
        # A burst the service drains well within the callers' deadlines is served ...
        assert baseline_drain < DEADLINE_S / 2, summary
        assert outcomes.count("OK") == BURST, summary
        # ... and a refusal, if any, never advises a wait many times the backlog's drain.
        assert all(ms <= max(1000, 4000 * baseline_drain) for ms in advised), summary
    finally:
        assert system.stop() == 0

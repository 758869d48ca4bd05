"""What the per-RPC metrics cost: calls/s of one gRPC server without and with them.

Two servers made by ``create_server`` (the factory every service uses), the same in all
but ``metrics``, answer ``grpc.health.v1.Health/Check`` (the cheapest unary call they
have, so the wrapper's share is as large as it gets). One client calls them in
alternating rounds in the same run (``--rounds``, each ``--calls`` calls with
``--concurrency`` in flight), so the machine's drift falls on both alike, and prints
calls/s of each, the ratio, and the added time per call. On a busy machine those rounds
vary more than the metrics cost, so the wrapper itself is timed too, without the network
(the same handler with and without metrics, alternating batches), then
``RpcMetrics.observe`` alone and the partial-answer look-up on a reply carrying none.

    .venv/bin/python bench/bench_rpc_metrics.py [--rounds 6] [--calls 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from reachstore.query.v1 import query_service_pb2  # noqa: E402
from reachstore_server.common.grpc_server import (  # noqa: E402
    Guards,
    _wrap_unary,
    create_server,
    mark_serving,
)
from reachstore_server.common.rpc_metrics import RpcMetrics, partial_category  # noqa: E402

METHOD = "/grpc.health.v1.Health/Check"


async def _round(stub: health_pb2_grpc.HealthStub, calls: int, concurrency: int) -> float:
    request = health_pb2.HealthCheckRequest()
    left = calls

    async def caller() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await stub.Check(request)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return calls / (time.perf_counter() - started)


async def _servers(args: argparse.Namespace) -> tuple[list[float], list[float]]:
    plain, plain_port, plain_health = create_server([], [], "127.0.0.1:0")
    metered, metered_port, metered_health = create_server(
        [], [], "127.0.0.1:0", metrics=RpcMetrics(CollectorRegistry())
    )
    for server, health in ((plain, plain_health), (metered, metered_health)):
        await server.start()
        await mark_serving(health, [])
    without: list[float] = []
    with_metrics: list[float] = []
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{plain_port}") as a,
        grpc.aio.insecure_channel(f"127.0.0.1:{metered_port}") as b,
    ):
        stubs = health_pb2_grpc.HealthStub(a), health_pb2_grpc.HealthStub(b)
        for stub in stubs:  # warm up: connections, caches
            await _round(stub, 300, args.concurrency)
        for i in range(args.rounds):
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for which in order:
                rate = await _round(stubs[which], args.calls, args.concurrency)
                (without if which == 0 else with_metrics).append(rate)
    await plain.stop(None)
    await metered.stop(None)
    return without, with_metrics


async def _wrapper_us(rounds: int, count: int) -> tuple[float, float]:
    """The wrapper every call runs through (``_wrap_unary``), without the network: the
    same handler behind ``Guards()`` and ``Guards(metrics=...)``, called in alternating
    batches on one event loop. Returns the median microseconds per call of each."""
    reply = query_service_pb2.QueryResponse()
    reply.meta.coverage_ratio = 1.0

    async def behavior(request: object, context: object) -> query_service_pb2.QueryResponse:
        return reply

    path = "/reachstore.query.v1.QueryService/Query"
    handlers = (
        _wrap_unary(behavior, path, Guards(), ()),
        _wrap_unary(behavior, path, Guards(metrics=RpcMetrics(CollectorRegistry())), ()),
    )
    request = query_service_pb2.QueryRequest()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for which, handler in enumerate(handlers):
            started = time.perf_counter()
            for _ in range(count):
                await handler(request, None)
            times[which].append((time.perf_counter() - started) / count * 1e6)
    return statistics.median(times[0]), statistics.median(times[1])


def _observe_ns(count: int) -> tuple[float, float]:
    metrics = RpcMetrics(CollectorRegistry())
    reply = query_service_pb2.QueryResponse()
    reply.meta.coverage_ratio = 1.0
    started = time.perf_counter()
    for _ in range(count):
        metrics.observe("/reachstore.query.v1.QueryService/Query", "OK", "none", 0.004)
    observe = (time.perf_counter() - started) / count * 1e9
    started = time.perf_counter()
    for _ in range(count):
        partial_category(reply)
    lookup = (time.perf_counter() - started) / count * 1e9
    return observe, lookup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    without, with_metrics = asyncio.run(_servers(args))
    a, b = statistics.median(without), statistics.median(with_metrics)
    print(f"{METHOD}, {args.rounds} alternating rounds of {args.calls} calls, "
          f"{args.concurrency} in flight")  # fmt: skip
    print(f"  without metrics: {a:8.0f} calls/s (median; rounds {[round(x) for x in without]})")
    print(
        f"  with metrics:    {b:8.0f} calls/s (median; rounds {[round(x) for x in with_metrics]})"
    )
    # Each round's pair ran back to back: their ratio cancels most of the machine's drift.
    paired = statistics.median(y / x for x, y in zip(without, with_metrics, strict=True))
    print(f"  ratio with/without: {b / a:.3f} of medians, {paired:.3f} median of paired rounds")
    print(f"  added per call (medians): {(1 / b - 1 / a) * 1e6:.1f} us")
    bare, metered = asyncio.run(_wrapper_us(args.rounds, 20_000))
    print(
        f"  the call wrapper alone (QueryResponse, no network): {bare:.2f} us without, "
        f"{metered:.2f} us with metrics: +{metered - bare:.2f} us per call"
    )
    observe, lookup = _observe_ns(200_000)
    print(
        f"  RpcMetrics.observe alone: {observe:.0f} ns; partial look-up on a reply: {lookup:.0f} ns"
    )


if __name__ == "__main__":
    main()

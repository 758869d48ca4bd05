"""What tracing costs a REST query: one bridge and query backend built untraced, one pair
built traced, queried in interleaved rounds in one process; prints the median per-query
time of each and their ratio.

Both pairs are the real components: ``create_app`` served by uvicorn, ``create_server``
with its interceptors, over loopback. The query servicer answers at once with two results,
so the figure is the cost of the bridge and gRPC path and of the spans on it (an ASGI span,
a gRPC client and server span per query), not of search or SQL. The traced pair exports
through the SDK's batching span processor, as production does, into an in-memory exporter
(emptied between rounds) instead of a network collector.

Off and on rounds alternate, so load from other work on the machine falls on both; the
figures are medians over rounds of each round's median.

    .venv/bin/python bench/bench_tracing.py [--rounds 7] [--queries 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import uvicorn
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reachstore.query.v1 import query_service_pb2 as query_pb2
from reachstore.query.v1 import query_service_pb2_grpc as query_grpc
from reachstore_server.bridge.app import create_app
from reachstore_server.bridge.backends import QUERY_SERVICE
from reachstore_server.bridge.main import bind_socket, uvicorn_config
from reachstore_server.common import otel
from reachstore_server.common.config import Settings
from reachstore_server.common.grpc_server import create_server, mark_serving

BODY = {"namespaces": ["bench"], "query": "refund policy"}


class Answers(query_grpc.QueryServiceServicer):
    async def Query(self, request: Any, context: Any) -> Any:
        results = [
            query_pb2.QueryResult(namespace="bench", document_id=f"doc-{i}", text="refunds")
            for i in range(2)
        ]
        meta = query_pb2.QueryMeta(coverage_ratio=1.0, namespaces_queried=["bench"])
        return query_pb2.QueryResponse(results=results, meta=meta)


@contextlib.asynccontextmanager
async def pair() -> AsyncIterator[httpx.AsyncClient]:
    """A query backend and a bridge in front of it; a client for the bridge. Tracing is
    whatever ``otel.enabled()`` says while this is entered."""
    names = [QUERY_SERVICE.full_name]
    registrar = [lambda s: query_grpc.add_QueryServiceServicer_to_server(Answers(), s)]
    server, port, health = create_server(registrar, names, "127.0.0.1:0")
    await server.start()
    await mark_serving(health, names)
    settings = Settings.from_env(
        {"REACHSTORE_QUERY_ADDR": f"127.0.0.1:{port}", "REACHSTORE_LISTEN": "127.0.0.1:0"}
    )
    app = create_app(settings, services=[QUERY_SERVICE])
    sock = bind_socket("127.0.0.1:0")
    web = uvicorn.Server(uvicorn_config(app, sock))
    serving = asyncio.ensure_future(web.serve(sockets=[sock]))
    host, web_port = sock.getsockname()[:2]
    try:
        async with httpx.AsyncClient(base_url=f"http://{host}:{web_port}", timeout=30) as http:
            # The bridge opens its channel on first use: do it now, in this pair's mode.
            for _ in range(20):
                (await http.post("/api/v1/query", json=BODY)).raise_for_status()
            yield http
    finally:
        web.should_exit = True
        await serving
        await server.stop(None)


async def one_round(http: httpx.AsyncClient, queries: int) -> float:
    """The median seconds per query over ``queries`` sequential queries."""
    times = []
    for _ in range(queries):
        start = time.perf_counter()
        reply = await http.post("/api/v1/query", json=BODY)
        times.append(time.perf_counter() - start)
        reply.raise_for_status()
    return statistics.median(times)


@contextlib.contextmanager
def traced(provider: Any) -> Iterator[None]:
    with otel.using(provider):
        yield


async def main(rounds: int, queries: int) -> None:
    exporter = InMemorySpanExporter()
    provider = otel.new_provider("bench", {})
    provider.add_span_processor(BatchSpanProcessor(exporter))
    async with contextlib.AsyncExitStack() as stack:
        plain = await stack.enter_async_context(pair())
        with traced(provider):
            tracing = await stack.enter_async_context(pair())
        off: list[float] = []
        on: list[float] = []
        for _ in range(rounds):
            off.append(await one_round(plain, queries))
            with traced(provider):
                on.append(await one_round(tracing, queries))
            provider.force_flush()
            exported = len(exporter.get_finished_spans())
            exporter.clear()
        provider.shutdown()
    off_ms, on_ms = statistics.median(off) * 1e3, statistics.median(on) * 1e3
    print(f"rounds {rounds} x {queries} queries, interleaved off/on")
    print("off per round (ms): " + " ".join(f"{t * 1e3:.2f}" for t in off))
    print("on  per round (ms): " + " ".join(f"{t * 1e3:.2f}" for t in on))
    print(f"spans exported in the last traced round: {exported}")
    print(f"median per query: off {off_ms:.2f} ms, on {on_ms:.2f} ms, on/off {on_ms / off_ms:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.queries))

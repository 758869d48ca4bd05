"""(b) Query load over gRPC, REST and in-process, and (c) recall@10 of the answers.

A load run starts ``concurrency`` worker threads that take query numbers from one shared
counter, so a slow worker never holds the others back and every query is timed where the
client sees it.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
from _stats import Pids, cpu_seconds, latency_stats

from reachstore.query.v1 import query_service_pb2 as qpb
from reachstore.query.v1 import query_service_pb2_grpc as qgrpc
from reachstore_server.common.grpc_server import GRPC_OPTIONS
from reachstore_server.embedding import UsemEmbedder
from reachstore_server.query.index import CancelToken, NamespaceIndex, merge_hits
from reachstore_server.query.indexes import IndexManager
from reachstore_server.storage.repository import SemanticStore

TOP_K = 10
TENANT = "default"

# A worker factory is called once inside each worker thread and returns (call, close);
# ``call(query_text)`` returns the result document ids and raises on any failure.
QueryCall = Callable[[str], list[str]]
WorkerFactory = Callable[[], tuple[QueryCall, Callable[[], None]]]


def run_load(
    factory: WorkerFactory,
    queries: Sequence[str],
    n: int,
    concurrency: int,
    pids: Pids | None = None,
) -> dict[str, Any]:
    """``n`` queries (cycling through ``queries``) from ``concurrency`` threads: latency
    stats, QPS, CPU ms per query of each process in ``pids`` (and this one), and the
    result ids of every query."""
    latencies = [0.0] * n
    results: list[list[str] | None] = [None] * n
    counter = itertools.count()
    errors: list[BaseException] = []
    # Workers connect first, then all start together with the clock.
    barrier = threading.Barrier(concurrency + 1)

    def worker() -> None:
        call, close = factory()
        try:
            barrier.wait()
            while (i := next(counter)) < n:
                t = time.perf_counter()
                results[i] = call(queries[i % len(queries)])
                latencies[i] = time.perf_counter() - t
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the caller
            errors.append(exc)
            barrier.abort()
        finally:
            close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    try:
        barrier.wait(timeout=120)
    except threading.BrokenBarrierError:
        pass
    cpu0 = cpu_seconds(pids or {})
    t0 = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - t0
    cpu1 = cpu_seconds(pids or {})
    if errors:
        raise RuntimeError(f"load run failed: {errors[0]!r}") from errors[0]
    stats: dict[str, Any] = dict(latency_stats(latencies))
    stats.update(
        concurrency=concurrency,
        wall_s=wall,
        qps=n / wall,
        cpu_ms_per_query={k: 1000 * (cpu1[k] - cpu0[k]) / n for k in cpu0},
    )
    return {"stats": stats, "results": results}


def recall_at_k(results: Sequence[list[str] | None], sources: Sequence[str]) -> float:
    hits = sum(1 for ids, src in zip(results, sources, strict=True) if ids and src in ids[:TOP_K])
    return hits / len(sources)


# --- the three paths ----------------------------------------------------------------------


def load_indexes(
    store: SemanticStore, names: Sequence[str], snapshot_dir: Path
) -> dict[str, NamespaceIndex]:
    """The namespaces' indexes, built from the stored chunks by the query service's own
    loader (an empty ``snapshot_dir`` makes it rebuild from the store)."""
    manager = IndexManager(store, snapshot_dir)
    slots = {
        name: manager.slot(TENANT, info)
        for name, info in store.namespace_heads(TENANT, names).items()
    }
    out = {}
    for name in names:
        slot = slots[name]
        if not slot.ready.wait(timeout=300) or slot.index is None:
            raise RuntimeError(f"namespace {name}: the in-process index did not load")
        out[name] = slot.index
    return out


class InProcess:
    """The in-process limit: embed, search the namespaces one after another, merge - the
    work of a query without RPC, in the calling thread."""

    def __init__(self, embedder: UsemEmbedder, indexes: Mapping[str, NamespaceIndex]) -> None:
        self.embedder = embedder
        self.indexes = dict(indexes)

    def embed(self, q: str) -> np.ndarray:
        return self.embedder.embed([q])[0]

    def search(self, vector: np.ndarray, q: str) -> dict[str, list]:
        return {
            ns: index.search(vector, q, TOP_K, None, CancelToken())
            for ns, index in self.indexes.items()
        }

    def query(self, q: str) -> list[str]:
        return [hit.document_id for _, hit in merge_hits(self.search(self.embed(q), q), TOP_K)]

    def factory(self) -> WorkerFactory:
        return lambda: (self.query, lambda: None)


def grpc_factory(stub: qgrpc.QueryServiceStub, names: Sequence[str]) -> WorkerFactory:
    """One channel (``stub``'s) shared by every worker, as an application would."""

    def call(q: str) -> list[str]:
        reply = stub.Query(qpb.QueryRequest(namespaces=names, query=q, top_k=TOP_K), timeout=30)
        if reply.meta.coverage_ratio != 1.0:
            raise RuntimeError(f"partial answer: {reply.meta}")
        return [r.document_id for r in reply.results]

    return lambda: (call, lambda: None)


def rest_factory(url: str, names: Sequence[str]) -> WorkerFactory:
    """One keep-alive httpx client per worker: httpx clients are not shared across threads
    without a lock, and each worker stands for one caller."""
    headers = {"content-type": "application/json"}

    def make() -> tuple[QueryCall, Callable[[], None]]:
        client = httpx.Client(base_url=url, timeout=30.0)

        def call(q: str) -> list[str]:
            body = json.dumps({"namespaces": list(names), "query": q, "top_k": TOP_K}).encode()
            reply = client.post("/api/v1/query", content=body, headers=headers)
            if reply.status_code != 200:
                raise RuntimeError(f"REST query: {reply.status_code} {reply.text[:300]}")
            data = reply.json()
            if data["meta"]["coverage_ratio"] != 1.0:
                raise RuntimeError(f"partial answer: {data['meta']}")
            return [r["document_id"] for r in data["results"]]

        return call, client.close

    return make


def wait_until_served(stub: qgrpc.QueryServiceStub, names: Sequence[str], query: str) -> None:
    """Waits until a query over gRPC covers every namespace (the query service loads the
    indexes in the background after start-up)."""
    deadline = time.monotonic() + 120
    while True:
        request = qpb.QueryRequest(namespaces=names, query=query, top_k=TOP_K)
        reply = stub.Query(request, timeout=30)
        if reply.meta.coverage_ratio == 1.0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the query service never covered every namespace: {reply.meta}")
        time.sleep(0.2)


def connect_grpc(addr: str) -> grpc.Channel:
    channel = grpc.insecure_channel(addr, options=GRPC_OPTIONS)
    grpc.channel_ready_future(channel).result(timeout=30)
    return channel

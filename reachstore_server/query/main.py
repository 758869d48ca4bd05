"""Composition root of the query service: `python -m reachstore_server.query.main`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os

from sqlalchemy import Engine

# One math thread per worker thread: with default BLAS/OpenMP threading, concurrent
# queries on 2 cores fell from ~300 to ~115 QPS (bench/README of the shared corpus).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from reachstore.query.v1 import query_service_pb2, query_service_pb2_grpc  # noqa: E402
from reachstore_server.audit_client.outbox_metrics import OutboxGauges  # noqa: E402
from reachstore_server.audit_client.wiring import auditing  # noqa: E402
from reachstore_server.common import logs, otel  # noqa: E402
from reachstore_server.common.config import Settings  # noqa: E402
from reachstore_server.common.config_errors import refusing_to_start
from reachstore_server.common.rpc_metrics import RpcMetrics  # noqa: E402
from reachstore_server.common.runner import serve  # noqa: E402
from reachstore_server.embedding import default_embedder  # noqa: E402
from reachstore_server.query.api.servicer import QueryServicer  # noqa: E402
from reachstore_server.query.index import configure_threads  # noqa: E402
from reachstore_server.query.indexes import IndexManager  # noqa: E402
from reachstore_server.query.metrics import QueryMetrics  # noqa: E402
from reachstore_server.query.shards.membership import Membership  # noqa: E402
from reachstore_server.query.shards.metrics import ShardGauges  # noqa: E402
from reachstore_server.query.shards.ownership import Ownership  # noqa: E402
from reachstore_server.query.shards.partitions import WHOLE  # noqa: E402
from reachstore_server.query.shards.router import Router  # noqa: E402
from reachstore_server.storage.engine import make_engine, make_sessions  # noqa: E402
from reachstore_server.storage.keys import authenticator_for  # noqa: E402
from reachstore_server.storage.query_members import MemberTable  # noqa: E402
from reachstore_server.storage.rate_buckets import fleet_limiter  # noqa: E402
from reachstore_server.storage.repository import SemanticStore  # noqa: E402
from reachstore_server.storage.schema import refuse_unless_at_head  # noqa: E402

SERVICE_NAME = query_service_pb2.DESCRIPTOR.services_by_name["QueryService"].full_name
SNAPSHOT_INTERVAL_SECONDS = 5.0
# How often the indexes replay the store's changes in the background (one read of the
# namespace rows when nothing changed); queries still catch up the rest themselves.
FOLLOW_INTERVAL_SECONDS = 0.25
# Searches block on numpy/faiss (which release the GIL) and on the store; a pool larger
# than the core count keeps slow namespaces from queueing fast ones.
SEARCH_THREADS = 16

log = logging.getLogger(__name__)


async def _snapshot_loop(indexes: IndexManager, store: SemanticStore) -> None:
    while True:
        await asyncio.sleep(SNAPSHOT_INTERVAL_SECONDS)
        try:
            live = {info.id for _, info in await asyncio.to_thread(store.all_namespaces)}
            await asyncio.to_thread(indexes.write_snapshots, live)
        except Exception:  # noqa: BLE001 - a failed snapshot is retried on the next tick
            log.exception("writing index snapshots failed")


async def _follow_loop(
    indexes: IndexManager, store: SemanticStore, ownership: Ownership | None
) -> None:
    def follow() -> None:
        namespaces = store.all_namespaces()
        # Sharded, a member follows (and loads) only what is placed on it.
        if ownership is None:
            indexes.follow((tenant, info, WHOLE) for tenant, info in namespaces)
        else:
            indexes.follow(ownership.rebalance(namespaces))

    while True:
        await asyncio.sleep(FOLLOW_INTERVAL_SECONDS)
        try:
            await asyncio.to_thread(follow)
        except Exception:  # noqa: BLE001 - retried on the next tick; queries catch up anyway
            log.exception("following the store's changes failed")


def _sharding(
    settings: Settings, engine: Engine, store: SemanticStore, indexes: IndexManager
) -> tuple[Router, Ownership] | None:
    """The member this process is when namespaces are sharded (docs/SHARDS.md)."""
    if not settings.query_advertise:
        return None
    membership = Membership(
        MemberTable(make_sessions(engine)),
        settings.query_advertise,
        settings.query_replicas,
        settings.query_member_lease_s,
        settings.query_hop_secret,
    )
    membership.start()  # registered as warming: no traffic is placed on it yet
    router = Router(membership, settings.tls)
    ownership = Ownership(indexes, membership, store, settings.query_partition_chunks)
    router.partitions = ownership.partitions
    return router, ownership


async def _run(settings: Settings) -> None:
    engine = make_engine(settings.database_url)
    store = SemanticStore(make_sessions(engine))
    configure_threads()
    embedder = default_embedder(settings.embed_threads, side_by_side=True)
    indexes = IndexManager(store, settings.data_dir / "indexes", settings.fault_rebuild_delay_ms)
    sharding = _sharding(settings, engine, store, indexes)
    router, ownership = sharding if sharding is not None else (None, None)
    if ownership is None:
        indexes.warm()
    limiter = fleet_limiter(settings.limits, make_sessions(engine))
    auditor, shipping, _ = auditing(make_sessions(engine), settings, ["query"])
    metrics = QueryMetrics()
    # The outbox is the deployment's, in the shared store: this process shows all of it.
    metrics.registry.register(OutboxGauges(make_sessions(engine)))
    if router is not None:
        metrics.registry.register(ShardGauges(router, indexes))
    if settings.metrics_listen:
        metrics.serve(settings.metrics_listen, settings.http_allowed_hosts, settings.tls)
    pool = concurrent.futures.ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="search")
    servicer = QueryServicer(
        store,
        indexes,
        embedder,
        pool,
        default_timeout_ms=settings.query_timeout_default_ms,
        cap_timeout_ms=settings.query_timeout_cap_ms,
        max_namespaces=settings.query_max_namespaces,
        fault_delay_ms=settings.fault_namespace_delay_ms,
        metrics=metrics,
        limiter=limiter,
        router=router,
    )
    snapshots = asyncio.create_task(_snapshot_loop(indexes, store))
    following = asyncio.create_task(_follow_loop(indexes, store, ownership))
    warming = None
    if ownership is not None:
        # Serves (routing to the owners) while it loads what it will own; it takes
        # traffic for those namespaces only once they are loaded.
        warming = asyncio.create_task(
            asyncio.to_thread(lambda: ownership.warm(store.all_namespaces()))
        )

    def on_stop() -> None:
        snapshots.cancel()
        following.cancel()
        if warming is not None:
            warming.cancel()
        if router is not None:
            router.membership.stop()  # the others re-place its namespaces at once
        indexes.write_snapshots()
        pool.shutdown(wait=False, cancel_futures=True)
        engine.dispose()

    await serve(
        "query",
        [
            lambda server: query_service_pb2_grpc.add_QueryServiceServicer_to_server(
                servicer, server
            )
        ],
        [SERVICE_NAME],
        settings.listen,
        on_stop=on_stop,
        limiter=limiter,
        audit=auditor,
        background=shipping,
        tls=settings.tls,
        also_listen=settings.also_listen,
        metrics=RpcMetrics(metrics.registries.own),
        admission=settings.admission,
        forwarded=router.is_forwarded if router is not None else None,
        authenticator=authenticator_for(
            make_sessions(engine),
            [query_service_pb2.DESCRIPTOR.services_by_name["QueryService"]],
            settings.require_keys,
        ),
    )


@refusing_to_start("query")
def main() -> None:
    settings = Settings.from_env(default_listen="127.0.0.1:50051")
    logs.configure("query", settings.log_level)
    refuse_unless_at_head(settings.database_url, "query")
    otel.start("query")
    asyncio.run(_run(settings))


if __name__ == "__main__":
    main()

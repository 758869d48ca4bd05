"""Composition root of the ingest service: `python -m reachstore_server.ingest.main`."""

from __future__ import annotations

import asyncio
import threading

from reachstore.admin.v1 import key_service_pb2, key_service_pb2_grpc
from reachstore.ingest.v1 import ingest_service_pb2, ingest_service_pb2_grpc
from reachstore_server.admin.api.keys import KeyServicer
from reachstore_server.audit_client.wiring import auditing
from reachstore_server.common import logs, otel
from reachstore_server.common.config import Settings
from reachstore_server.common.config_errors import refusing_to_start
from reachstore_server.common.metrics_http import serve_metrics
from reachstore_server.common.metrics_registry import component_registries
from reachstore_server.common.rpc_metrics import RpcMetrics
from reachstore_server.common.runner import serve
from reachstore_server.embedding import default_embedder
from reachstore_server.embedding.forked import ForkedEmbedders, processes_wanted
from reachstore_server.ingest.api.servicer import IngestServicer
from reachstore_server.ingest.metrics import QueueGauges
from reachstore_server.ingest.worker import IngestWorker
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.keys import KeyStore, authenticator_for
from reachstore_server.storage.rate_buckets import fleet_limiter
from reachstore_server.storage.repository import SemanticStore
from reachstore_server.storage.schema import refuse_unless_at_head
from reachstore_server.storage.tasks import TaskStore

# The ingest process also hosts key administration: both are the write side of the store.
SERVICES = [
    ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"],
    key_service_pb2.DESCRIPTOR.services_by_name["KeyService"],
]


@refusing_to_start("ingest")
def main() -> None:
    settings = Settings.from_env(default_listen="127.0.0.1:50052")
    logs.configure("ingest", settings.log_level)
    refuse_unless_at_head(settings.database_url, "ingest")
    # First, before any thread or connection exists: the copies are forked from here.
    embedder = ForkedEmbedders.start(
        default_embedder(settings.embed_threads),
        processes_wanted(settings.ingest_embed_processes),
    )
    # After the fork: the span exporter runs a thread of its own.
    otel.start("ingest")
    engine = make_engine(settings.database_url)
    sessions = make_sessions(engine)
    auditor, shipping, _ = auditing(sessions, settings, ["ingest", "admin"])
    store = SemanticStore(sessions)
    tasks = TaskStore(sessions, settings.worker_id, settings.ingest_lease_s)
    worker = IngestWorker(
        store,
        tasks,
        embedder,
        settings.ingest_batch_chunks,
        heartbeat_s=settings.ingest_heartbeat_s,
    )
    thread = threading.Thread(target=worker.run, name="ingest-worker", daemon=True)
    thread.start()
    servicer = IngestServicer(
        store, tasks, embedder, worker.wake, settings.limits, settings.ingest_max_queue_s
    )
    keys = KeyServicer(KeyStore(sessions))
    registries = component_registries()
    registries.served.register(QueueGauges(tasks))
    if settings.metrics_listen:
        serve_metrics(
            settings.metrics_listen, registries.served, settings.http_allowed_hosts, settings.tls
        )

    def stop_worker() -> None:
        worker.stop()
        thread.join(timeout=30)
        engine.dispose()

    asyncio.run(
        serve(
            "ingest",
            [
                lambda server: ingest_service_pb2_grpc.add_IngestServiceServicer_to_server(
                    servicer, server
                ),
                lambda server: key_service_pb2_grpc.add_KeyServiceServicer_to_server(keys, server),
            ],
            [service.full_name for service in SERVICES],
            settings.listen,
            on_stop=stop_worker,
            authenticator=authenticator_for(sessions, SERVICES, settings.require_keys),
            limiter=fleet_limiter(settings.limits, sessions),
            audit=auditor,
            background=shipping,
            tls=settings.tls,
            metrics=RpcMetrics(registries.own),
            admission=settings.admission,
        )
    )


if __name__ == "__main__":
    main()

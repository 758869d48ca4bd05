"""Composition root of the reach service: `python -m reachstore_server.reach.main`.

One process serves ReachService and runs an executor that works the durable queue in the
store; any number of such processes may run against one database.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os

from reachstore.reach.v1 import reach_service_pb2, reach_service_pb2_grpc
from reachstore_server.audit_client.wiring import auditing
from reachstore_server.common import logs, otel
from reachstore_server.common.config import Settings
from reachstore_server.common.config_errors import refusing_to_start
from reachstore_server.common.metrics_registry import component_registries
from reachstore_server.common.rpc_metrics import RpcMetrics
from reachstore_server.common.runner import serve
from reachstore_server.reach.api.servicer import ReachServicer
from reachstore_server.reach.channels import build_channel
from reachstore_server.reach.channels.base import SNIPPET_CHARS, Channel
from reachstore_server.reach.config import ReachConfig, check_channels, load_config
from reachstore_server.reach.executor import Executor
from reachstore_server.reach.idempotency import KeySecrets, key_secrets_from_env
from reachstore_server.reach.metrics import ReachMetrics
from reachstore_server.reach.shared_bucket import shared_buckets
from reachstore_server.reach.store import ReachStore
from reachstore_server.reach.watch import TaskChanges
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.keys import authenticator_for
from reachstore_server.storage.rate_buckets import fleet_limiter
from reachstore_server.storage.schema import refuse_unless_at_head

SERVICE = reach_service_pb2.DESCRIPTOR.services_by_name["ReachService"]

log = logging.getLogger(__name__)
DATABASE_THREADS = 20  # reachstore_server/storage/engine.py: pool_size 10 + max_overflow 10


def build_channels(config: ReachConfig) -> dict[str, Channel]:
    """Every configured channel, checked against the engine's lease (``check_channels``)."""
    channels: dict[str, Channel] = {
        name: build_channel(cfg.kind, cfg.options, f"channels.{name}.{cfg.kind}", os.environ)
        for name, cfg in config.channels.items()
    }
    check_channels(config, channels)
    return channels


async def _run(
    settings: Settings,
    config: ReachConfig,
    channels: dict[str, Channel],
    key_secrets: KeySecrets,
) -> None:
    # Store calls run in threads (asyncio.to_thread) and mostly wait on the database: as
    # many threads as the connection pool holds connections, not the default cores + 4,
    # so that sixteen clients' reads and the executor's writes do not queue for a thread.
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(DATABASE_THREADS, thread_name_prefix="store")
    )
    engine = make_engine(settings.database_url)
    sessions = make_sessions(engine)
    auditor, shipping, masker = auditing(sessions, settings, ["reach"])
    store = ReachStore(sessions, masker)

    def mask(text: str) -> str:
        return masker.bounded_answer(text, SNIPPET_CHARS)

    registries = component_registries()
    metrics = ReachMetrics(registries.served)
    metrics.count_states_from(store.count_by_state)
    metrics.measure_lag_from(store.behind_by_channel)
    if settings.metrics_listen:
        metrics.serve(settings.metrics_listen, settings.http_allowed_hosts, settings.tls)
    changes = TaskChanges()
    executor = Executor(
        store,
        config,
        channels,
        mask,
        metrics,
        settings.worker_id,
        changes,
        buckets=shared_buckets(sessions, config),
    )
    for channel in channels.values():
        await channel.start()
    stop = asyncio.Event()
    running = asyncio.create_task(executor.run(stop))
    servicer = ReachServicer(
        store,
        config,
        channels,
        executor.breakers,
        executor.wake,
        changes,
        key_secrets=key_secrets,
        metrics=metrics,
        replica=settings.worker_id,
        masker=masker,
    )

    async def wind_down() -> None:
        stop.set()
        await running
        for channel in channels.values():
            await channel.close()

    await serve(
        "reach",
        [
            lambda server: reach_service_pb2_grpc.add_ReachServiceServicer_to_server(
                servicer, server
            )
        ],
        [SERVICE.full_name],
        settings.listen,
        before_stop=wind_down,
        on_stop=engine.dispose,
        authenticator=authenticator_for(sessions, [SERVICE], settings.require_keys),
        limiter=fleet_limiter(settings.limits, sessions),
        audit=auditor,
        background=shipping,
        tls=settings.tls,
        metrics=RpcMetrics(registries.own),
        admission=settings.admission,
    )


@refusing_to_start("reach")
def main() -> None:
    settings = Settings.from_env(default_listen="127.0.0.1:50053")
    logs.configure("reach", settings.log_level)
    refuse_unless_at_head(settings.database_url, "reach")
    otel.start("reach")
    # Bad configuration stops the process before it serves anything (`up` reports it).
    config = load_config(settings.reach_config)
    channels = build_channels(config)
    key_secrets = key_secrets_from_env(os.environ)
    log.info("reach: %d channel(s) configured: %s", len(channels), ", ".join(sorted(channels)))
    asyncio.run(_run(settings, config, channels, key_secrets))


if __name__ == "__main__":
    main()

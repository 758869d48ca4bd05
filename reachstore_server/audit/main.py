"""Composition root of the audit service: `python -m reachstore_server.audit.main`.

Serves AuditService and signs a checkpoint of every chain that moved, every
``REACHSTORE_AUDIT_CHECKPOINT_S`` seconds and once more when it stops, handing each to the
witnesses (``reachstore_server/audit/checkpointing.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os

from reachstore.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from reachstore_server.audit.api.servicer import AuditServicer
from reachstore_server.audit.checkpointing import Checkpointer, serve_ages
from reachstore_server.audit.signing import (
    CheckpointKeys,
    PrivateKey,
    legacy_key_from_env,
    private_key_from_env,
)
from reachstore_server.audit.store import AuditStore
from reachstore_server.audit.verify_settings import Verifier, cadence_from_env
from reachstore_server.audit.witness import Delivery, Witness, witnesses_from_env
from reachstore_server.common import logs, otel, pii
from reachstore_server.common.config import Settings
from reachstore_server.common.config_errors import refusing_to_start
from reachstore_server.common.metrics_registry import component_registries
from reachstore_server.common.rpc_metrics import RpcMetrics
from reachstore_server.common.runner import serve
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.keys import authenticator_for
from reachstore_server.storage.rate_buckets import fleet_limiter
from reachstore_server.storage.schema import refuse_unless_at_head

SERVICE = audit_service_pb2.DESCRIPTOR.services_by_name["AuditService"]

log = logging.getLogger(__name__)


async def _run(settings: Settings, key: PrivateKey, witnesses: list[Witness]) -> None:
    engine = make_engine(settings.database_url)
    sessions = make_sessions(engine)
    store = AuditStore(sessions)
    checkpointer = Checkpointer(store, key, Delivery(witnesses, key))
    await asyncio.to_thread(checkpointer.start)
    registries = component_registries()
    if settings.metrics_listen:
        serve_ages(
            checkpointer,
            settings.metrics_listen,
            settings.http_allowed_hosts,
            settings.tls,
            registries.served,
        )
    verifier = Verifier(
        CheckpointKeys(key.public, legacy_key_from_env(os.environ)),
        witnesses,
        cadence_from_env(os.environ, settings.audit_checkpoint_s),
    )
    servicer = AuditServicer(store, verifier, pii.masker_from_env(os.environ), checkpointer)
    ticking = asyncio.create_task(checkpointer.run(settings.audit_checkpoint_s))

    async def last_checkpoint() -> None:
        ticking.cancel()
        written = await asyncio.to_thread(checkpointer.tick)
        log.info("signed %d checkpoint(s) at shutdown", written)

    await serve(
        "audit",
        [
            lambda server: audit_service_pb2_grpc.add_AuditServiceServicer_to_server(
                servicer, server
            )
        ],
        [SERVICE.full_name],
        settings.listen,
        before_stop=last_checkpoint,
        on_stop=engine.dispose,
        authenticator=authenticator_for(sessions, [SERVICE], settings.require_keys),
        limiter=fleet_limiter(settings.limits, sessions),
        tls=settings.tls,
        metrics=RpcMetrics(registries.own),
        admission=settings.admission,
    )


@refusing_to_start("audit")
def main() -> None:
    settings = Settings.from_env(default_listen="127.0.0.1:50054")
    logs.configure("audit", settings.log_level)
    refuse_unless_at_head(settings.database_url, "audit")
    otel.start("audit")
    key = private_key_from_env(os.environ)
    witnesses = witnesses_from_env(os.environ)
    cadence_from_env(os.environ, settings.audit_checkpoint_s)  # a bad grace fails here
    asyncio.run(_run(settings, key, witnesses))


if __name__ == "__main__":
    main()

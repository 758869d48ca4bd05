"""Composition root of the audit service: `python -m services.audit.main`.

Serves AuditService and signs a checkpoint of every chain that moved, every
``REACHSTORE_AUDIT_CHECKPOINT_S`` seconds and once more when it stops.
"""

from __future__ import annotations

import asyncio
import logging
import os

from reachstore.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from services.audit.api.servicer import AuditServicer
from services.audit.chain import Signer, signer_from_env
from services.audit.store import AuditStore
from services.common import logs, pii
from services.common.config import Settings
from services.common.limits import RequestLimiter
from services.common.runner import serve
from services.storage.engine import init_schema, make_engine, make_sessions
from services.storage.keys import authenticator_for

SERVICE = audit_service_pb2.DESCRIPTOR.services_by_name["AuditService"]

log = logging.getLogger(__name__)


async def _checkpoints(store: AuditStore, signer: Signer, every_s: int) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            written = await asyncio.to_thread(store.checkpoint, signer)
            if written:
                log.info("signed %d checkpoint(s)", written)
        except Exception:  # noqa: BLE001 - the next tick tries again
            log.exception("signing checkpoints failed")


async def _run(settings: Settings, signer: Signer) -> None:
    engine = make_engine(settings.database_url)
    init_schema(engine)
    sessions = make_sessions(engine)
    store = AuditStore(sessions)
    servicer = AuditServicer(store, signer, pii.masker_from_env(os.environ))
    ticking = asyncio.create_task(_checkpoints(store, signer, settings.audit_checkpoint_s))

    async def last_checkpoint() -> None:
        ticking.cancel()
        written = await asyncio.to_thread(store.checkpoint, signer)
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
        limiter=RequestLimiter(settings.limits),
        tls=settings.tls,
    )


def main() -> None:
    settings = Settings.from_env(default_listen="127.0.0.1:50054")
    logs.configure("audit", settings.log_level)
    signer = signer_from_env(os.environ)
    asyncio.run(_run(settings, signer))


if __name__ == "__main__":
    main()

"""Running a gRPC component until SIGTERM/SIGINT, shared by every service's main.py."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any

from reachstore_server.common.admission import DEFAULT_LIMITS, AdmissionLimits
from reachstore_server.common.auth import Authenticator
from reachstore_server.common.grpc_server import (
    CallAudit,
    ForwardedCheck,
    Registrar,
    create_server,
    mark_serving,
)
from reachstore_server.common.limits import RequestLimiter
from reachstore_server.common.rpc_metrics import RpcMetrics
from reachstore_server.common.supervised import watch_supervisor
from reachstore_server.common.tls import PLAIN, TlsFiles

log = logging.getLogger(__name__)

# Calls in flight get this long to finish when the process is asked to stop.
SHUTDOWN_GRACE_SECONDS = 5.0


async def serve(
    component: str,
    registrars: Iterable[Registrar],
    service_names: list[str],
    address: str,
    on_stop: Callable[[], None] | None = None,
    before_stop: Callable[[], Awaitable[None]] | None = None,
    authenticator: Authenticator | None = None,
    limiter: RequestLimiter | None = None,
    audit: CallAudit | None = None,
    background: Iterable[Callable[[], Coroutine[Any, Any, None]]] = (),
    tls: TlsFiles = PLAIN,
    also_listen: Sequence[str] = (),
    metrics: RpcMetrics | None = None,
    admission: AdmissionLimits = DEFAULT_LIMITS,
    forwarded: ForwardedCheck | None = None,
) -> None:
    """Serves until a stop signal, then stops gracefully: no new calls, ``before_stop``
    (background work winds down), ``on_stop``. ``background`` coroutines (the audit
    shipper) run while it serves and are cancelled when it stops."""
    server, port, health_servicer = create_server(
        registrars,
        service_names,
        address,
        authenticator,
        limiter,
        audit,
        tls,
        also_listen,
        metrics,
        admission,
        forwarded,
    )
    await server.start()
    tasks = [asyncio.create_task(work()) for work in background]
    await mark_serving(health_servicer, service_names)
    log.info(
        "%s serving on %s (port %d, %s)",
        component,
        ", ".join((address, *also_listen)),
        port,
        "mutual TLS" if tls.client_auth else "TLS" if tls.serving else "plain text",
    )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watch_supervisor(loop)  # under `reachstore up`: stop as above once `up` is gone
    await stop.wait()
    log.info("%s stopping", component)
    await health_servicer.enter_graceful_shutdown()
    await server.stop(SHUTDOWN_GRACE_SECONDS)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if before_stop is not None:
        await before_stop()
    if on_stop is not None:
        on_stop()
    log.info("%s stopped", component)

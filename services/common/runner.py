"""Running a gRPC component until SIGTERM/SIGINT, shared by every service's main.py."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable

from services.common.auth import Authenticator
from services.common.grpc_server import Registrar, create_server, mark_serving
from services.common.limits import RequestLimiter

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
) -> None:
    """Serves until a stop signal, then stops gracefully: no new calls, ``before_stop``
    (background work winds down), ``on_stop``."""
    server, port, health_servicer = create_server(
        registrars, service_names, address, authenticator, limiter
    )
    await server.start()
    await mark_serving(health_servicer, service_names)
    log.info("%s serving on %s (port %d)", component, address, port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("%s stopping", component)
    await health_servicer.enter_graceful_shutdown()
    await server.stop(SHUTDOWN_GRACE_SECONDS)
    if before_stop is not None:
        await before_stop()
    if on_stop is not None:
        on_stop()
    log.info("%s stopped", component)

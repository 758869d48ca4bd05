"""Composition root of the bridge: ``python -m reachstore_server.bridge.main``.

Reads settings, sends logs to stderr as JSON (stdout stays empty), binds the listening
socket itself and serves the app with uvicorn, which drains requests on SIGTERM/SIGINT;
the app's lifespan then closes the gRPC channels.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from types import FrameType
from typing import Any

import uvicorn

from reachstore_server.bridge.app import create_app
from reachstore_server.bridge.slow_clients import GuardedHttpProtocol, guarded_protocol
from reachstore_server.bridge.web_guard import listen_host
from reachstore_server.common import allocator, logs, otel
from reachstore_server.common.config import Settings
from reachstore_server.common.config_errors import refusing_to_start
from reachstore_server.common.metrics_http import serve_metrics
from reachstore_server.common.supervised import watch_supervisor

log = logging.getLogger("reachstore_server.bridge")

# In-flight requests get this long to finish after SIGTERM before they are cancelled; it
# stays under the 15 s `reachstore up` waits before killing a component.
GRACEFUL_SHUTDOWN_S = 10


def bind_socket(listen: str) -> socket.socket:
    """A listening TCP socket for ``host:port`` (port 0 picks a free one).

    The protocol is given explicitly: asyncio only turns on TCP_NODELAY for sockets whose
    ``proto`` is IPPROTO_TCP, and uvicorn writes headers and body in two sends, so without
    it Nagle plus the peer's delayed ACK would add ~40 ms to every response.
    """
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(2048)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def uvicorn_config(
    app: Any, sock: socket.socket, settings: Settings | None = None
) -> uvicorn.Config:
    """uvicorn's httptools server with the slow-client guard (``slow_clients.py``): request
    deadlines and a connection cap from ``settings`` (their defaults without), over TLS
    when the settings carry a certificate. HTTP callers are not asked for a certificate:
    they prove who they are with API keys (``reachstore_server/common/tls.py``)."""
    host, port = sock.getsockname()[:2]
    defaults = GuardedHttpProtocol
    tls = settings.tls if settings else None
    protocol = guarded_protocol(
        settings.http_head_timeout_s if settings else defaults.head_timeout_s,
        settings.http_body_timeout_s if settings else defaults.body_timeout_s,
        settings.http_write_timeout_s if settings else defaults.unsent.timeout_s,
        settings.http_max_connections if settings else defaults.max_connections,
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        ws="none",  # the bridge serves no websockets; an upgrade is answered as plain HTTP
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        ssl_certfile=tls.cert_path if tls and tls.serving else None,
        ssl_keyfile=tls.key_path if tls and tls.serving else None,
    )


async def serve(settings: Settings) -> None:
    app = create_app(settings)
    if settings.metrics_listen:
        serve_metrics(
            settings.metrics_listen,
            app.state.http_metrics.registry,
            settings.http_allowed_hosts,
            settings.tls,
        )
    sock = bind_socket(settings.listen)
    server = uvicorn.Server(uvicorn_config(app, sock, settings))
    host, port = sock.getsockname()[:2]
    # Tools (and tests) read this line to learn the port when REACHSTORE_LISTEN ends in :0.
    log.info(
        "bridge listening on %s:%d (%s; query=%s ingest=%s reach=%s)",
        host,
        port,
        "https" if settings.tls.serving else "http",
        settings.query_addr,
        settings.ingest_addr,
        settings.reach_addr,
    )
    if listen_host(settings.listen) is None and not settings.http_allowed_hosts:
        log.warning(
            "listening on every address, but answering only requests that name a loopback "
            "host: set REACHSTORE_HTTP_ALLOWED_HOSTS to the names callers use"
        )
    # Under `reachstore up`: once `up` is gone, SIGTERM stops uvicorn as it would have.
    watch_supervisor(asyncio.get_running_loop())
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    # uvicorn handles SIGTERM/SIGINT while serving and re-raises the signal once it has
    # shut down; ending here makes that a clean exit instead of a KeyboardInterrupt trace.
    raise SystemExit(0)


@refusing_to_start("bridge")
def main() -> None:
    settings = Settings.from_env(default_listen="127.0.0.1:8420")
    logs.configure("bridge", settings.log_level)
    otel.start("bridge")
    # Answers and bodies of megabytes come and go; their memory must go back with them.
    allocator.map_large_blocks()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _exit_quietly)
    asyncio.run(serve(settings))
    log.info("bridge stopped")


if __name__ == "__main__":
    main()

"""`reachstore mcp`: the public API as an MCP server (reachstore_server/mcp, docs/MCP.md).

``--transport stdio`` (the default) is what a desktop agent starts as a subprocess: the
protocol on stdin and stdout, logs on stderr, the key in ``REACHSTORE_API_KEY``.
``--transport http`` serves streamable HTTP at ``/mcp`` on ``--listen``, each request
with its own ``Authorization: Bearer <key>``, over TLS when ``REACHSTORE_TLS_CERT_FILE``
and ``REACHSTORE_TLS_KEY_FILE`` give a certificate, and beyond loopback only with keys
required and TLS, as every other component.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType

import uvicorn

from reachstore import Tls
from reachstore_server.cli_client.connection import positive_float, positive_int, wrapped
from reachstore_server.common import logs
from reachstore_server.common.config import Settings
from reachstore_server.common.config_errors import ConfigError
from reachstore_server.mcp.catalogue import ProfileError, load_profiles
from reachstore_server.mcp.server import Connections, ReachstoreMcp, http_app

log = logging.getLogger("reachstore_server.mcp")

DEFAULT_LISTEN = "127.0.0.1:8421"
DEFAULT_TIMEOUT_S = 30.0
# Where the key of a stdio server comes from (the SDK's own variable).
KEY_VARIABLE = "REACHSTORE_API_KEY"


def _targets(args: argparse.Namespace) -> dict[str, str]:
    """The `up` port layout, each service overridable by its REACHSTORE_*_ADDR (which may
    list replicas), as the services themselves read them."""
    offsets = {"query": 0, "ingest": 1, "reach": 2, "audit": 3}
    host = f"[{args.host}]" if ":" in args.host else args.host
    targets = {name: f"{host}:{args.grpc_port_base + n}" for name, n in offsets.items()}
    for name in targets:
        targets[name] = os.environ.get(f"REACHSTORE_{name.upper()}_ADDR") or targets[name]
    return targets


async def _serve_stdio(mcp: ReachstoreMcp) -> None:
    from mcp.server.stdio import stdio_server

    server = mcp.server()
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await mcp.connections.close()


async def _serve_http(mcp: ReachstoreMcp, settings: Settings) -> None:
    scheme = "https" if settings.tls.serving else "http"
    app = http_app(mcp, settings.http_allowed_hosts, settings.http_allowed_origins, scheme)
    host, _, port = settings.listen.rpartition(":")
    config = uvicorn.Config(
        app,
        host=host.strip("[]"),
        port=int(port),
        log_config=None,
        access_log=False,
        lifespan="on",
        ws="none",
        timeout_graceful_shutdown=10,
        ssl_certfile=settings.tls.cert_path if settings.tls.serving else None,
        ssl_keyfile=settings.tls.key_path if settings.tls.serving else None,
    )
    server = uvicorn.Server(config)
    config.load()
    sock = config.bind_socket()
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    # Tools and tests read this line on stderr for the port when --listen ends in :0.
    print(f"reachstore mcp: {scheme}://{shown}:{bound_port}/mcp", file=sys.stderr, flush=True)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        await mcp.connections.close()


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        profiles = load_profiles(Path(args.profile) if args.profile else None, args.max_tools)
    except ProfileError as exc:
        print(f"reachstore: bad --profile: {exc}", file=sys.stderr)
        return 2
    http = args.transport == "http"
    settings = None
    if http:
        try:  # the listening address checked as every component's (keys and TLS beyond loopback)
            settings = Settings.from_env({**os.environ, "REACHSTORE_LISTEN": args.listen})
        except ConfigError as exc:
            print(f"reachstore: bad setting: {exc}", file=sys.stderr)
            return 2
    logs.configure("mcp", os.environ.get("REACHSTORE_LOG_LEVEL", "INFO"))
    connections = Connections(_targets(args), Tls.from_env(), args.timeout, per_request=http)
    mcp = ReachstoreMcp(connections, profiles)
    if settings is None:
        asyncio.run(_serve_stdio(mcp))
        return 0
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _exit_quietly)
    asyncio.run(_serve_http(mcp, settings))
    return 0


def add_mcp_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "mcp",
        help="serve the API to agents as MCP tools (stdio or streamable HTTP)",
        description=wrapped(
            "An MCP server over a running system: query, ingest, task_status, reach_status "
            "and one send_<channel> tool per reach channel the key may use, trimmed by its "
            "scopes and tool profile. Over stdio the key is $REACHSTORE_API_KEY (never an "
            "argument: arguments show in ps); over HTTP each request's Authorization: "
            "Bearer <key>. See docs/MCP.md."
        ),
    )
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help=f"HOST:PORT for --transport http (default {DEFAULT_LISTEN}; port 0 picks one)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="where `reachstore up` listens")
    parser.add_argument(
        "--grpc-port-base",
        type=int,
        default=50051,
        help="the base port of `reachstore up` (REACHSTORE_QUERY_ADDR and the other *_ADDR "
        "settings override single services)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds each call to the services may take (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--profile",
        default=None,
        help="TOML file of tool profiles: [default] and [keys.<key id>] with tools = [...] "
        "and max_tools = N (docs/MCP.md)",
    )
    parser.add_argument(
        "--max-tools",
        type=positive_int,
        default=None,
        help="at most this many tools per key, unless the profile file says otherwise",
    )
    parser.set_defaults(func=cmd_mcp)

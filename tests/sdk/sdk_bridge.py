"""The real REST bridge (``reachstore_server.bridge``) served by uvicorn in front of a test gRPC
server, so the SDK's REST transport is tested against the actual HTTP surface rather
than a copy of it.

Everything asynchronous runs on one background event loop (``LoopThread``); tests stay
synchronous.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Coroutine
from typing import Any

import httpx
import uvicorn

from reachstore_server.bridge.app import create_app
from reachstore_server.bridge.main import bind_socket, uvicorn_config
from reachstore_server.common.config import Settings


class LoopThread:
    """An asyncio loop in a daemon thread; ``run`` executes a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="sdk-rest", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@dataclasses.dataclass
class Bridge:
    url: str
    server: uvicorn.Server
    task: asyncio.Task[None]


def _settings(grpc_port: int) -> Settings:
    address = f"127.0.0.1:{grpc_port}"
    return Settings.from_env(
        {
            "REACHSTORE_QUERY_ADDR": address,
            "REACHSTORE_INGEST_ADDR": address,
            "REACHSTORE_REACH_ADDR": address,
            "REACHSTORE_AUDIT_ADDR": address,
            "REACHSTORE_LISTEN": "127.0.0.1:0",
        }
    )


async def _start(grpc_port: int) -> Bridge:
    app = create_app(_settings(grpc_port), deadline_s=10.0)
    sock = bind_socket("127.0.0.1:0")
    server = uvicorn.Server(uvicorn_config(app, sock))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    host, port = sock.getsockname()[:2]
    return Bridge(f"http://{host}:{port}", server, task)


async def _stop(bridge: Bridge) -> None:
    bridge.server.should_exit = True
    await bridge.task


def start_bridge(loop: LoopThread, grpc_port: int) -> Bridge:
    """A bridge whose every service is the gRPC server on ``grpc_port``; ready on return."""
    bridge = loop.run(_start(grpc_port))
    # The socket already listens, so the first answer shows uvicorn and the app are up.
    assert httpx.get(bridge.url + "/healthz", timeout=10).status_code == 200
    return bridge


def stop_bridge(loop: LoopThread, bridge: Bridge) -> None:
    loop.run(_stop(bridge))

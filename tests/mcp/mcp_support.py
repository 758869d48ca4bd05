"""Helpers of the MCP tests: how to reach `reachstore mcp` with the MCP SDK's own client,
over stdio (a server process of its own, the key in its environment) or streamable HTTP
(the shared server, the key as a bearer token)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.system import RunningSystem

# The slow namespace answers after this long: a 300 ms budget misses it, 4 s does not.
SLOW_MS = 1500
TRANSPORTS = ["stdio", "http"]


def key_id(key: str) -> str:
    return key.split("_")[1]


def mcp_command(system: RunningSystem, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "reachstore_server.cli",
        "mcp",
        "--grpc-port-base",
        str(system.grpc_port_base),
        *extra,
    ]


@contextlib.asynccontextmanager
async def connect(
    transport: str, system: RunningSystem, url: str, key: str, *extra: str
) -> AsyncIterator[Client]:
    """The MCP SDK's client for ``key``: a stdio server of its own (the key in its
    environment), or the shared HTTP server (the key as a bearer token)."""
    server: Any
    if transport == "stdio":
        command = mcp_command(system, *extra)
        env = {**os.environ, "REACHSTORE_API_KEY": key}
        server = StdioServerParameters(command=command[0], args=command[1:], env=env)
        async with Client(server) as client:
            yield client
        return
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def write_profile(folder: Path, text: str) -> Path:
    path = folder / "profile.toml"
    path.write_text(text)
    return path

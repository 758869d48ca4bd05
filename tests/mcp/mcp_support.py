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
from tests.reach.peers import HttpReceiver

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


def reach_config(receiver: HttpReceiver, hourly: tuple[str, ...] = ()) -> str:
    """Channels `hook` and `desk` (window a day), and ``hourly`` ones (window an hour),
    all opening tickets at ``receiver``."""

    def hook(name: str, extra: str = "") -> str:
        return f"""
[channels.{name}]
kind = "webhook"
description = "{name}: opens a ticket in the test desk"
side_effect = "Opens a ticket in the help desk, visible to its agents."
action_types = ["open"]
idempotency_params = ["ticket"]
{extra}
[channels.{name}.webhook]
url = "{receiver.url}"
idempotency_header = true
read_timeout_s = 2
[channels.{name}.retry]
base_s = 0.05
cap_s = 0.2
max_retries = 2
"""

    schema = (
        'parameters = { type = "object", required = ["ticket"], additionalProperties = false, '
        'properties = { ticket = { type = "string", maxLength = 40 }, '
        'note = { type = "string" } } }'
    )
    channels = [hook("hook", schema), hook("desk", schema)]
    channels += [hook(name, schema + '\nwindow = "hour"') for name in hourly]
    return "[engine]\nlease_s = 10\n" + "".join(channels)


def start_system(
    folder: Path, receiver: HttpReceiver, hourly: tuple[str, ...] = ()
) -> RunningSystem:
    """`reachstore up --require-keys` with ``reach_config``'s channels, the `slow`
    namespace slowed by the fault setting, and no call rate limits."""
    config = folder / "reach.toml"
    config.write_text(reach_config(receiver, hourly))
    env = {
        "REACHSTORE_REQUIRE_KEYS": "true",
        "REACHSTORE_REACH_CONFIG": str(config),
        "REACHSTORE_FAULT_NAMESPACE_DELAY_MS": f"slow={SLOW_MS}",
        "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
        "REACHSTORE_LIMIT_KEY_QUERY_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_QUERY_RATE": "0",
    }
    running = RunningSystem(folder / "data", env)
    running.start()
    return running

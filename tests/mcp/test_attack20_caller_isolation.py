"""Who a request speaks for, attacked from the outside (these pass: they pin behaviour no
other test covers).

- An HTTP server started with a key in its own environment (``REACHSTORE_API_KEY`` left
  set by the shell that started it, as for the stdio transport) must not lend that key to
  HTTP callers that bring none: such a request is the keyless caller, which a system that
  requires keys refuses. Otherwise anyone who reaches the port acts with the operator's key.
- A tool a key is not shown cannot be called by naming it: a key limited to the ``hook``
  channel calling ``send_desk``, a read-only key calling ``ingest`` or ``send_hook``. No
  delivery reaches the receiver.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.e2e.system import RunningSystem
from tests.mcp.mcp_support import connect, mcp_command
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def url_with_key_in_env(
    system: RunningSystem, keys: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """`reachstore mcp --transport http` whose own environment holds the agent's key."""
    log: Path = tmp_path_factory.mktemp("mcp-env-key") / "stderr.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [*mcp_command(system), "--transport", "http", "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "REACHSTORE_API_KEY": keys["agent"]},
        )
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None:
            found = re.search(r"^reachstore mcp: (\S+)$", log.read_text(), re.MULTILINE)
            url = found.group(1) if found else None
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        address = httpx.URL(url)
        while True:
            try:
                socket.create_connection((address.host, address.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_key_in_the_http_servers_environment_is_never_lent_to_keyless_callers(
    system: RunningSystem,
    url_with_key_in_env: str,
    receiver: HttpReceiver,
) -> None:
    before = receiver.total()

    async def keyless() -> tuple[Any, Any]:
        async with httpx2.AsyncClient(timeout=60) as http:
            async with Client(streamable_http_client(url_with_key_in_env, http_client=http)) as c:
                try:
                    listed: Any = await c.list_tools()
                except MCPError as exc:
                    listed = exc
                sent = await c.call_tool(
                    "send_hook", {"entity_id": "env-leak", "params": {"ticket": "LEAK-1"}}
                )
                return listed, sent

    try:
        listed, sent = asyncio.run(keyless())
    except MCPError as exc:  # the call itself refused as an unknown tool: fine
        listed, sent = exc, None
    assert isinstance(listed, MCPError), [t.name for t in listed.tools]
    assert listed.data["category"] == "auth"
    if sent is not None:
        assert sent.is_error is True
        assert sent.structured_content["error"]["category"] == "auth"
    assert receiver.total() == before


@pytest.mark.parametrize(
    ("who", "tool", "arguments"),
    [
        ("hook_only", "send_desk", {"entity_id": "iso-1", "params": {"ticket": "ISO-1"}}),
        ("reader", "send_hook", {"entity_id": "iso-2", "params": {"ticket": "ISO-2"}}),
        ("reader", "ingest", {"namespace": "fast", "document": {"text": "not mine to add"}}),
    ],
)
def test_a_tool_the_key_is_not_shown_cannot_be_called_by_name(
    system: RunningSystem,
    mcp_url: str,
    keys: dict[str, str],
    receiver: HttpReceiver,
    who: str,
    tool: str,
    arguments: dict[str, Any],
) -> None:
    before = receiver.total()

    async def attempt() -> Any:
        async with connect("http", system, mcp_url, keys[who]) as client:
            try:
                return await client.call_tool(tool, arguments)
            except MCPError as exc:
                return exc

    refused = asyncio.run(attempt())
    assert isinstance(refused, MCPError), refused
    assert refused.error.message == f"unknown tool: {tool}"
    assert receiver.total() == before

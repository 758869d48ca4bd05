"""A key revoked while its agent stays connected (passes: pins behaviour no other test
covers — only expiry is tested elsewhere).

An agent's MCP connection outlives many calls: a stdio server holds its key for the life
of the process, an HTTP client keeps its connection and the server keeps a services
client per key. Revoking the key must stop it at the next call — no cached scopes, no
cached tool list, no send — on either transport, with the API's own error.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from reachstore import Client as Sdk
from tests.e2e.system import RunningSystem
from tests.e2e.test_auth import make_key
from tests.mcp.mcp_support import TRANSPORTS, connect, key_id
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_key_revoked_mid_session_is_refused_at_its_next_call_and_sends_nothing(
    system: RunningSystem, mcp_url: str, receiver: HttpReceiver, transport: str
) -> None:
    victim = make_key(system, "acme", "read,reach")
    admin = make_key(system, "acme", "admin")
    ticket = f"REV-{transport}-{time.monotonic_ns()}"

    async def session() -> tuple[Any, Any, Any, Any]:
        async with connect(transport, system, mcp_url, victim) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            first = await client.call_tool(
                "send_hook",
                {"entity_id": f"o-{ticket}", "params": {"ticket": ticket}, "wait_ms": 10_000},
            )
            with Sdk.local("127.0.0.1", system.grpc_port_base, api_key=admin) as sdk:
                assert sdk.revoke_key(key_id(victim)).revoked_at
            after = await client.call_tool(
                "send_hook", {"entity_id": f"o2-{ticket}", "params": {"ticket": f"{ticket}-2"}}
            )
            try:
                listed: Any = await client.list_tools()
            except MCPError as exc:
                listed = exc
            return names, first, after, listed

    names, first, after, listed = asyncio.run(session())
    assert "send_hook" in names
    assert first.is_error is False and first.structured_content["state"] == "succeeded"
    assert after.is_error is True
    error = after.structured_content["error"]
    assert (error["error_code"], error["category"], error["retryable"]) == (
        "AUTH_KEY_REVOKED",
        "auth",
        False,
    )
    assert isinstance(listed, MCPError), listed
    assert listed.data["error_code"] == "AUTH_KEY_REVOKED"
    deliveries = receiver.deliveries_by_field("ticket")
    assert (deliveries[ticket], deliveries[f"{ticket}-2"]) == (1, 0)

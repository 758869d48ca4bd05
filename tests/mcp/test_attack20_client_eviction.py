"""Callers without a valid key evicting another caller's connection mid-call.

Over HTTP the server keeps one services client per distinct API key seen, at most 64, and
closes the least recently used one past that (``Connections.client``). A client is made
and cached for whatever ``Authorization: Bearer`` a request carries, before the key is
authenticated. So anyone who can reach the port — with no valid key at all — can send 64
requests with made-up tokens and close the gRPC channels of a legitimate caller while that
caller's call is in flight. Its answer then is not its own outcome but a cancellation (or
an internal error): one tenant's agent sees its query or send fail because of traffic from
someone else. Callers must be isolated; an unauthenticated request must not be able to
evict an authenticated caller's state.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.e2e.system import RunningSystem
from tests.mcp.mcp_support import connect

pytestmark = pytest.mark.e2e

# Past the server's 64 cached clients: enough to evict the legitimate caller's. A control
# run with fewer shows the failure is the eviction, not the load.


async def _bogus_list(http: httpx.AsyncClient, url: str, n: int) -> int:
    """One tools/list with a made-up key: the server authenticates it, and refuses it."""
    response = await http.post(
        url,
        headers={
            "Authorization": f"Bearer rsk_{secrets.token_hex(8)}_{secrets.token_hex(16)}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        },
        json={"jsonrpc": "2.0", "id": n, "method": "tools/list", "params": {}},
    )
    return response.status_code


@pytest.mark.parametrize("bogus_callers", [10, 80], ids=["below_cache_size", "past_cache_size"])
def test_requests_with_made_up_keys_do_not_break_another_callers_call_in_flight(
    system: RunningSystem, mcp_url: str, keys: dict[str, str], corpus: None, bogus_callers: int
) -> None:
    async def scenario() -> tuple[Any, list[int]]:
        async with connect("http", system, mcp_url, keys["agent"]) as client:
            # `slow` answers after 1.5 s: the call is in flight while the others arrive.
            call = asyncio.create_task(
                client.call_tool(
                    "query",
                    {"namespaces": ["slow"], "question": "rivers", "timeout_ms": 10_000},
                )
            )
            await asyncio.sleep(0.3)
            async with httpx.AsyncClient(timeout=30) as http:
                statuses = list(
                    await asyncio.gather(
                        *(_bogus_list(http, mcp_url, n) for n in range(bogus_callers))
                    )
                )
            try:
                return await call, statuses
            except MCPError as exc:
                return exc, statuses

    result, statuses = asyncio.run(scenario())
    assert set(statuses) == {200}, statuses  # each refused inside JSON-RPC, as a bad key
    assert not isinstance(result, MCPError), f"JSON-RPC error: {result.error.message!r}"
    assert result.is_error is False, result.content[0].text
    assert result.structured_content["meta"]["coverage_ratio"] == 1.0
    assert [r["namespace"] for r in result.structured_content["results"]] == ["slow"]

"""Another key of the tenant squatting the idempotency key an MCP send will derive.

The key a ``send_<channel>`` call sends is a plain hash of things that are not secret: the
tenant, the caller's key id (every reach task shows it as ``submitted_by`` to any key of
the tenant that may read), the tool name, the intent and the UTC day (docs/MCP.md prints
the formula). No secret goes in. So any other key of the tenant with the ``reach`` scope
can compute the key of a send the agent is about to make — tomorrow's reminder for
``order-17`` — and reserve a task of its own under it first, with other content. The
agent's call then meets a key already used for different content: it is refused
(IDEMPOTENCY_KEY_REUSED) for the rest of the day, and the action it was asked to take is
never sent. The derived key should keep "the same call is the same action" without being
something another caller can forge (a keyed hash with a secret only the server holds).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import time
from typing import Any

import pytest

from reachstore import Client as Sdk
from reachstore import ReachstoreError
from tests.e2e.system import RunningSystem
from tests.mcp.mcp_support import connect
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


def _documented_key(tenant: str, key_id: str, tool: str, intent: dict[str, Any]) -> str:
    """docs/MCP.md: "mcp-" + sha256(canonical JSON of [tenant, key id, tool name,
    {entity_id, action_type, params}, UTC day])[:40]."""
    day = dt.datetime.now(dt.UTC).date().isoformat()
    text = json.dumps(
        [tenant, key_id, tool, intent, day],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return "mcp-" + hashlib.sha256(text.encode()).hexdigest()[:40]


def test_another_key_of_the_tenant_cannot_block_an_agents_send_by_precomputing_its_key(
    system: RunningSystem, mcp_url: str, keys: dict[str, str], receiver: HttpReceiver
) -> None:
    ticket = f"VICTIM-{time.monotonic_ns()}"
    entity = f"order-{ticket}"
    params = {"ticket": ticket}

    # The agent's key id, as the other key learns it: from a task the agent submitted.
    async def first_send() -> Any:
        async with connect("http", system, mcp_url, keys["agent"]) as client:
            return await client.call_tool(
                "send_hook", {"entity_id": f"{entity}-earlier", "params": {"ticket": "E-1"}}
            )

    earlier = asyncio.run(first_send()).structured_content
    with Sdk.local("127.0.0.1", system.grpc_port_base, api_key=keys["hook_only"]) as other:
        agent_key_id = other.get_reach_task(earlier["task_id"]).submitted_by
        assert agent_key_id
        squatted = _documented_key(
            "acme",
            agent_key_id,
            "send_hook",
            {"entity_id": entity, "action_type": "open", "params": params},
        )
        try:
            other.reach(
                {
                    "name": "open",
                    "channel": "hook",
                    "action_type": "open",
                    "params": {"ticket": f"DECOY-{ticket}"},
                },
                entity_id=f"decoy-{ticket}",
                idempotency_key=squatted,
            )
        except ReachstoreError as exc:  # refused: the key is not the other's to take
            pytest.skip(f"squatting refused: {exc}")

    async def agent_send() -> Any:
        async with connect("http", system, mcp_url, keys["agent"]) as client:
            return await client.call_tool(
                "send_hook", {"entity_id": entity, "params": params, "wait_ms": 10_000}
            )

    result = asyncio.run(agent_send())
    assert result.is_error is False, result.content[0].text
    assert result.structured_content["state"] == "succeeded"
    assert receiver.deliveries_by_field("ticket")[ticket] == 1

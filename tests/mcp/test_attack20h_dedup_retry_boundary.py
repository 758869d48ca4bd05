"""A retry across a window boundary of a call that the reach service had de-duplicated
(reachstore_server/mcp/calls.py ``_earlier_task``, docs/MCP.md "Derived keys").

Attack: the first call of a reach tool is answered with an action that an EARLIER task
reserved (the reach service's own action key matched: the same intent sent by another
tool of the same action type, or by another key of the tenant). The agent's connection
breaks, and it retries a few minutes later, just after the window's boundary. The
look-back searches the previous window for a task carrying the first call's derived key
on this tool's channel, but the first call never made such a task: it was answered with
the earlier one. So the retry reserves a new action in the new window and the receiver
gets the same ticket a second time.

Guarantee (issue 20, MCP reach tools): "a retry within the look-back after a window
boundary finds its first call": the retry must answer the same action as the first call,
and the receiver must see the ticket once.

The MCP server's clock is in the test's hands (tests/mcp/clocked.py); the first task is
written back in the database as made at 23:50 the day before, as tests/mcp/test_mcp_windows.py
does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.system import RunningSystem
from tests.mcp.clocked import (
    as_if_made_at,
    clocked,
    send_at,
    ticket_for,
    today_at,
    wait_deliveries,
)
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


def test_retry_after_midnight_of_a_call_answered_by_another_channels_action(
    system: RunningSystem, keys: dict[str, str], receiver: HttpReceiver, tmp_path: Path
) -> None:
    clock = tmp_path / "clock"
    ticket, entity = ticket_for("XDESK")
    hook_at, desk_at, retry_at = today_at(23, 50, 1), today_at(23, 58, 1), today_at(0, 2)

    async def run() -> tuple[Any, Any, Any]:
        async with clocked(system, keys["agent"], clock) as client:
            hook = await send_at(client, clock, hook_at, "send_hook", entity, ticket)
            desk = await send_at(client, clock, desk_at, "send_desk", entity, ticket)
            as_if_made_at(system, sorted({hook["task_id"], desk["task_id"]}), hook_at)
            again = await send_at(client, clock, retry_at, "send_desk", entity, ticket)
            return hook, desk, again

    hook, desk, again = asyncio.run(run())
    # The first send_desk was answered with the hook's action (the existing behaviour).
    assert desk["action_id"] == hook["action_id"] and desk["deduplicated"] is True, desk
    delivered = wait_deliveries(receiver, ticket, 2)
    assert again["action_id"] == desk["action_id"] and delivered == 1, (
        f"the 00:02 retry of the 23:58 send_desk call reserved a new action "
        f"{again['action_id']} (first call answered {desk['action_id']}); "
        f"ticket delivered {delivered} time(s)"
    )


def test_retry_after_midnight_of_a_call_answered_by_another_keys_action(
    system: RunningSystem, keys: dict[str, str], receiver: HttpReceiver, tmp_path: Path
) -> None:
    clock = tmp_path / "clock"
    ticket, entity = ticket_for("XKEY")
    first_at, second_at, retry_at = today_at(23, 50, 1), today_at(23, 58, 1), today_at(0, 2)
    clock_b = tmp_path / "clock-b"

    async def run() -> tuple[Any, Any, Any]:
        async with clocked(system, keys["agent"], clock) as agent:
            first = await send_at(agent, clock, first_at, "send_hook", entity, ticket)
        async with clocked(system, keys["hook_only"], clock_b) as other:
            second = await send_at(other, clock_b, second_at, "send_hook", entity, ticket)
            as_if_made_at(system, sorted({first["task_id"], second["task_id"]}), first_at)
            again = await send_at(other, clock_b, retry_at, "send_hook", entity, ticket)
        return first, second, again

    first, second, again = asyncio.run(run())
    assert second["action_id"] == first["action_id"] and second["deduplicated"] is True, second
    delivered = wait_deliveries(receiver, ticket, 2)
    assert again["action_id"] == second["action_id"] and delivered == 1, (
        f"the 00:02 retry of the 23:58 call reserved a new action {again['action_id']} "
        f"(first call answered {second['action_id']}); ticket delivered {delivered} time(s)"
    )

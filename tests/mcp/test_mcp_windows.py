"""Reach tools on channels whose windows differ, attacked from the MCP client's side
(reachstore_server/mcp/keying.py, docs/MCP.md "Derived keys").

- On a channel whose idempotency window is an hour (`pager`), the same call an hour and
  more later is the next hour's action, and is sent; a retry a few minutes after its first
  call is the same action, across the hour's boundary too.
- `send_desk` with the same arguments as an earlier `send_hook` is, by the reach service's
  rule, the same intent (docs/DESIGN.md: the key is tenant, entity, action type, key
  parameters and window, not the channel), so it finds the hook's action; the answer must
  then say which channel that action is on, or the agent believes the desk was reached.

The MCP server's clock is in the test's hands (tests/mcp/clocked.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
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
from tests.mcp.mcp_support import start_system
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory, receiver: HttpReceiver
) -> Iterator[RunningSystem]:
    running = start_system(tmp_path_factory.mktemp("mcp-windows"), receiver, hourly=("pager",))
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


def test_the_next_hours_page_is_sent(
    system: RunningSystem, keys: dict[str, str], receiver: HttpReceiver, tmp_path: Path
) -> None:
    clock = tmp_path / "clock"
    ticket, entity = ticket_for("PAGE")
    # Yesterday's hours: the reach service keeps real time, and keys the second call by
    # the hour it really is; were that 09:xx today, it would be the rewritten first call's
    # hour, and the reach service would rightly take the two as one.
    nine, ten = today_at(9, 20, days_back=1), today_at(10, 40, days_back=1)

    async def run() -> tuple[Any, Any]:
        async with clocked(system, keys["agent"], clock) as client:
            first = await send_at(client, clock, nine, "send_pager", entity, ticket)
            as_if_made_at(system, [first["task_id"]], nine)
            later = await send_at(client, clock, ten, "send_pager", entity, ticket)
            return first, later

    first, later = asyncio.run(run())
    assert first["state"] == "succeeded"
    delivered = wait_deliveries(receiver, ticket, 2)
    assert later["task_id"] != first["task_id"] and delivered == 2, (
        f"the 10:40 page of an hourly channel was answered with 09:20's task "
        f"(deduplicated={later['deduplicated']}, key {later['request_key']}); "
        f"delivered {delivered} time(s)"
    )


def test_a_retry_across_the_hour_finds_its_first_call(
    system: RunningSystem, keys: dict[str, str], receiver: HttpReceiver, tmp_path: Path
) -> None:
    clock = tmp_path / "clock"
    ticket, entity = ticket_for("EDGE")
    first_at = today_at(9, 58)

    async def run() -> tuple[Any, Any]:
        async with clocked(system, keys["agent"], clock) as client:
            first = await send_at(client, clock, first_at, "send_pager", entity, ticket)
            as_if_made_at(system, [first["task_id"]], first_at)
            again = await send_at(client, clock, today_at(10, 3), "send_pager", entity, ticket)
            return first, again

    first, again = asyncio.run(run())
    assert again["task_id"] == first["task_id"] and again["deduplicated"] is True
    assert wait_deliveries(receiver, ticket, 1) == 1


def test_an_action_found_on_another_channel_is_named(
    system: RunningSystem, keys: dict[str, str], receiver: HttpReceiver, tmp_path: Path
) -> None:
    clock = tmp_path / "clock"
    ticket, entity = ticket_for("CROSS")
    noon = today_at(12, 0)

    async def run() -> tuple[Any, Any]:
        async with clocked(system, keys["agent"], clock) as client:
            hook = await send_at(client, clock, noon, "send_hook", entity, ticket)
            desk = await send_at(client, clock, noon, "send_desk", entity, ticket)
            return hook, desk

    hook, desk = asyncio.run(run())
    assert hook["channel"] == "hook" and hook["deduplicated"] is False
    assert desk["action_id"] == hook["action_id"] and desk["deduplicated"] is True
    assert desk["channel"] == "hook", desk
    assert "on channel hook" in desk["status_note"], desk["status_note"]
    assert wait_deliveries(receiver, ticket, 1) == 1

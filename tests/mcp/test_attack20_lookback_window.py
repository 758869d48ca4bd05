"""Attacks on the midnight look-back of the MCP reach tools (reachstore_server/mcp/keying.py,
reachstore_server/mcp/calls.py, docs/MCP.md "Why a UTC day").

A ``send_<channel>`` call derives its key from the UTC day; during the first hour of a day
it first looks for the task the previous day's key reserved, "among the entity's 20 newest
tasks on that channel", so that "a retry within an hour of its first call is the same
action, across midnight too".

The MCP server here runs with the clock of its reach tools under the test's control
(tests/mcp/attack20_clock.py); the reach service keeps real time. A first call "made
yesterday" is made now and then written back in the database as yesterday's (its task's
times and its action's idempotency window, ``reachstore_server/reach/idempotency.py``),
which is exactly what the rows would hold had it been made then.

- the look-back's own promise, as a control: a retry at 00:10 of a call made at 23:50
  finds it (one delivery);
- a retry at 00:10 of a call made at 23:50, when the agent sent 20 other things to the
  same entity in between (a busy customer): the first call's task is the 21st newest, the
  look-back misses it, and the retry is sent a second time;
- a call at 00:30 of an intent last sent yesterday at 00:10 (24 h 20 min earlier: not a
  retry, a new day's action on a channel whose window is a day) is answered with
  yesterday's task and never sent: the look-back does not check the earlier task's age.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.system import RunningSystem
from tests.mcp.clocked import as_if_made_at, clocked, send_at, today_at, wait_deliveries
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


def test_a_retry_just_after_midnight_finds_its_first_call(
    system: RunningSystem, keys: dict[str, str], receiver: HttpReceiver, tmp_path: Path
) -> None:
    """Control: the look-back's documented case holds."""
    clock = tmp_path / "clock"
    ticket = f"MID-{time.monotonic_ns()}"
    entity = f"customer-{ticket}"

    async def run() -> tuple[Any, Any]:
        async with clocked(system, keys["agent"], clock) as client:
            first = await send_at(
                client, clock, today_at(23, 50, days_back=1), "send_hook", entity, ticket
            )
            as_if_made_at(system, [first["task_id"]], today_at(23, 50, days_back=1))
            again = await send_at(client, clock, today_at(0, 10), "send_hook", entity, ticket)
            return first, again

    first, again = asyncio.run(run())
    assert first["state"] == "succeeded"
    assert again["deduplicated"] is True and again["task_id"] == first["task_id"]
    assert wait_deliveries(receiver, ticket, 1) == 1


def test_a_retry_just_after_midnight_is_not_sent_twice_for_a_busy_entity(
    system: RunningSystem, keys: dict[str, str], receiver: HttpReceiver, tmp_path: Path
) -> None:
    clock = tmp_path / "clock"
    ticket = f"BUSY-{time.monotonic_ns()}"
    entity = f"customer-{ticket}"
    yesterday = today_at(23, 50, days_back=1)

    async def run() -> tuple[Any, Any]:
        async with clocked(system, keys["agent"], clock) as client:
            first = await send_at(client, clock, yesterday, "send_hook", entity, ticket)
            others = [
                await send_at(
                    client,
                    clock,
                    yesterday + dt.timedelta(minutes=5),
                    "send_hook",
                    entity,
                    f"{ticket}-n{i}",
                )
                for i in range(20)
            ]
            as_if_made_at(system, [first["task_id"]] + [o["task_id"] for o in others], yesterday)
            # 20 minutes after the first call: a retry (the answer was lost on the way).
            again = await send_at(client, clock, today_at(0, 10), "send_hook", entity, ticket)
            return first, again

    first, again = asyncio.run(run())
    assert first["state"] == "succeeded"
    delivered = wait_deliveries(receiver, ticket, 2)
    assert again["task_id"] == first["task_id"] and delivered == 1, (
        f"a retry 20 minutes after its first call was sent again: delivered {delivered} "
        f"times; first task {first['task_id']}, retry's task {again['task_id']} "
        f"(deduplicated={again['deduplicated']}, request_key {again['request_key']})"
    )


def test_a_new_days_call_is_not_swallowed_by_yesterdays_task(
    system: RunningSystem, keys: dict[str, str], receiver: HttpReceiver, tmp_path: Path
) -> None:
    clock = tmp_path / "clock"
    ticket = f"DAILY-{time.monotonic_ns()}"
    entity = f"customer-{ticket}"
    yesterday = today_at(0, 10, days_back=1)

    async def run() -> tuple[Any, Any]:
        async with clocked(system, keys["agent"], clock) as client:
            first = await send_at(client, clock, yesterday, "send_hook", entity, ticket)
            as_if_made_at(system, [first["task_id"]], yesterday)
            # 24 h 20 min later: today's reminder on a channel whose window is a day.
            today = await send_at(client, clock, today_at(0, 30), "send_hook", entity, ticket)
            return first, today

    first, today = asyncio.run(run())
    assert first["state"] == "succeeded"
    delivered = wait_deliveries(receiver, ticket, 2)
    assert today["task_id"] != first["task_id"] and delivered == 2, (
        f"a call 24 h 20 min after the last one (a new day on a daily channel) was answered "
        f"with yesterday's task {first['task_id']} (deduplicated={today['deduplicated']}) "
        f"and delivered {delivered} time(s) in all"
    )


def test_calls_in_the_first_hour_of_a_day_report_the_key_that_answered_them(
    system: RunningSystem, keys: dict[str, str], receiver: HttpReceiver, tmp_path: Path
) -> None:
    """A call at 00:07 with no call the day before, then the same call again at 00:08 and
    00:09: one task, one delivery, and every answer names that task's key. The retries
    found the first call's task (the same intent, within the look-back) and reported
    yesterday's key, which no task holds, as theirs (CI, just after midnight)."""
    clock = tmp_path / "clock"
    ticket = f"NEWDAY-{time.monotonic_ns()}"
    entity = f"customer-{ticket}"

    async def run() -> list[Any]:
        async with clocked(system, keys["agent"], clock) as client:
            return [
                await send_at(client, clock, today_at(0, minute), "send_hook", entity, ticket)
                for minute in (7, 8, 9)
            ]

    answers = asyncio.run(run())
    assert {a["task_id"] for a in answers} == {answers[0]["task_id"]}, answers
    assert {a["request_key"] for a in answers} == {answers[0]["request_key"]}, answers
    assert wait_deliveries(receiver, ticket, 1) == 1

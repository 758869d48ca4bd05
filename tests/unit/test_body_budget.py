"""The bridge's budget of request-body bytes (reachstore_server/bridge/body_budget.py)."""

from __future__ import annotations

import asyncio

import pytest

from reachstore_server.bridge.body_budget import FREE_BYTES, BodyBudget
from reachstore_server.common import errors

MIB = 1024 * 1024


def test_a_body_waits_for_room_then_is_refused_naming_what_is_held() -> None:
    async def run() -> None:
        budget = BodyBudget(budget_bytes=10 * MIB, wait_s=0.2)
        async with budget.room_for(8 * MIB, False, 20 * MIB):
            with pytest.raises(errors.ReachstoreError) as refused:
                async with budget.room_for(4 * MIB, False, 20 * MIB):
                    raise AssertionError("there was no room for it")
            failure = refused.value.failure
            assert failure.error_code == "SERVICE_OVERLOADED"
            assert failure.retry_after_ms == 1000
            assert failure.structured_data["reason"] == "bodies_being_received"
            assert failure.structured_data["held_bytes"] == 8 * MIB
            assert failure.structured_data["body_bytes"] == 4 * MIB
        assert budget.held == 0

    asyncio.run(run())


def test_room_freed_while_a_body_waits_is_its() -> None:
    async def run() -> None:
        budget = BodyBudget(budget_bytes=10 * MIB, wait_s=2.0)
        first_done = asyncio.Event()

        async def first() -> None:
            async with budget.room_for(8 * MIB, False, 20 * MIB):
                await asyncio.sleep(0.2)
            first_done.set()

        async def second() -> bool:
            await asyncio.sleep(0.05)
            async with budget.room_for(8 * MIB, False, 20 * MIB):
                return first_done.is_set()

        _, waited = await asyncio.gather(first(), second())
        assert waited, "the second body was read while the first still held its room"
        assert budget.held == 0

    asyncio.run(run())


def test_what_takes_room() -> None:
    async def run() -> None:
        budget = BodyBudget(budget_bytes=30 * MIB, wait_s=0.1)
        async with budget.room_for(None, False, 20 * MIB):  # no body at all
            assert budget.held == 0
        async with budget.room_for(FREE_BYTES, False, 20 * MIB):  # a small one
            assert budget.held == 0
        async with budget.room_for(None, True, 20 * MIB):  # chunked: may be the largest
            assert budget.held == 20 * MIB
        async with budget.room_for(99 * MIB, False, 20 * MIB):  # refused for its size later
            assert budget.held == 20 * MIB
        assert budget.held == 0

    asyncio.run(run())

"""The bridge's budget of request-body bytes (reachstore_server/bridge/body_budget.py)."""

from __future__ import annotations

import asyncio

import pytest

from reachstore_server.bridge.body_budget import FREE_BYTES, BodyBudget
from reachstore_server.common import errors

MIB = 1024 * 1024


def test_a_chunk_waits_for_room_then_is_refused_naming_what_is_held() -> None:
    async def run() -> None:
        budget = BodyBudget(budget_bytes=10 * MIB, wait_s=0.2)
        async with budget.body() as first:
            await first(FREE_BYTES + 8 * MIB)
            with pytest.raises(errors.ReachstoreError) as refused:
                async with budget.body() as second:
                    await second(FREE_BYTES)  # free
                    await second(4 * MIB)
            failure = refused.value.failure
            assert failure.error_code == "SERVICE_OVERLOADED"
            assert failure.retry_after_ms == 1000
            assert failure.structured_data["reason"] == "bodies_being_received"
            assert failure.structured_data["held_bytes"] == 8 * MIB
            assert budget.held == 8 * MIB  # the refused body gave back nothing it had not
        assert budget.held == 0

    asyncio.run(run())


def test_room_freed_while_a_chunk_waits_is_its() -> None:
    async def run() -> None:
        budget = BodyBudget(budget_bytes=10 * MIB, wait_s=2.0)
        first_done = asyncio.Event()

        async def first() -> None:
            async with budget.body() as take:
                await take(FREE_BYTES + 8 * MIB)
                await asyncio.sleep(0.2)
            first_done.set()

        async def second() -> bool:
            await asyncio.sleep(0.05)
            async with budget.body() as take:
                await take(FREE_BYTES + 8 * MIB)
                return first_done.is_set()

        _, waited = await asyncio.gather(first(), second())
        assert waited, "the second body was read while the first still held its room"
        assert budget.held == 0

    asyncio.run(run())


def test_only_bytes_received_beyond_the_first_64_kib_take_room() -> None:
    """A head declaring a large body takes nothing until its bytes come: declared lengths
    reserved up front let callers that sent nothing hold the whole budget."""

    async def run() -> None:
        budget = BodyBudget(budget_bytes=30 * MIB, wait_s=0.1)
        async with budget.body() as take:
            assert budget.held == 0
            await take(FREE_BYTES // 2)
            await take(FREE_BYTES // 2)
            assert budget.held == 0
            await take(1000)
            assert budget.held == 1000
            await take(MIB)
            assert budget.held == MIB + 1000
        assert budget.held == 0

    asyncio.run(run())

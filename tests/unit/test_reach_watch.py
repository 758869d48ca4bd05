"""Long-poll wake-ups: a change in this process ends the wait at once."""

from __future__ import annotations

import asyncio
import time

from reachstore_server.reach.watch import FALLBACK_POLL_SECONDS, TaskChanges


def test_a_notification_wakes_the_waiter_of_that_task_only() -> None:
    async def scenario() -> tuple[float, bool]:
        changes = TaskChanges()
        with changes.watching("t1") as mine, changes.watching("t2") as other:
            asyncio.get_running_loop().call_later(0.01, changes.notify, "t1")
            started = time.monotonic()
            await changes.wait(mine, 5.0)
            return time.monotonic() - started, other.is_set()

    took, other_woken = asyncio.run(scenario())
    assert took < FALLBACK_POLL_SECONDS / 2
    assert not other_woken


def test_without_news_the_wait_ends_at_the_fallback_poll_and_forgets_waiters() -> None:
    async def scenario() -> float:
        changes = TaskChanges()
        with changes.watching("t1") as event:
            started = time.monotonic()
            await changes.wait(event, 5.0)
            took = time.monotonic() - started
        changes.notify("t1")  # nobody is watching any more: nothing to do
        assert changes._waiters == {}  # noqa: SLF001
        return took

    assert FALLBACK_POLL_SECONDS * 0.9 <= asyncio.run(scenario()) < 2.0

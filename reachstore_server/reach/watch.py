"""Waking the callers that long-poll a task (GetTask with ``wait_ms``) when it changes.

Changes made in this process (the executor's, cancels, resolutions) wake the waiters at
once. Changes made by another reach process on the same database cannot: waiters also
re-read the task's version every ``FALLBACK_POLL_SECONDS``.

The waiters of one task share their reads (``TaskChanges.shared``): one read of a task at a
time, its answer reused by every waiter for ``FALLBACK_POLL_SECONDS`` and dropped when this
process changes the task. A thousand callers long-polling one task then cost the database
what one does, instead of a thousand reads every poll (docs/OPERATIONS.md, "Load shedding").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

FALLBACK_POLL_SECONDS = 0.2


class TaskChanges:
    """Per-task events for the waiters of one process (one asyncio loop)."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}
        # (task id, what is read) -> (when the read started, its answer to come).
        self._reads: dict[tuple[str, Hashable], tuple[float, asyncio.Future[Any]]] = {}

    def notify(self, task_id: str) -> None:
        for key in [key for key in self._reads if key[0] == task_id]:
            del self._reads[key]  # what was read before the change is stale now
        for event in self._waiters.get(task_id, ()):
            event.set()

    async def shared(self, task_id: str, what: Hashable, read: Callable[[], Any]) -> Any:
        """``read()`` (a blocking store read about ``task_id``, run in a thread), or the
        answer of the same read started less than ``FALLBACK_POLL_SECONDS`` ago."""
        key = (task_id, what)
        now = time.monotonic()
        entry = self._reads.get(key)
        if entry is None or now - entry[0] >= FALLBACK_POLL_SECONDS:
            entry = (now, asyncio.ensure_future(asyncio.to_thread(read)))
            self._reads[key] = entry
            asyncio.get_running_loop().call_later(FALLBACK_POLL_SECONDS, self._forget, key, entry)
        return await asyncio.shield(entry[1])

    def _forget(self, key: tuple[str, Hashable], entry: tuple[float, asyncio.Future[Any]]) -> None:
        if self._reads.get(key) is entry:
            del self._reads[key]
        if entry[1].done() and not entry[1].cancelled():
            entry[1].exception()  # a failed read nobody awaited any more: seen, not logged

    @contextlib.contextmanager
    def watching(self, task_id: str) -> Iterator[asyncio.Event]:
        """An event set by the next ``notify(task_id)`` while the block runs."""
        event = asyncio.Event()
        waiters = self._waiters.setdefault(task_id, set())
        waiters.add(event)
        try:
            yield event
        finally:
            waiters.discard(event)
            if not waiters:
                del self._waiters[task_id]

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        """Until ``event`` is set or the fallback poll (or ``timeout``) is due; clears it.
        True when it was set: this process changed the task."""
        try:
            await asyncio.wait_for(event.wait(), min(timeout, FALLBACK_POLL_SECONDS))
        except TimeoutError:
            pass
        notified = event.is_set()
        event.clear()
        return notified

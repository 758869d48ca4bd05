"""Waking the callers that long-poll a task (GetTask with ``wait_ms``) when it changes.

Changes made in this process (the executor's, cancels, resolutions) wake the waiters at
once. Changes made by another reach process on the same database cannot: waiters also
re-read the task's version every ``FALLBACK_POLL_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

FALLBACK_POLL_SECONDS = 0.2


class TaskChanges:
    """Per-task events for the waiters of one process (one asyncio loop)."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def notify(self, task_id: str) -> None:
        for event in self._waiters.get(task_id, ()):
            event.set()

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

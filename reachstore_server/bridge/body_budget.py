"""How many bytes of request bodies the bridge holds at once.

The bridge reads a body into memory as it comes (``http_body.read_body``), and a body may
take ``REACHSTORE_HTTP_BODY_TIMEOUT_S`` (60 s) to arrive on each of up to
``REACHSTORE_HTTP_MAX_CONNECTIONS`` (2,000) connections: 64 callers that sent 18 MB of a
19 MB batch and held it grew a bridge from 70 MiB to 1,173 MiB
(tests/e2e/test_attack18_bridge_stalled_bodies.py). So the bytes of a body beyond its first
64 KiB take room in a budget as they are read, and keep it until the request's answer is
built. A chunk for which no room comes free within ``WAIT_S`` ends the request with
``SERVICE_OVERLOADED`` (503, ``Retry-After``), the rest of its body unread; the HTTP
server leaves what the caller sent next in the socket's buffers, flow controlled.

Room is taken for bytes received, not for the length a request declares: reserved from
the declared length, 13 callers that sent heads declaring 20 MB each and then nothing held
the whole budget, and every real upload was refused, at no cost to them. The first 64 KiB
of a body take no room: the connection limit bounds them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from reachstore_server.common import errors

# Room for a dozen bodies of the largest size allowed (20 MiB), and for hundreds of the
# batches of documents callers send (tens to hundreds of KiB).
BUDGET_BYTES = 256 * 1024 * 1024
# Bodies at most this large take no room.
FREE_BYTES = 64 * 1024
# As long as a call may wait for a slot in the services (REACHSTORE_ADMIT_WAIT_MS).
WAIT_S = 1.0
_RETRY_AFTER_MS = 1000


class BodyBudget:
    """The bytes of bodies being read or held by one bridge process; used on its loop."""

    def __init__(self, budget_bytes: int = BUDGET_BYTES, wait_s: float = WAIT_S) -> None:
        self._budget = budget_bytes
        self._wait_s = wait_s
        self.held = 0
        self._freed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def body(self) -> AsyncIterator[Callable[[int], Awaitable[None]]]:
        """For one request's body: ``take(n)``, room for its next ``n`` bytes (waiting
        for it, SERVICE_OVERLOADED when none came free in time), all given back when the
        block ends."""
        read = taken = 0

        async def take(size: int) -> None:
            nonlocal read, taken
            read += size
            needed = max(0, read - FREE_BYTES) - taken
            if needed > 0:
                await self._take(needed)
                taken += needed

        try:
            yield take
        finally:
            if taken:
                async with self._freed:
                    self.held -= taken
                    self._freed.notify_all()

    async def _take(self, size: int) -> None:
        async with self._freed:
            try:
                await asyncio.wait_for(
                    self._freed.wait_for(lambda: self.held + size <= self._budget), self._wait_s
                )
            except TimeoutError:
                raise errors.ReachstoreError(
                    errors.SERVICE_OVERLOADED,
                    f"refused: the bridge holds {self.held} bytes of request bodies, its "
                    f"limit; retry in {_RETRY_AFTER_MS / 1000:.3f} s",
                    retry_after_ms=_RETRY_AFTER_MS,
                    structured_data={
                        "reason": "bodies_being_received",
                        "limit": self._budget,
                        "held_bytes": self.held,
                    },
                ) from None
            self.held += size

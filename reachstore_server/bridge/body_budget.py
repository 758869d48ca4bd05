"""How many bytes of request bodies the bridge holds at once.

The bridge reads a body into memory as it comes (``http_body.read_body``), and a body may
take ``REACHSTORE_HTTP_BODY_TIMEOUT_S`` (60 s) to arrive on each of up to
``REACHSTORE_HTTP_MAX_CONNECTIONS`` (2,000) connections: 64 callers that sent 18 MB of a
19 MB batch and held it grew a bridge from 70 MiB to 1,173 MiB
(tests/e2e/test_attack18_bridge_stalled_bodies.py). So a request whose body may be large
takes room for it in a budget before a byte of the body is read, and keeps it until its
answer is built: its declared ``Content-Length``, or the largest body allowed when it sends
its body in chunks without one. A request for which no room comes free within
``WAIT_S`` is refused with ``SERVICE_OVERLOADED`` (503, ``Retry-After``), its body
unread; the HTTP server leaves what the caller sent in the socket's buffers, flow
controlled. Small bodies take no room: at most 64 KiB on each connection, the connection
limit bounds them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

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
    async def room_for(
        self, declared: int | None, chunked: bool, largest: int
    ) -> AsyncIterator[None]:
        """Room for a body of ``declared`` bytes (``largest`` when it comes ``chunked``
        without a declared length; none for a request without a body) for as long as the
        block runs; SERVICE_OVERLOADED when none came free in time."""
        if declared is not None:
            size = min(largest, declared)
        else:
            size = largest if chunked else 0
        if size <= FREE_BYTES:
            yield
            return
        async with self._freed:
            try:
                await asyncio.wait_for(
                    self._freed.wait_for(lambda: self.held + size <= self._budget), self._wait_s
                )
            except TimeoutError:
                raise errors.ReachstoreError(
                    errors.SERVICE_OVERLOADED,
                    f"refused: the bridge holds {self.held} bytes of request bodies and "
                    f"this one may take {size}; retry in {_RETRY_AFTER_MS / 1000:.3f} s",
                    retry_after_ms=_RETRY_AFTER_MS,
                    structured_data={
                        "reason": "bodies_being_received",
                        "limit": self._budget,
                        "held_bytes": self.held,
                        "body_bytes": size,
                    },
                ) from None
            self.held += size
        try:
            yield
        finally:
            async with self._freed:
                self.held -= size
                self._freed.notify_all()

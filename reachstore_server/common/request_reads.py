"""Reading every call's request in its handler, before admission, within bounds.

gRPC receives and decodes a unary call's whole request before its handler runs, and it
reads as long as the caller sends: a flood of large batches was held in memory, decoded,
while it waited for admission to refuse it (tests/e2e/test_attack18_large_bodies.py), and a
caller that declared large requests and never finished sending them grew a process by a
gigabyte that stayed (tests/e2e/test_attack18_partial_requests.py). Every unary method is
served instead as a client-streaming call (the caller's unary call is the same on the
wire) whose handler reads the request itself, here:

- at most ``limit`` requests of each kind (reads, calls that add work) are being read, or
  have been and wait for admission, at once, so the memory of requests not yet admitted is
  bounded by twice the limit times the largest message; a read beyond that waits unread
  (gRPC's fixed window, 64 KiB, is all its caller may send meanwhile) for as long as
  admission would let it wait, a call that adds work not at all, then it is refused with
  ``SERVICE_OVERLOADED``;
- a request must arrive within ``READ_S``: a caller that opens a call and sends its body
  slowly, or never, ends with ``REQUEST_TOO_SLOW`` and frees its place.

Reading happens before admission, not inside an admitted slot: a caller that never sends
its body held every slot that way and every read of the service was refused while it did
(tests/unit/test_request_reads.py). Each kind has places of its own, so a flood of stalled
batches does not hold up reads, and the reverse.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from reachstore_server.common import errors
from reachstore_server.common.admission import Kind

# How long a request may take to arrive once its call is being read: a 16 MiB batch
# crosses a 20 ms link in about 5 s with gRPC's fixed window (docs/OPERATIONS.md).
READ_S = 10.0
# The least wait a refusal advises: reads of requests end within ``READ_S`` at worst,
# most in milliseconds, and the calls holding the places may wait for admission a second.
_MIN_RETRY_S = 1.0


class RequestReads:
    """The calls of one process whose requests are being read; used on its event loop.
    ``wait_s``: how long a call waits for a place to be read in. ``drain_s``: how long the
    calls served and waiting take to drain (admission's backlog), the wait a refusal
    advises (at least 1 s)."""

    def __init__(
        self, limit: int, wait_s: float, drain_s: Callable[[], float] = lambda: 0.0
    ) -> None:
        self._limit = limit
        self._wait_s = wait_s
        self._drain_s = drain_s
        self.reading: dict[Kind, int] = {"read": 0, "write": 0}
        self._waiting: dict[Kind, collections.deque[asyncio.Future[None]]] = {
            "read": collections.deque(),
            "write": collections.deque(),
        }

    async def read(
        self, context: grpc.aio.ServicerContext, kind: Kind, *, end_allowed: bool = False
    ) -> Any:
        """The call's next request, decoded, its place given back at once (``held``). The
        end of the caller's requests is ``grpc.aio.EOF`` where ``end_allowed`` (a stream
        of requests), and refused where a request is due."""
        async with self.held(context, kind, end_allowed=end_allowed) as request:
            return request

    @contextlib.asynccontextmanager
    async def held(
        self, context: grpc.aio.ServicerContext, kind: Kind, *, end_allowed: bool = False
    ) -> AsyncIterator[Any]:
        """The call's next request, its place held while the block runs: a request read
        and waiting for admission is in memory as much as one being read. Refused when no
        place came free within ``wait_s``, ``REQUEST_TOO_SLOW`` when the request has not
        arrived within ``READ_S``; the end of the caller's requests is ``grpc.aio.EOF``
        where ``end_allowed``, and refused where a request is due."""
        if not await self._take(kind):
            drain_s = max(self._drain_s(), _MIN_RETRY_S)
            raise errors.ReachstoreError(
                errors.SERVICE_OVERLOADED,
                f"refused: {self._limit} requests of this kind are being received or wait "
                f"for a slot; retry in {drain_s:.3f} s",
                retry_after_ms=math.ceil(drain_s * 1000),
                structured_data={
                    "limit": self._limit,
                    "drain_ms": round(drain_s * 1000, 1),
                    "reason": "requests_being_read",
                },
            )
        try:
            try:
                # From the context, not the request iterator: an iterator left after its
                # first message kept the call's state, and the request with it, alive after
                # the call had ended.
                request = await asyncio.wait_for(context.read(), READ_S)
            except TimeoutError:
                raise errors.ReachstoreError(
                    errors.REQUEST_TOO_SLOW,
                    f"the request did not arrive within {READ_S:g} s",
                    structured_data={"part": "message", "timeout_s": READ_S},
                ) from None
            if request is grpc.aio.EOF and not end_allowed:
                raise errors.invalid("request", "the call carried no request message")
            yield request
        finally:
            self._give_back(kind)

    async def _take(self, kind: Kind) -> bool:
        """A place to read a request of ``kind``: at once, or, for a read, handed over by
        one that ended within ``wait_s``, first come first served. False when none came.
        A call that adds work does not wait: under a flood of large batches, batches that
        waited were all read and decoded in turn, and the process had less time left for
        reads (tests/e2e/test_attack18_large_bodies.py: the slowest lookup beside the
        flood 1.6-2.6 s when they waited, against 0.9-1.5 s refused at once)."""
        waiting = self._waiting[kind]
        if self.reading[kind] < self._limit and not waiting:
            self.reading[kind] += 1
            return True
        if kind == "write":
            return False
        handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting.append(handed)
        try:
            await asyncio.wait_for(handed, self._wait_s)
            return True
        except TimeoutError:
            # Handed over just as the wait ran out: the place is this call's all the same.
            return handed.done() and not handed.cancelled()
        except asyncio.CancelledError:
            if handed.done() and not handed.cancelled():
                self._give_back(kind)  # the caller left with the place it was handed
            raise
        finally:
            if handed in waiting:
                waiting.remove(handed)

    def _give_back(self, kind: Kind) -> None:
        """Hands the place to the first call still waiting, or frees it."""
        waiting = self._waiting[kind]
        while waiting:
            handed = waiting.popleft()
            if not handed.done():
                handed.set_result(None)
                return
        self.reading[kind] -= 1

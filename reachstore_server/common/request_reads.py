"""Reading the requests of calls that add work, before admission, within bounds.

gRPC receives and decodes a unary call's whole request before its handler runs, so a flood
of large batches was held in memory, decoded, while it waited for admission to refuse it
(tests/e2e/test_attack18_large_bodies.py). The methods that add work are served instead as
client-streaming calls (the caller's unary call is the same on the wire) whose handler
reads the request itself (``grpc_server.reads_after_admission``), here:

- at most ``limit`` requests are being read at once; a call beyond that is refused at once
  with ``SERVICE_OVERLOADED`` and never read, so the memory of requests not yet admitted
  is bounded by the limit times the largest message;
- a request must arrive within ``READ_S``: a caller that opens a call and sends its body
  slowly, or never, ends with ``REQUEST_TOO_SLOW`` and frees its place.

Reading happens before admission, not inside an admitted slot: a caller that never sends
its body held every slot that way and every read of the service was refused while it did
(tests/unit/test_request_reads.py). Now it can hold at most this bound, and only calls that
add work wait behind it; reads are served as before.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from reachstore_server.common import errors

# How long a request may take to arrive once its call is being read: a 16 MiB batch
# crosses a 20 ms link in about 5 s with gRPC's fixed window (docs/OPERATIONS.md).
READ_S = 10.0
# The wait a refusal advises: reads of requests end within ``READ_S`` at worst, most in
# milliseconds.
_RETRY_AFTER_MS = 1000


class RequestReads:
    """The calls of one process whose requests are being read; used on its event loop."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self.reading = 0

    async def read(self, context: grpc.aio.ServicerContext) -> Any:
        """The call's one request, decoded; refused at once when ``limit`` are being read,
        ``REQUEST_TOO_SLOW`` when it has not arrived within ``READ_S``."""
        if self.reading >= self._limit:
            raise errors.ReachstoreError(
                errors.SERVICE_OVERLOADED,
                f"refused at once: {self._limit} requests are being received; retry in "
                f"{_RETRY_AFTER_MS / 1000:.3f} s",
                retry_after_ms=_RETRY_AFTER_MS,
                structured_data={"limit": self._limit, "reason": "requests_being_read"},
            )
        self.reading += 1
        try:
            # From the context, not the request iterator: an iterator left after its first
            # message kept the call's state, and the request with it, alive after the call
            # had ended.
            request = await asyncio.wait_for(context.read(), READ_S)
        except TimeoutError:
            raise errors.ReachstoreError(
                errors.REQUEST_TOO_SLOW,
                f"the request did not arrive within {READ_S:g} s",
                structured_data={"part": "message", "timeout_s": READ_S},
            ) from None
        finally:
            self.reading -= 1
        if request is grpc.aio.EOF:
            raise errors.invalid("request", "the call carried no request message")
        return request

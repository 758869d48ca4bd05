"""A token bucket per channel, so reachstore never sends faster than the provider allows.

The bucket refills at ``rate_per_s`` up to ``burst`` tokens; a send takes one. Its rate is
a share of the provider's declared quota (``ChannelConfig.send_rate_per_second``) because
the quota is shared with whatever else the tenant runs against that provider, and a
provider's own counting is never exactly ours.

A token is taken only when a request is actually sent: ``reserve()`` either takes one now or
says how long to wait and takes nothing, and the caller asks again after waiting. A caller
that gives up while waiting (cancelled, deadline passed) has therefore spent nothing, and
waiters never hold tokens that no request uses. Waiters are not served in arrival order; with
one asyncio loop per executor that is fair enough.

A channel without a declared quota has no bucket. Not thread-safe: used from one asyncio
loop.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

# Float drift in ``tokens + elapsed·rate`` must not refuse a caller who waited exactly the
# advised time (with a fake clock it would be told to wait a sliver too small to move the
# clock, forever). A billionth of a token per send is the only excess over the rate.
_EPSILON = 1e-9


class TokenBucket:
    """Starts full. ``rate_per_s`` must be positive and finite. ``burst``
    (at least 1) is how many sends may go back to back after a quiet period; with burst 1 no
    window of any length ``t`` holds more than ``rate·t + 1`` sends."""

    def __init__(
        self,
        rate_per_s: float,
        burst: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not 0 < rate_per_s < math.inf:  # also refuses NaN
            raise ValueError(f"rate_per_s must be a finite number above 0, got {rate_per_s!r}")
        if not 1 <= burst < math.inf:
            raise ValueError(f"burst must be a finite number of at least 1, got {burst!r}")
        self.rate_per_s, self.burst = float(rate_per_s), float(burst)
        self._clock, self._sleep = clock, sleep
        self._tokens = self.burst
        self._stamp = clock()

    def reserve(self) -> float:
        """Takes one token and answers 0.0 if there is one now; otherwise answers the seconds
        until there will be one, and takes nothing."""
        now = self._clock()
        if now > self._stamp:
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate_per_s)
        # A clock that stepped back grants nothing, and refilling resumes from where it is now
        # (keeping the later stamp would stall the bucket until the clock caught up).
        self._stamp = now
        missing = 1.0 - self._tokens
        if missing <= _EPSILON:
            self._tokens = max(0.0, self._tokens - 1.0)
            return 0.0
        return missing / self.rate_per_s

    async def acquire(self) -> float:
        """Waits until a token can be taken, takes it, and answers the seconds waited (by the
        bucket's clock; 0.0 when none was needed). Cancelling the wait takes nothing."""
        wait = self.reserve()
        if wait == 0.0:
            return 0.0
        start = self._clock()
        while wait > 0.0:
            await self._sleep(wait)
            wait = self.reserve()
        return max(0.0, self._clock() - start)

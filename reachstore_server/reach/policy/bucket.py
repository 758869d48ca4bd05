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
from typing import Protocol

# Float drift in ``tokens + elapsed·rate`` must not refuse a caller who waited exactly the
# advised time (with a fake clock it would be told to wait a sliver too small to move the
# clock, forever). A billionth of a token per send is the only excess over the rate.
_EPSILON = 1e-9


class SendBucket(Protocol):
    """What the executor asks of a channel's bucket around each send: it waits, without
    taking anything, until a token is there (``ready_in``), marks the action as being sent,
    and only then takes the token (``try_take``), so that a send that does not go ahead
    (its lease lost, its wait too long) spends nothing."""

    async def ready_in(self) -> float:
        """Seconds until a token will be there (0.0: now); takes nothing."""
        ...

    async def try_take(self) -> float:
        """Takes a token and answers 0.0, or answers the seconds until there will be one
        and takes nothing."""
        ...


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
        self._tokens, self._stamp, wait = take(
            self._tokens, self._stamp, self._clock(), self.rate_per_s, self.burst
        )
        return wait

    def wait_time(self) -> float:
        """Seconds until a token will be there (0.0: now); takes nothing."""
        return take(self._tokens, self._stamp, self._clock(), self.rate_per_s, self.burst)[2]

    async def ready_in(self) -> float:
        return self.wait_time()

    async def try_take(self) -> float:
        return self.reserve()

    async def acquire(self) -> float:
        """Waits until a token can be taken, takes it, and answers the seconds waited (by the
        bucket's clock; 0.0 when none was needed). Cancelling the wait takes nothing."""

        async def reserve() -> float:
            return self.reserve()

        return await wait_for_token(reserve, self._clock, self._sleep)


def take(
    tokens: float, stamp: float, now: float, rate: float, burst: float
) -> tuple[float, float, float]:
    """One reservation on a bucket that held ``tokens`` at ``stamp``: the tokens and stamp
    it holds afterwards, and the seconds to wait (0.0: a token was taken)."""
    if now > stamp:
        tokens = min(burst, tokens + (now - stamp) * rate)
    # A clock that stepped back grants nothing, and refilling resumes from where it is now
    # (keeping the later stamp would stall the bucket until the clock caught up).
    missing = 1.0 - tokens
    if missing <= _EPSILON:
        return max(0.0, tokens - 1.0), now, 0.0
    return tokens, now, missing / rate


async def wait_for_token(
    reserve: Callable[[], Awaitable[float]],
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
) -> float:
    """Asks ``reserve`` until it grants a token, sleeping the advised time in between;
    answers the seconds waited."""
    wait = await reserve()
    if wait == 0.0:
        return 0.0
    start = clock()
    while wait > 0.0:
        await sleep(wait)
        wait = await reserve()
    return max(0.0, clock() - start)

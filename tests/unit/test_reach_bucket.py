"""The per-channel token bucket on a fake clock: the rate is never exceeded, and a token
is taken only by a request that is sent."""

from __future__ import annotations

import asyncio
import math
import random
import time

import pytest

from reachstore_server.reach.policy.bucket import TokenBucket


class FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def assert_rate_bound(times: list[float], rate: float, burst: float) -> None:
    """No window [t_i, t_j] holds more than rate·(t_j − t_i) + burst sends (up to the
    billionth of a token per send the bucket forgives for float drift)."""
    for i in range(len(times)):
        for j in range(i, len(times)):
            sends = j - i + 1
            assert sends <= rate * (times[j] - times[i]) + burst + 1e-6, (i, j)


def test_the_bucket_starts_full_and_then_says_how_long_to_wait() -> None:
    clock = FakeClock()
    bucket = TokenBucket(4.0, clock=clock)
    assert bucket.reserve() == 0.0
    assert bucket.reserve() == pytest.approx(0.25)


def test_no_token_is_consumed_while_waiting() -> None:
    clock = FakeClock()
    bucket = TokenBucket(4.0, clock=clock)
    bucket.reserve()
    # Asking again and again does not push the next token further away.
    assert [bucket.reserve() for _ in range(100)] == [pytest.approx(0.25)] * 100
    clock.advance(0.1)
    assert bucket.reserve() == pytest.approx(0.15)
    clock.advance(0.15)
    assert bucket.reserve() == 0.0
    assert bucket.reserve() == pytest.approx(0.25)


@pytest.mark.parametrize("seed", range(3))
def test_1000_sends_never_exceed_the_rate_in_any_window(seed: int) -> None:
    """Callers ask at random moments, sometimes early, sometimes late, sometimes idle."""
    rng = random.Random(seed)
    clock = FakeClock(rng.uniform(0.0, 1e5))
    bucket = TokenBucket(7.0, clock=clock)
    sent: list[float] = []
    while len(sent) < 1000:
        wait = bucket.reserve()
        if wait == 0.0:
            sent.append(clock.now)
        roll = rng.random()
        if roll < 0.4:
            clock.advance(wait)  # exactly as advised
        elif roll < 0.7:
            clock.advance(wait * rng.random())  # too early
        elif roll < 0.95:
            clock.advance(rng.uniform(0.0, 0.3))
        else:
            clock.advance(rng.uniform(0.0, 5.0))  # idle: the bucket refills to one token only
    assert_rate_bound(sent, 7.0, 1.0)


def test_a_greedy_sender_gets_exactly_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(7.0, clock=clock)
    assert bucket.rate_per_s == pytest.approx(7.0)
    start, sent = clock.now, []
    while clock.now - start <= 10.0:
        wait = bucket.reserve()
        if wait == 0.0:
            sent.append(clock.now)
        else:
            clock.advance(wait)
    sent = [t for t in sent if t - start <= 10.0]
    assert len(sent) in (70, 71)  # at 0, 1/7, …, 70/7 s: float rounding may push the last out
    assert_rate_bound(sent, 7.0, 1.0)
    for before, after in zip(sent, sent[1:], strict=False):
        assert after - before == pytest.approx(1 / 7)


def test_a_burst_goes_back_to_back_then_the_rate_applies() -> None:
    clock = FakeClock()
    bucket = TokenBucket(2.0, burst=3.0, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.5)
    clock.advance(60.0)  # a long idle refills to the burst, not beyond
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.5)]


def test_a_clock_stepping_back_grants_nothing() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1.0, clock=clock)
    bucket.reserve()
    clock.advance(-50.0)
    assert bucket.reserve() == pytest.approx(1.0)
    clock.advance(1.0)
    assert bucket.reserve() == 0.0


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan])
def test_a_bucket_needs_a_positive_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        TokenBucket(rate)


@pytest.mark.parametrize("burst", [0.0, 0.5, math.inf, math.nan])
def test_a_bucket_needs_a_burst_of_at_least_one(burst: float) -> None:
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(1.0, burst)


class FakeSleep:
    """An asyncio sleep that moves the fake clock instead of waiting."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.slept: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.advance(seconds)
        await asyncio.sleep(0)


def test_acquire_waits_and_reports_the_time_waited() -> None:
    clock = FakeClock()
    sleep = FakeSleep(clock)
    bucket = TokenBucket(5.0, clock=clock, sleep=sleep)

    async def main() -> list[float]:
        return [await bucket.acquire() for _ in range(4)]

    waits = asyncio.run(main())
    assert waits == [0.0, pytest.approx(0.2), pytest.approx(0.2), pytest.approx(0.2)]
    assert sleep.slept == [pytest.approx(0.2)] * 3
    assert clock.now == pytest.approx(1000.6)


def test_a_cancelled_wait_takes_no_token() -> None:
    clock = FakeClock()
    never = asyncio.Event()

    async def sleep_forever(seconds: float) -> None:
        await never.wait()

    bucket = TokenBucket(1.0, clock=clock, sleep=sleep_forever)

    async def main() -> None:
        assert await bucket.acquire() == 0.0
        waiter = asyncio.create_task(bucket.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(main())
    clock.advance(1.0)
    assert bucket.reserve() == 0.0  # the token the cancelled waiter was waiting for
    assert bucket.reserve() == pytest.approx(1.0)


def test_concurrent_acquirers_on_the_real_clock_share_the_rate() -> None:
    rate, count = 100.0, 8
    bucket = TokenBucket(rate)

    async def main() -> list[float]:
        return await asyncio.gather(*(bucket.acquire() for _ in range(count)))

    started = time.monotonic()
    waits = asyncio.run(main())
    elapsed = time.monotonic() - started
    assert (count - 1) / rate <= elapsed < 2.0
    assert 0.0 in waits and all(w >= 0.0 for w in waits)
    assert max(waits) >= (count - 1) / rate - 1e-3

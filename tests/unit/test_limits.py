"""Rate limits and size quotas, on an injected clock: nothing here sleeps."""

from __future__ import annotations

import dataclasses
import re
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator

import pytest

from reachstore_server.common.config import ConfigError
from reachstore_server.common.limits import (
    ENVIRONMENT,
    Limits,
    RateLimiter,
    RequestLimiter,
    bytes_left,
    documents_left,
    namespace_quota_left,
    retry_after_ms,
)


class FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self, now: float = 10_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch as often as the interpreter allows, to provoke races."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def run_threads(count: int, work: Callable[[], None]) -> None:
    barrier = threading.Barrier(count)

    def start() -> None:
        barrier.wait()
        work()

    threads = [threading.Thread(target=start) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def TokenBucket(rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):  # type: ignore[no-untyped-def]  # noqa: N802
    """One bucket, seen through a one-key RateLimiter (how every limit is built)."""
    limiter = RateLimiter(rate_per_s, burst, clock, max_keys=1)
    return types.SimpleNamespace(try_take=lambda n=1: limiter.try_take("", n))


# --- one bucket ---------------------------------------------------------------------------


def test_bucket_starts_full_then_refuses_with_the_exact_wait(clock: FakeClock) -> None:
    bucket = TokenBucket(rate_per_s=4.0, burst=3, clock=clock)
    assert [bucket.try_take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.try_take() == pytest.approx(0.25)
    assert bucket.try_take(2) == pytest.approx(0.5)


def test_refill_is_continuous_and_capped_at_the_burst(clock: FakeClock) -> None:
    bucket = TokenBucket(rate_per_s=10.0, burst=5, clock=clock)
    assert bucket.try_take(5) == 0.0
    clock.advance(0.05)  # half a token
    assert bucket.try_take() == pytest.approx(0.05)
    clock.advance(0.05)
    assert bucket.try_take() == 0.0
    clock.advance(3600)  # an hour idle still gives only the burst
    assert [bucket.try_take() for _ in range(5)] == [0.0] * 5
    assert bucket.try_take() == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("rate", "burst", "n"), [(3.0, 1, 1), (7.0, 5, 3), (0.1, 2, 2), (1e3, 50, 7)]
)
def test_waiting_exactly_the_advised_time_is_enough(
    clock: FakeClock, rate: float, burst: int, n: int
) -> None:
    bucket = TokenBucket(rate, burst, clock=clock)
    while bucket.try_take() == 0.0:
        pass
    clock.advance(0.3 / rate)  # a fraction of a token, to make the arithmetic uneven
    for _ in range(20):
        wait = bucket.try_take(n)
        assert wait == pytest.approx((n - 0.3) / rate) or wait == pytest.approx(n / rate)
        clock.advance(wait)
        assert bucket.try_take(n) == 0.0


def test_a_refusal_takes_nothing(clock: FakeClock) -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=4, clock=clock)
    assert bucket.try_take(3) == 0.0
    assert bucket.try_take(2) == pytest.approx(1.0)
    assert bucket.try_take(1) == 0.0  # the refused two did not spend the last token


def test_rate_zero_is_unlimited(clock: FakeClock) -> None:
    bucket = TokenBucket(rate_per_s=0.0, burst=0, clock=clock)
    assert all(bucket.try_take(1000) == 0.0 for _ in range(10_000))
    limiter = RateLimiter(rate_per_s=0.0, burst=0, clock=clock)
    assert all(limiter.try_take(f"k{i}") == 0.0 for i in range(1000))
    assert len(limiter) == 0  # nothing is tracked


def test_a_clock_stepping_back_grants_nothing(clock: FakeClock) -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=1, clock=clock)
    assert bucket.try_take() == 0.0
    clock.advance(-50)
    assert bucket.try_take() == pytest.approx(1.0)


@pytest.mark.parametrize("n", [0, -1, 6])
def test_impossible_takes_are_bugs_not_waits(clock: FakeClock, n: int) -> None:
    with pytest.raises(ValueError, match="between 1 and the burst"):
        TokenBucket(rate_per_s=1.0, burst=5, clock=clock).try_take(n)


def test_bad_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(rate_per_s=1.0, burst=0)
    with pytest.raises(ValueError, match="rate_per_s"):
        RateLimiter(rate_per_s=float("inf"), burst=1)
    with pytest.raises(ValueError, match="max_keys"):
        RateLimiter(rate_per_s=1.0, burst=1, max_keys=0)


def test_concurrent_takes_never_exceed_the_budget(clock: FakeClock, busy_switching: None) -> None:
    bucket = TokenBucket(rate_per_s=5.0, burst=1000, clock=clock)
    granted: list[int] = []

    def work() -> None:
        granted.append(sum(bucket.try_take() == 0.0 for _ in range(300)))

    run_threads(16, work)
    assert sum(granted) == 1000  # 16 * 300 tried, exactly the burst granted


# --- RateLimiter ---------------------------------------------------------------------------


def test_keys_have_their_own_buckets(clock: FakeClock) -> None:
    limiter = RateLimiter(rate_per_s=1.0, burst=2, clock=clock)
    assert limiter.try_take("key:a:query", 2) == 0.0
    assert limiter.try_take("key:a:query") == pytest.approx(1.0)
    assert limiter.try_take("key:b:query", 2) == 0.0


def test_memory_stays_bounded_under_a_flood_of_distinct_keys(clock: FakeClock) -> None:
    limiter = RateLimiter(rate_per_s=1.0, burst=3, clock=clock, max_keys=64)
    assert limiter.try_take("hot", 3) == 0.0
    most = 0
    for i in range(200_000):
        assert limiter.try_take(f"key:{i:x}:query") == 0.0
        assert limiter.try_take("hot") > 0  # used constantly, so its debt is never forgotten
        most = max(most, len(limiter))
    assert most <= 64


def test_idle_refilled_buckets_are_dropped_losslessly(clock: FakeClock) -> None:
    limiter = RateLimiter(rate_per_s=2.0, burst=2, clock=clock, max_keys=1000)
    for i in range(10):
        assert limiter.try_take(f"k{i}") == 0.0
    clock.advance(0.5)  # every bucket is full again
    assert limiter.try_take("new") == 0.0
    assert len(limiter) == 1
    assert limiter.try_take("k0", 2) == 0.0  # a fresh bucket holds what the old one did
    assert limiter.try_take("k0") == pytest.approx(0.5)


def test_a_busy_bucket_is_not_dropped_below_the_cap(clock: FakeClock) -> None:
    limiter = RateLimiter(rate_per_s=1.0, burst=2, clock=clock, max_keys=10)
    assert limiter.try_take("busy", 2) == 0.0
    for i in range(8):
        limiter.try_take(f"k{i}")
    assert limiter.try_take("busy") == pytest.approx(1.0)


# --- RequestLimiter ------------------------------------------------------------------------

SMALL = Limits(
    key_query_rate=1.0,
    key_query_burst=2,
    tenant_query_rate=1.0,
    tenant_query_burst=3,
    key_write_rate=1.0,
    key_write_burst=1,
    tenant_write_rate=0.5,
    tenant_write_burst=1,
    namespace_query_rate=2.0,
    namespace_query_burst=2,
)


def test_a_key_over_its_limit_does_not_spend_the_tenant_budget(clock: FakeClock) -> None:
    limits = RequestLimiter(SMALL, clock=clock)
    assert limits.check_call("acme", "k1", "query") == 0.0
    assert limits.check_call("acme", "k1", "query") == 0.0
    assert limits.check_call("acme", "k1", "query") == pytest.approx(1.0)  # key refuses
    assert limits.check_call("acme", "k1", "query") == pytest.approx(1.0)
    assert limits.check_call("acme", "k2", "query") == 0.0  # the tenant's third token is left
    assert limits.check_call("acme", "k3", "query") == pytest.approx(1.0)  # tenant refuses


def test_a_tenant_refusal_does_not_spend_the_key_budget(clock: FakeClock) -> None:
    slow_keys = dataclasses.replace(SMALL, key_query_rate=0.01)  # keys barely refill
    limits = RequestLimiter(slow_keys, clock=clock)
    for key in ("k1", "k2", "k3"):
        assert limits.check_call("acme", key, "query") == 0.0
    assert limits.check_call("acme", "k4", "query") == pytest.approx(1.0)  # tenant refuses
    assert limits.check_call("acme", "k4", "query") == pytest.approx(1.0)
    clock.advance(3.0)  # the tenant is full again; k4 must still hold its whole burst of 2
    assert limits.check_call("acme", "k4", "query") == 0.0
    assert limits.check_call("acme", "k4", "query") == 0.0
    assert limits.check_call("acme", "k4", "query") > 0  # now the key itself refuses


def test_the_wait_is_the_longer_of_the_two(clock: FakeClock) -> None:
    limits = RequestLimiter(SMALL, clock=clock)
    assert limits.check_call("acme", "k1", "write") == 0.0  # both now empty
    assert limits.check_call("acme", "k1", "write") == pytest.approx(2.0)  # tenant: 0.5/s
    clock.advance(1.0)  # the key is full again, the tenant half
    assert limits.check_call("acme", "k1", "write") == pytest.approx(1.0)
    clock.advance(1.0)
    assert limits.check_call("acme", "k1", "write") == 0.0


def test_tenants_and_kinds_are_separate(clock: FakeClock) -> None:
    limits = RequestLimiter(SMALL, clock=clock)
    assert limits.check_call("acme", "k1", "write") == 0.0
    assert limits.check_call("acme", "k1", "write") > 0
    assert limits.check_call("acme", "k1", "query") == 0.0
    assert limits.check_call("globex", "k9", "write") == 0.0


def test_the_keyless_local_caller_meets_only_the_tenant_limit(clock: FakeClock) -> None:
    limits = RequestLimiter(SMALL, clock=clock)
    assert [limits.check_call("local", "", "query") for _ in range(3)] == [0.0] * 3
    assert limits.check_call("local", "", "query") == pytest.approx(1.0)


def test_an_unknown_kind_is_a_bug(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="kind"):
        RequestLimiter(SMALL, clock=clock).check_call("acme", "k1", "delete")  # type: ignore[arg-type]


def test_concurrent_calls_never_exceed_either_budget(
    clock: FakeClock, busy_switching: None
) -> None:
    limits = RequestLimiter(
        Limits(
            key_query_rate=1.0, key_query_burst=30, tenant_query_rate=1.0, tenant_query_burst=100
        ),
        clock=clock,
    )
    granted: dict[str, int] = {}

    def work() -> None:
        key = f"k{threading.get_ident()}"
        granted[key] = sum(limits.check_call("acme", key, "query") == 0.0 for _ in range(200))

    run_threads(8, work)
    assert sum(granted.values()) == 100
    assert max(granted.values()) <= 30


def test_namespace_searches_are_limited_per_tenant_and_namespace(clock: FakeClock) -> None:
    limits = RequestLimiter(SMALL, clock=clock)
    assert [limits.check_namespace("acme", "docs") for _ in range(2)] == [0.0, 0.0]
    assert limits.check_namespace("acme", "docs") == pytest.approx(0.5)
    assert limits.check_namespace("acme", "notes") == 0.0
    assert limits.check_namespace("globex", "docs") == 0.0
    clock.advance(0.5)
    assert limits.check_namespace("acme", "docs") == 0.0


# --- configuration -------------------------------------------------------------------------


def test_defaults_are_the_documented_ones() -> None:
    limits = Limits.from_env({})
    assert limits == Limits()
    assert (limits.key_query_rate, limits.key_query_burst) == (50.0, 100)
    assert (limits.tenant_query_rate, limits.tenant_query_burst) == (200.0, 400)
    assert (limits.key_write_rate, limits.key_write_burst) == (20.0, 40)
    assert (limits.tenant_write_rate, limits.tenant_write_burst) == (50.0, 100)
    assert (limits.namespace_query_rate, limits.namespace_query_burst) == (500.0, 1000)
    assert limits.max_namespaces_per_tenant == 100
    assert limits.max_documents_per_namespace == 100_000
    assert limits.max_bytes_per_tenant == 1024**3
    assert Limits.from_env({var: default for var, (default, _) in ENVIRONMENT.items()}) == limits
    assert len(ENVIRONMENT) == len(Limits.__dataclass_fields__)
    assert all(var.startswith("REACHSTORE_LIMIT_") for var in ENVIRONMENT)


def test_overrides_are_read_and_zero_rate_means_unlimited(clock: FakeClock) -> None:
    limits = Limits.from_env(
        {
            "REACHSTORE_LIMIT_KEY_QUERY_RATE": "2.5",
            "REACHSTORE_LIMIT_TENANT_QUERY_RATE": "0",
            "REACHSTORE_LIMIT_MAX_BYTES_PER_TENANT": "1000",
            "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
            "REACHSTORE_LIMIT_KEY_WRITE_BURST": "0",  # allowed: its rate is unlimited
            "REACHSTORE_LIMIT_MAX_TRACKED_KEYS": " 10 ",
            "REACHSTORE_LIMIT_MAX_NAMESPACES_PER_TENANT": "",  # empty: the default
        }
    )
    assert limits.key_query_rate == 2.5 and limits.tenant_query_rate == 0.0
    assert limits.max_bytes_per_tenant == 1000 and limits.max_tracked_keys == 10
    assert limits.max_namespaces_per_tenant == 100
    limiter = RequestLimiter(
        Limits.from_env({f"REACHSTORE_LIMIT_{k}_RATE": "0" for k in ("KEY_QUERY", "TENANT_QUERY")}),
        clock=clock,
    )
    assert all(limiter.check_call("acme", "k1", "query") == 0.0 for _ in range(10_000))


@pytest.mark.parametrize(
    ("var", "raw", "says"),
    [
        ("REACHSTORE_LIMIT_KEY_QUERY_RATE", "fast", "must be a number"),
        ("REACHSTORE_LIMIT_KEY_QUERY_RATE", "-1", "must be a finite number >= 0"),
        ("REACHSTORE_LIMIT_TENANT_WRITE_RATE", "nan", "must be a finite number >= 0"),
        ("REACHSTORE_LIMIT_NAMESPACE_QUERY_RATE", "inf", "must be a finite number >= 0"),
        ("REACHSTORE_LIMIT_KEY_QUERY_BURST", "1.5", "must be a whole number"),
        ("REACHSTORE_LIMIT_TENANT_QUERY_BURST", "0", "must be at least 1 when its rate is above 0"),
        ("REACHSTORE_LIMIT_MAX_DOCUMENTS_PER_NAMESPACE", "-5", "must be at least 0"),
        ("REACHSTORE_LIMIT_MAX_BYTES_PER_TENANT", "1GiB", "must be a whole number"),
        ("REACHSTORE_LIMIT_MAX_TRACKED_KEYS", "0", "must be at least 1, got '0'"),
    ],
)
def test_bad_values_fail_fast_naming_the_variable(var: str, raw: str, says: str) -> None:
    with pytest.raises(ConfigError, match=f"^{var} {re.escape(says)}") as caught:
        Limits.from_env({var: raw})
    assert isinstance(caught.value, ValueError)


def test_limits_built_in_code_are_checked_too() -> None:
    with pytest.raises(ValueError, match="^key_write_burst must be at least 1"):
        Limits(key_write_burst=0)
    with pytest.raises(ValueError, match="^max_namespaces_per_tenant must be at least 0"):
        Limits(max_namespaces_per_tenant=-1)


# --- retry_after_ms and size quotas ----------------------------------------------------------


@pytest.mark.parametrize(
    ("wait_s", "ms"),
    [(0.0, 1), (1e-7, 1), (0.0004, 1), (0.001, 1), (0.0011, 2), (0.2, 200), (0.3, 300)]
    + [(0.7, 700), (1 / 3, 334), (2.5, 2500), (59.9991, 60_000)],
)
def test_retry_after_ms_rounds_up_to_at_least_one(wait_s: float, ms: int) -> None:
    assert retry_after_ms(wait_s) == ms


def test_retry_after_ms_refuses_an_endless_wait() -> None:
    with pytest.raises(ValueError, match="finite"):
        retry_after_ms(float("inf"))


def test_quota_arithmetic_never_goes_negative() -> None:
    limits = Limits(max_namespaces_per_tenant=3, max_documents_per_namespace=10)
    assert namespace_quota_left(limits, 1) == 2 and namespace_quota_left(limits, 5) == 0
    assert documents_left(limits, 4) == 6 and documents_left(limits, 11) == 0
    assert bytes_left(Limits(max_bytes_per_tenant=100), 30) == 70
    assert bytes_left(Limits(max_bytes_per_tenant=100), 130) == 0

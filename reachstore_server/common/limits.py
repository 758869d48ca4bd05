"""Rate limits and size quotas: pure domain logic, with no gRPC, storage or protobuf.

Rates are token buckets: ``burst`` calls at once, then ``rate`` per second, so an agent's
parallel calls pass while a runaway loop is slowed; a refusal says how long to wait, so the
error carries an exact ``retry_after_ms``. Size quotas are arithmetic on stored counts.
Every limit is configurable through ``REACHSTORE_LIMIT_*`` (listed in ``ENVIRONMENT``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

from reachstore_server.common.config_errors import ConfigError

log = logging.getLogger(__name__)

Clock = Callable[[], float]
CallKind = Literal["query", "write"]

# Float drift in ``tokens + elapsed * rate`` must not refuse a caller who waited exactly the
# advised time; a millionth of a token of leniency is invisible in practice.
_EPSILON = 1e-6


class _Bucket:
    """The state of one bucket. The rule (rate, burst) and the lock live with the limiter,
    so 100,000 tracked keys cost two floats each, not a lock each."""

    __slots__ = ("tokens", "stamp")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens, self.stamp = tokens, stamp


class RateLimiter:
    """Token buckets with one rule, keyed by a string, each created full on first use.

    ``rate_per_s <= 0`` means unlimited (nothing is tracked). Memory stays bounded under a
    flood of distinct keys (random key ids of a brute-force attempt): a new key first drops
    the least recently used buckets while they are refilled completely (lossless: they hold
    nothing a fresh bucket would not), and beyond ``max_keys`` the least recently used one
    regardless, forgetting at most a partial debt of a key idle behind ``max_keys`` busier
    ones. That errs towards admitting; the alternative is unbounded memory.
    """

    def __init__(
        self,
        rate_per_s: float,
        burst: int,
        clock: Clock = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        if not math.isfinite(rate_per_s):
            raise ValueError(f"rate_per_s must be a finite number, got {rate_per_s!r}")
        if rate_per_s > 0 and burst < 1:
            raise ValueError(f"burst must be at least 1 when the rate is above 0, got {burst}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys}")
        self._rate, self._burst, self._clock, self._max_keys = rate_per_s, burst, clock, max_keys
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    @property
    def unlimited(self) -> bool:
        return self._rate <= 0

    def __len__(self) -> int:
        return len(self._buckets)

    def try_take(self, key: str, n: int = 1) -> float:
        """0.0 when ``n`` tokens were taken from the bucket of ``key``; otherwise the seconds
        until they will be there, and nothing is taken (a refusal costs no budget)."""
        return _take_all([(self, key)], n, self._clock)

    def _bucket(self, key: str, now: float) -> _Bucket:
        """The bucket of ``key`` refilled to ``now``, marked most recently used. Lock held."""
        bucket = self._buckets.get(key)
        if bucket is None:
            self._make_room(now)
            bucket = self._buckets[key] = _Bucket(float(self._burst), now)
        else:
            self._buckets.move_to_end(key)
            if now > bucket.stamp:  # a clock stepping back grants nothing, and breaks nothing
                elapsed = (now - bucket.stamp) * self._rate
                bucket.tokens = min(float(self._burst), bucket.tokens + elapsed)
                bucket.stamp = now
        return bucket

    def _make_room(self, now: float) -> None:
        # Each bucket is dropped at most once, so this is amortised O(1) per new key.
        while self._buckets:
            oldest = next(iter(self._buckets.values()))
            refilled = oldest.tokens + max(0.0, now - oldest.stamp) * self._rate
            if refilled < self._burst - _EPSILON and len(self._buckets) < self._max_keys:
                return
            self._buckets.popitem(last=False)


def _take_all(parts: Sequence[tuple[RateLimiter, str]], n: int, clock: Clock) -> float:
    """Takes ``n`` from every listed bucket or from none, all checked under all their locks
    first, so one refusal spends none of the others' budget; the wait is the longest. Locks
    go in list order, always key before tenant, so two calls cannot deadlock."""
    active = [(limiter, key) for limiter, key in parts if not limiter.unlimited]
    for limiter, _ in active:
        if not 1 <= n <= limiter._burst:  # could never be granted: a bug, not a wait
            raise ValueError(f"n must be between 1 and the burst ({limiter._burst}), got {n}")
    if not active:
        return 0.0
    with contextlib.ExitStack() as locks:
        for limiter, _ in active:
            locks.enter_context(limiter._lock)
        now = clock()
        buckets = [(limiter._bucket(key, now), limiter._rate) for limiter, key in active]
        missing = max(n - bucket.tokens for bucket, _ in buckets)
        if missing <= _EPSILON:
            for bucket, _ in buckets:
                bucket.tokens = max(0.0, bucket.tokens - n)
            return 0.0
        return max((n - bucket.tokens) / rate for bucket, rate in buckets)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Every configurable limit. For a rate (calls per second) 0 means unlimited; a size
    cap is taken literally (0 allows nothing), so lifting a cap is a deliberate choice."""

    key_query_rate: float = 50.0
    key_query_burst: int = 100
    tenant_query_rate: float = 200.0
    tenant_query_burst: int = 400
    key_write_rate: float = 20.0
    key_write_burst: int = 40
    tenant_write_rate: float = 50.0
    tenant_write_burst: int = 100
    # Above what one query replica serves on 2 cores (~300 QPS): a guard against a runaway
    # caller, not a throttle of normal use.
    namespace_query_rate: float = 500.0
    namespace_query_burst: int = 1000
    max_namespaces_per_tenant: int = 100
    max_documents_per_namespace: int = 100_000
    max_bytes_per_tenant: int = 1024 * 1024 * 1024
    max_tracked_keys: int = 100_000

    def __post_init__(self) -> None:
        values = dataclasses.asdict(self)
        for name, value in values.items():
            if problem := _problem(name, value, values):
                raise ValueError(f"{name} {problem}, got {value!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Limits:
        """Reads every ``REACHSTORE_LIMIT_*`` variable (unset or empty: the default) and
        fails fast with a ``ConfigError`` (a ``ValueError``) naming the bad variable."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, var in _VARIABLES.items():
            raw = env.get(var, "").strip() or ENVIRONMENT[var][0]
            is_rate = name.endswith("_rate")
            try:
                values[name] = float(raw) if is_rate else int(raw)
            except ValueError:
                kind = "a number" if is_rate else "a whole number"
                raise ConfigError(f"{var} must be {kind}, got {raw!r}") from None
            # Each rate is listed before its burst, so the burst's check can see it.
            if problem := _problem(name, values[name], values):
                raise ConfigError(f"{var} {problem}, got {raw!r}")
        return cls(**values)


def _problem(name: str, value: float, values: Mapping[str, float]) -> str | None:
    """What is wrong with one limit, or None; shared by the dataclass and the env reader."""
    if name.endswith("_rate"):
        return None if math.isfinite(value) and value >= 0 else "must be a finite number >= 0"
    if name.endswith("_burst") and values[name.removesuffix("_burst") + "_rate"] > 0:
        return None if value >= 1 else "must be at least 1 when its rate is above 0"
    minimum = 1 if name == "max_tracked_keys" else 0
    return None if value >= minimum else f"must be at least {minimum}"


# field -> meaning; its variable is REACHSTORE_LIMIT_ and the field's name in capitals.
_MEANINGS: dict[str, str] = {
    "key_query_rate": "Query calls per second per API key; 0: unlimited.",
    "key_query_burst": "Query calls an API key may make at once before its rate applies.",
    "tenant_query_rate": "Query calls per second per tenant, all keys together; 0: unlimited.",
    "tenant_query_burst": "Query calls a tenant may make at once before its rate applies.",
    "key_write_rate": "Write calls per second per API key; 0: unlimited.",
    "key_write_burst": "Write calls an API key may make at once before its rate applies.",
    "tenant_write_rate": "Write calls per second per tenant, all keys together; 0: unlimited.",
    "tenant_write_burst": "Write calls a tenant may make at once before its rate applies.",
    "namespace_query_rate": "Searches per second of one namespace; 0: unlimited.",
    "namespace_query_burst": "Searches of one namespace at once before its rate applies.",
    "max_namespaces_per_tenant": "Most namespaces one tenant may hold.",
    "max_documents_per_namespace": "Most documents one namespace may hold.",
    "max_bytes_per_tenant": "Most bytes of document text one tenant may store (1 GiB).",
    "max_tracked_keys": "Most keys, tenants or namespaces each rate limiter remembers.",
}
_VARIABLES = {name: f"REACHSTORE_LIMIT_{name.upper()}" for name in _MEANINGS}
# variable -> (default, meaning), the shape of ``config.ENVIRONMENT``.
ENVIRONMENT: dict[str, tuple[str, str]] = {
    _VARIABLES[name]: (f"{value:g}" if isinstance(value, float) else str(value), _MEANINGS[name])
    for name, value in dataclasses.asdict(Limits()).items()
}


class LeaseStore(Protocol):
    """Where buckets shared by every process of a deployment live (the database they
    already share: ``reachstore_server/storage/rate_buckets.py``)."""

    def lease(self, parts: Sequence[BucketRule], want: int) -> tuple[int, float]:
        """Takes between 1 and ``want`` tokens from every bucket in ``parts``, the same
        number from each, or none: (tokens taken, 0.0), or (0, seconds until one token is
        in every bucket)."""


@dataclasses.dataclass(frozen=True)
class BucketRule:
    """One shared bucket: its name in the store and its rule."""

    name: str
    rate: float
    burst: int


class _Lease:
    """A trip to the store under way for one set of buckets."""

    __slots__ = ("done", "waiting")

    def __init__(self) -> None:
        self.done, self.waiting = threading.Event(), 0


class _Grant:
    """Tokens this process leased and has not used yet, or a refusal or a failure of the
    store it remembers."""

    __slots__ = ("tokens", "until", "refused_until", "failed_until", "failure")

    def __init__(self) -> None:
        self.tokens, self.until, self.refused_until = 0, 0.0, 0.0
        self.failed_until, self.failure = 0.0, Exception()


class FleetLimiter:
    """Call rates that hold for the whole deployment, however many processes admit calls.

    A process leases a few tokens at a time from the shared buckets (one short transaction)
    and spends them locally, so most calls cost no trip at all: a lease is what the
    slowest bucket of the call refills in ``lease_s``, at least one, at most half its
    burst. Unused tokens lapse after ``ttl_s``: a process that goes quiet or away holds
    none for long, and the fleet never admits more than the shared buckets allow (it errs
    towards refusing by at most one lease per process per ``ttl_s``). A refusal is
    remembered until the wait it advised, so a caller hammering past its limit costs one
    trip per wait, not one per call.

    One thread at a time leases for a given set of buckets; the others that find the
    process's tokens gone wait for its lease and spend from it. Without that, a burst of
    calls (sixteen search threads of one namespace) sent one lease each to the same bucket
    rows at once, and every process's leases queued on those rows' locks: under a 3x
    overload, searches spent most of their time there and ran past their budgets. The
    lease is made large enough for the calls waiting on it (up to half the burst).

    A lease that fails (the database away, a bucket row locked past the store's lock
    timeout) fails the calls that waited on it too, and the calls of the next
    ``failed_for_s``, without a trip each: the caller (``RequestLimiter``) then limits by
    the process's own buckets. Otherwise each waiting call would go to the store in turn
    and wait out the same timeout again, and calls stuck on one key would hold every
    thread the process has for rate checks.
    """

    def __init__(
        self,
        store: LeaseStore,
        clock: Clock = time.monotonic,
        *,
        lease_s: float = 0.05,
        ttl_s: float = 0.5,
        failed_for_s: float = 1.0,
        max_keys: int = 100_000,
    ) -> None:
        self._store, self._clock = store, clock
        self._lease_s, self._ttl_s, self._max_keys = lease_s, ttl_s, max_keys
        self._failed_for_s = failed_for_s
        self._lock = threading.Lock()
        self._grants: OrderedDict[tuple[str, ...], _Grant] = OrderedDict()
        # Buckets some thread is leasing for now, and how many calls wait for that lease.
        self._leasing: dict[tuple[str, ...], _Lease] = {}

    def try_local(self, parts: Sequence[BucketRule]) -> float | None:
        """0.0 when a leased token was spent, the remaining wait when a refusal is still
        remembered, None when only the store can tell (``take``). Raises the store's
        failure while it is remembered."""
        key = tuple(part.name for part in parts)
        now = self._clock()
        with self._lock:
            grant = self._grants.get(key)
            if grant is None:
                return None
            if grant.failed_until > now:
                raise grant.failure
            if grant.refused_until > now:
                return grant.refused_until - now
            if grant.tokens > 0 and grant.until > now:
                grant.tokens -= 1
                return 0.0
        return None

    def take(self, parts: Sequence[BucketRule]) -> float:
        """One call's token: spent from a lease, or from a new lease (a trip to the store,
        blocking; run it off the event loop). 0.0 or the seconds to wait."""
        key = tuple(part.name for part in parts)
        while True:
            local = self.try_local(parts)
            if local is not None:
                return local
            with self._lock:
                lease = self._leasing.get(key)
                if lease is None:
                    lease = self._leasing[key] = _Lease()
                    break
                lease.waiting += 1
            # Another thread is at the store for these buckets: spend from its lease (or
            # its remembered refusal); if the calls before this one used it all, go again.
            lease.done.wait()
        try:
            return self._lease(parts, key, lease)
        except Exception as exc:
            self._remember_failure(key, exc)  # before the waiting calls wake
            raise
        finally:
            with self._lock:
                del self._leasing[key]
            lease.done.set()

    def _lease(self, parts: Sequence[BucketRule], key: tuple[str, ...], lease: _Lease) -> float:
        """The trip to the store for this call and the calls that wait on ``lease``."""
        base = min(int(p.rate * self._lease_s) for p in parts)
        with self._lock:
            calls = lease.waiting + 1
        # Never more than half the smallest burst: a lease must not empty a bucket.
        want = max(1, min(max(base, calls), min(p.burst for p in parts) // 2))
        got, wait = self._store.lease(parts, want)
        now = self._clock()
        with self._lock:
            grant = self._grant_of(key, now)
            if got == 0:
                grant.refused_until = now + wait
                return wait
            # This call spends one; the rest join what is left of an earlier lease.
            live = grant.tokens if grant.until > now else 0
            grant.tokens, grant.until, grant.refused_until = live + got - 1, now + self._ttl_s, 0.0
        return 0.0

    def _remember_failure(self, key: tuple[str, ...], exc: Exception) -> None:
        now = self._clock()
        with self._lock:
            grant = self._grant_of(key, now)
            grant.failed_until, grant.failure = now + self._failed_for_s, exc

    def _grant_of(self, key: tuple[str, ...], now: float) -> _Grant:
        """The grant of ``key``, made if there is none, as the most recently used. Lock held."""
        grant = self._grants.get(key)
        if grant is None:
            self._make_room(now)
            grant = self._grants[key] = _Grant()
        else:
            self._grants.move_to_end(key)
        return grant

    def _make_room(self, now: float) -> None:
        """Drops lapsed grants, oldest first, and beyond ``max_keys`` the oldest anyway
        (what it held lapses early: the fleet admits less, never more). Lock held."""
        while self._grants:
            oldest = next(iter(self._grants.values()))
            lapsed = max(oldest.until, oldest.refused_until, oldest.failed_until) <= now
            if not lapsed and len(self._grants) < self._max_keys:
                return
            self._grants.popitem(last=False)


class RequestLimiter:
    """The rate limits of incoming calls: per API key and per tenant for each call kind,
    and per namespace for searches. Waits are seconds; 0.0 means go ahead.

    With a ``store``, the buckets are the deployment's (``FleetLimiter``): N processes
    admit what one would. Without one they are this process's own, which is exact only
    while one process serves each kind of call. When the store cannot be reached, the
    process falls back to its own buckets for that call (admitting rather than refusing
    everything while the database is away) and says so in its log.
    """

    def __init__(
        self,
        limits: Limits,
        clock: Clock = time.monotonic,
        store: LeaseStore | None = None,
        *,
        store_down: Callable[[Exception], bool] = lambda exc: False,
    ) -> None:
        self.limits, self._clock, keys = limits, clock, limits.max_tracked_keys
        self._by_kind: dict[str, tuple[RateLimiter, RateLimiter]] = {
            "query": (
                RateLimiter(limits.key_query_rate, limits.key_query_burst, clock, keys),
                RateLimiter(limits.tenant_query_rate, limits.tenant_query_burst, clock, keys),
            ),
            "write": (
                RateLimiter(limits.key_write_rate, limits.key_write_burst, clock, keys),
                RateLimiter(limits.tenant_write_rate, limits.tenant_write_burst, clock, keys),
            ),
        }
        self._namespaces = RateLimiter(
            limits.namespace_query_rate, limits.namespace_query_burst, clock, keys
        )
        self._fleet = None if store is None else FleetLimiter(store, clock, max_keys=keys)
        # A shared bucket's name says which limit it is, then whose: "query/key/<key id>".
        self._roles = {id(self._namespaces): "namespace"}
        for kind, (key_limiter, tenant_limiter) in self._by_kind.items():
            self._roles[id(key_limiter)] = f"{kind}/key"
            self._roles[id(tenant_limiter)] = f"{kind}/tenant"
        self._store_down = store_down

    @property
    def shared(self) -> bool:
        return self._fleet is not None

    def _call_parts(
        self, tenant: str, key_id: str, kind: CallKind
    ) -> list[tuple[RateLimiter, str]]:
        if kind not in self._by_kind:
            raise ValueError(f"kind must be 'query' or 'write', got {kind!r}")
        key_limiter, tenant_limiter = self._by_kind[kind]
        key_part = [(key_limiter, key_id)] if key_id else []
        return [*key_part, (tenant_limiter, tenant)]

    def _shared_rules(self, parts: Sequence[tuple[RateLimiter, str]]) -> list[BucketRule]:
        return [
            BucketRule(f"{self._roles[id(limiter)]}/{name}", limiter._rate, limiter._burst)
            for limiter, name in parts
            if not limiter.unlimited
        ]

    def _check(self, parts: list[tuple[RateLimiter, str]], local_only: bool) -> float | None:
        if self._fleet is None:
            return _take_all(parts, 1, self._clock)
        rules = self._shared_rules(parts)
        if not rules:
            return 0.0
        try:
            return self._fleet.try_local(rules) if local_only else self._fleet.take(rules)
        except Exception as exc:
            if not self._store_down(exc):
                raise
            log.warning(
                "shared rate buckets unavailable (%s): limiting per process", type(exc).__name__
            )
            return _take_all(parts, 1, self._clock)

    def check_call(self, tenant: str, key_id: str, kind: CallKind) -> float:
        """Charges one call to the key and to its tenant, both or neither, so a key over its
        own limit does not also eat its tenant's budget. Key ids are unique across tenants;
        the keyless local caller (empty ``key_id``) meets only the tenant limit. With a
        store this may wait for it: call it off the event loop, after ``check_call_now``."""
        wait = self._check(self._call_parts(tenant, key_id, kind), local_only=False)
        assert wait is not None
        return wait

    def check_call_now(self, tenant: str, key_id: str, kind: CallKind) -> float | None:
        """``check_call`` without waiting for the store: the wait (0.0: go ahead), or None
        when only ``check_call`` can tell."""
        return self._check(self._call_parts(tenant, key_id, kind), local_only=True)

    def check_namespace(self, tenant: str, namespace: str) -> float:
        """Charges one search of the tenant's ``namespace`` (names hold no '/'). With a
        store this may wait for it (searches run in worker threads)."""
        wait = self._check([(self._namespaces, f"{tenant}/{namespace}")], False)
        assert wait is not None
        return wait


def retry_after_ms(wait_s: float) -> int:
    """The wait in whole milliseconds, rounded up (an early retry is refused again), >= 1."""
    if not math.isfinite(wait_s):
        raise ValueError(f"wait_s must be finite, got {wait_s!r}")
    # Rounding to nanoseconds first drops float noise: 0.3 s is 300 ms, not 301.
    return max(1, math.ceil(round(wait_s * 1000.0, 6)))


def namespace_quota_left(limits: Limits, current_count: int) -> int:
    """How many more namespaces the tenant may create (never negative)."""
    return max(0, limits.max_namespaces_per_tenant - current_count)


def documents_left(limits: Limits, current_count: int) -> int:
    """How many more documents the namespace may hold (never negative)."""
    return max(0, limits.max_documents_per_namespace - current_count)


def bytes_left(limits: Limits, current_bytes: int) -> int:
    """How many more bytes the tenant may store (never negative)."""
    return max(0, limits.max_bytes_per_tenant - current_bytes)

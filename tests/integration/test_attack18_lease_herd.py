"""Many searches of one namespace at once, in two query processes sharing one database:
the per-namespace search rate (``RequestLimiter.check_namespace``) leases its tokens from
the shared buckets (``reachstore_server/common/limits.py`` ``FleetLimiter``,
``reachstore_server/storage/rate_buckets.py``).

When a process's leased tokens run out, every search thread that finds them gone goes to
the database for a lease of its own, all at once; the leases of both processes then
update the one bucket row together, and each transaction that finds the row's version
changed starts again. Under a 3x overload (``bench/bench_sustained.py --overload 3``) this
was where the query processes' search threads spent three quarters of their time, and
searches ran past their 2 s budget as ``NAMESPACE_TIMEOUT``. A lease is sized to serve a
process's calls for ``lease_s``; one trip per process should be enough for a burst of
sixteen, and a bucket with tokens left should never refuse.

Each limiter is what one process holds (its own engine and connection pool); the store
is the services' own, on a real database, wrapped only to count its trips."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import sqlalchemy

from reachstore_server.common.limits import BucketRule, Limits, RequestLimiter
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.rate_buckets import SqlRateBuckets

PROCESSES = 2
THREADS = 16
# The defaults: well above what the searches below ask for.
LIMITS = Limits()


class _CountedBuckets(SqlRateBuckets):
    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.trips = 0
        self._count_lock = threading.Lock()

    def lease(self, parts: Sequence[BucketRule], want: int) -> tuple[int, float]:
        with self._count_lock:
            self.trips += 1
        return super().lease(parts, want)


def _searches_at_once(database_url: str, rounds: int) -> tuple[list[int], list[float]]:
    """``rounds`` bursts of THREADS searches per process, each burst started together;
    the store trips per process and every wait the limiter answered."""
    engines = [make_engine(database_url) for _ in range(PROCESSES)]
    try:
        stores = [_CountedBuckets(make_sessions(e)) for e in engines]
        limiters = [RequestLimiter(LIMITS, store=s) for s in stores]
        waits: list[float] = []
        lock = threading.Lock()
        barrier = threading.Barrier(PROCESSES * THREADS)

        def search(limiter: RequestLimiter) -> None:
            for _ in range(rounds):
                barrier.wait()
                wait = limiter.check_namespace("acme", "docs")
                with lock:
                    waits.append(wait)

        threads = [
            threading.Thread(target=search, args=(limiter,))
            for limiter in limiters
            for _ in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        return [s.trips for s in stores], waits
    finally:
        for made in engines:
            made.dispose()


def test_a_burst_of_searches_takes_one_lease_per_process(engine: sqlalchemy.Engine) -> None:
    """Covers an attack not tested before; failed on SQLite and PostgreSQL when written."""
    trips, waits = _searches_at_once(str(engine.url.render_as_string(hide_password=False)), 1)
    assert len(waits) == PROCESSES * THREADS
    # 32 searches of a namespace allowed 1,000 at once: none may be refused.
    assert [w for w in waits if w > 0] == []
    # A lease is 25 tokens (500/s for 50 ms): one covers a process's sixteen searches.
    assert max(trips) <= 2, f"store trips per process for {THREADS} searches: {trips}"


def test_bursts_in_a_row_are_never_refused_while_tokens_are_left(
    engine: sqlalchemy.Engine,
) -> None:
    """Covers an attack not tested before; held on SQLite and PostgreSQL when written."""
    rounds = 20  # 640 searches: within the bucket's burst of 1,000
    trips, waits = _searches_at_once(str(engine.url.render_as_string(hide_password=False)), rounds)
    assert len(waits) == PROCESSES * THREADS * rounds
    refused = [w for w in waits if w > 0]
    assert refused == [], f"{len(refused)} of {len(waits)} searches refused; trips {trips}"


def test_many_processes_leasing_one_bucket_at_once_are_never_refused(
    engine: sqlalchemy.Engine,
) -> None:
    """Covers an attack not tested before: 32 processes (one engine each) lease from one
    bucket row at the same moment, ten times over. A lease that lost the row to another
    transaction started again, up to 20 times, and then refused its caller although the
    bucket held hundreds of tokens."""
    url = engine.url.render_as_string(hide_password=False)
    count, rounds = 32, 10
    engines = [make_engine(url) for _ in range(count)]
    try:
        stores = [SqlRateBuckets(make_sessions(e)) for e in engines]
        rule = [BucketRule("namespace/acme/docs", 500.0, 1000)]
        barrier = threading.Barrier(count)
        granted: list[int] = []
        lock = threading.Lock()

        def lease(store: SqlRateBuckets) -> None:
            for _ in range(rounds):
                barrier.wait()
                got, _ = store.lease(rule, 1)
                with lock:
                    granted.append(got)

        threads = [threading.Thread(target=lease, args=(s,)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        for made in engines:
            made.dispose()
    assert len(granted) == count * rounds
    assert granted.count(0) == 0, f"{granted.count(0)} of {len(granted)} leases refused"

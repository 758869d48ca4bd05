"""Cost of call-rate limits shared by the deployment (``reachstore_server/storage/rate_buckets.py``)
next to per-process buckets, in the same run, on SQLite and PostgreSQL.

    .venv/bin/python bench/bench_fleet_limits.py [--calls 20000] [--skip-postgres]

Rows, each the median of five rounds, one thread:
- ``local``: ``RequestLimiter`` without a store (what each process did before);
- ``fleet, default rates``: the shared limiter at the default key rate (50/s, so a lease
  holds 2 tokens) for calls spread over many keys, as a busy deployment sees them: the
  cost of the lease trips, amortised per call;
- ``fleet, one hot key``: a key allowed 100,000/s (leases of 5,000 tokens): the cost of a
  call spent from tokens already held;
- ``lease trip``: one ``SqlRateBuckets.lease`` transaction.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._reach_service import DEFAULT_POSTGRES_URL, postgres_database  # noqa: E402
from reachstore_server.common.limits import BucketRule, Limits, RequestLimiter  # noqa: E402
from reachstore_server.storage.engine import make_engine, make_sessions  # noqa: E402
from reachstore_server.storage.rate_buckets import SqlRateBuckets, fleet_limiter  # noqa: E402
from reachstore_server.storage.schema import migrate_to_head  # noqa: E402


def _us_per_call(run: Callable[[int], None], calls: int) -> float:
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        run(calls)
        rounds.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(rounds)


def _engine_rows(url: str, calls: int) -> dict[str, float]:
    engine = make_engine(url)
    migrate_to_head(engine)
    sessions = make_sessions(engine)
    default = fleet_limiter(Limits(), sessions)
    hot = fleet_limiter(Limits(key_query_rate=100_000, key_query_burst=200_000), sessions)
    store = SqlRateBuckets(sessions)
    counter = iter(range(10**9))

    def many_keys(n: int) -> None:
        for _ in range(n):
            default.check_call("acme", f"k{next(counter) % 5000}", "query")

    def hot_key(n: int) -> None:
        for _ in range(n):
            hot.check_call("acme", "hot", "query")

    def trips(n: int) -> None:
        rule = [BucketRule(f"bench/{next(counter)}", 1000.0, 1000)]
        for _ in range(n):
            store.lease(rule, 1)

    rows = {
        "fleet, default rates (many keys)": _us_per_call(many_keys, calls // 10),
        "fleet, one hot key": _us_per_call(hot_key, calls),
        "lease trip": _us_per_call(trips, max(50, calls // 100)),
    }
    engine.dispose()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    args = parser.parse_args()
    local = RequestLimiter(Limits(key_query_rate=100_000, key_query_burst=200_000))

    def local_calls(n: int) -> None:
        for _ in range(n):
            local.check_call("acme", "hot", "query")

    base = _us_per_call(local_calls, args.calls)
    print(f"local (per-process buckets): {base:.2f} µs/call")
    with tempfile.TemporaryDirectory() as folder:
        engines = [("sqlite", f"sqlite:///{folder}/bench.db")]
        databases = contextlib.nullcontext() if args.skip_postgres else None
        with databases or postgres_database(args.postgres_url) as pg:
            if pg is not None:
                engines.append(("postgresql", pg[0]))
            for name, url in engines:
                for row, value in _engine_rows(url, args.calls).items():
                    print(f"{name}: {row}: {value:.2f} µs/call ({value / base:.1f}x local)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

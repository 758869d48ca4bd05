"""Call rates shared by several real processes on one database, hammered with calls whose
bucket sets overlap (two keys of one tenant: key A + tenant T, key B + tenant T) and with
the smallest rates there are (1 call per second, a burst of 1).

``FleetLimiter.take`` (``reachstore_server/common/limits.py``) lets one thread per process
lease for a set of buckets while the others wait, and sizes the lease by the number of
waiters, up to half the smallest burst; ``SqlRateBuckets._lease_once``
(``reachstore_server/storage/rate_buckets.py``) locks the rows in name order on
PostgreSQL. The attack: bigger leases and waiting threads let the fleet admit more than
burst + rate x time (+ one lease per process), overlapping bucket sets deadlock on the
tenant row, or a collision sends a process to its own buckets (the fallback for a
database that is away), where it admits a burst and a rate of its own.

Each worker is a real process running the services' own limiter (``fleet_limiter``)."""

from __future__ import annotations

import time

import pytest

from tests.integration.limiter_workers import PRELUDE, run_workers

# Counts what a rate admits in wall-clock seconds: run with the machine to itself.
pytestmark = pytest.mark.alone

PROCESSES = 4
THREADS = 8  # per key, per process
RUN_SECONDS = 4.0

WORKER = (
    PRELUDE
    + """

url, start, seconds, threads, key_rate, key_burst, tenant_rate, tenant_burst = sys.argv[1:9]
keys = sys.argv[9].split(",")
start, seconds = float(start), float(seconds)
limits = Limits(
    key_query_rate=float(key_rate), key_query_burst=int(key_burst),
    tenant_query_rate=float(tenant_rate), tenant_query_burst=int(tenant_burst),
)
limiter = fleet_limiter(limits, make_sessions(make_engine(url)))
granted = {key: 0 for key in keys}
errors = []
lock = threading.Lock()
def hammer(key):
    mine = 0
    while time.time() < start + seconds:
        try:
            if limiter.check_call("acme", key, "query") == 0:
                mine += 1
        except Exception as exc:
            errors.append(repr(exc))
            return
    with lock:
        granted[key] += mine
time.sleep(max(0.0, start - time.time()))
workers = [threading.Thread(target=hammer, args=(key,))
           for key in keys for _ in range(int(threads))]
for w in workers: w.start()
for w in workers: w.join()
print(json.dumps({"granted": granted, "fallbacks": len(fallbacks), "why": fallbacks[:1],
                  "errors": errors[:2]}))
"""
)


def _run(database_url: str, key: tuple[float, int], tenant: tuple[float, int], keys: list[str]):
    start = time.time() + 6.0  # every worker imported and connected before the run
    args = [database_url, str(start), str(RUN_SECONDS), str(THREADS)]
    args += [str(key[0]), str(key[1]), str(tenant[0]), str(tenant[1]), ",".join(keys)]
    return run_workers(database_url, WORKER, args, PROCESSES)


def test_two_keys_of_one_tenant_from_four_processes_get_the_tenant_rate_and_no_more(
    database_url: str,
) -> None:
    """Covers an attack not tested before; held on SQLite and PostgreSQL when written."""
    key_rate, key_burst, tenant_rate, tenant_burst = 10.0, 10, 4.0, 8
    results = _run(database_url, (key_rate, key_burst), (tenant_rate, tenant_burst), ["a", "b"])
    assert [r["errors"] for r in results if r["errors"]] == []
    assert sum(r["fallbacks"] for r in results) == 0, results
    per_key = {k: sum(r["granted"][k] for r in results) for k in ("a", "b")}
    total = sum(per_key.values())
    allowed = tenant_burst + tenant_rate * RUN_SECONDS + PROCESSES
    assert total <= allowed, (
        f"{PROCESSES} processes admitted {total} calls of one tenant in {RUN_SECONDS:.0f} s; "
        f"its limit allows {allowed:.0f}. Per process: {results}"
    )
    for key, count in per_key.items():
        assert count <= key_burst + key_rate * RUN_SECONDS + PROCESSES, (key, results)
    # And the limit did not simply refuse everything.
    assert total >= tenant_rate * RUN_SECONDS * 0.5, results


def test_a_key_of_one_call_per_second_from_four_processes_gets_one_per_second(
    database_url: str,
) -> None:
    """Covers an attack not tested before; held on SQLite and PostgreSQL when written."""
    results = _run(database_url, (1.0, 1), (0.0, 1), ["a"])
    assert [r["errors"] for r in results if r["errors"]] == []
    assert sum(r["fallbacks"] for r in results) == 0, results
    total = sum(r["granted"]["a"] for r in results)
    allowed = 1 + 1.0 * RUN_SECONDS + PROCESSES
    assert total <= allowed, (
        f"{PROCESSES} processes admitted {total} calls of a 1/s key in {RUN_SECONDS:.0f} s; "
        f"its limit allows {allowed:.0f}. Per process: {results}"
    )
    assert total >= RUN_SECONDS * 0.5, results

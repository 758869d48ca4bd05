"""A key's call rate, shared by several processes on one database, attacked by one caller
who calls as fast as it can from every process at once (what `reachstore up
--query-processes N` behind one bridge makes of a tight loop).

Each worker is a real process running the services' own limiter (``fleet_limiter`` on
``SqlRateBuckets``) with eight threads. The whole fleet may admit at most the burst plus the
rate over the run, plus one lease per process (``FleetLimiter``'s documented slack).

On SQLite the lease transactions collide; a collision that surfaced as an
``OperationalError`` would send ``RequestLimiter`` to the process's own buckets (its
fallback for a database that is away), and each process would admit a full burst and rate
of its own. That is what this tries to provoke."""

from __future__ import annotations

import time

import pytest

from tests.integration.limiter_workers import PRELUDE, run_workers

# Counts what a rate admits in wall-clock seconds: run with the machine to itself (the
# Makefile's "alone" pass).
pytestmark = pytest.mark.alone

PROCESSES = 4
THREADS = 8
RUN_SECONDS = 4.0
RATE, BURST = 10.0, 10

WORKER = (
    PRELUDE
    + """

url, start, seconds, threads, rate, burst = sys.argv[1:7]
start, seconds = float(start), float(seconds)
limits = Limits(key_query_rate=float(rate), key_query_burst=int(burst), tenant_query_rate=0)
limiter = fleet_limiter(limits, make_sessions(make_engine(url)))
granted = [0] * int(threads)
def hammer(i):
    while time.time() < start + seconds:
        if limiter.check_call("acme", "k-attacker", "query") == 0:
            granted[i] += 1
time.sleep(max(0.0, start - time.time()))
workers = [threading.Thread(target=hammer, args=(i,)) for i in range(int(threads))]
for w in workers: w.start()
for w in workers: w.join()
print(json.dumps({"granted": sum(granted), "fallbacks": len(fallbacks),
                  "why": fallbacks[:1]}))
"""
)


def test_one_key_hammered_from_four_processes_gets_its_rate_and_no_more(
    database_url: str,
) -> None:
    """Covers an attack not tested before; held on SQLite and PostgreSQL when written."""
    start = time.time() + 6.0  # every worker imported and connected before the run
    args = [database_url, str(start), str(RUN_SECONDS), str(THREADS), str(RATE), str(BURST)]
    results = run_workers(database_url, WORKER, args, PROCESSES)
    granted = sum(r["granted"] for r in results)
    allowed = BURST + RATE * RUN_SECONDS + PROCESSES
    assert granted <= allowed, (
        f"{PROCESSES} processes admitted {granted} calls of one key in {RUN_SECONDS:.0f} s; "
        f"its limit allows {allowed:.0f}. Per process: {results}"
    )
    # And the limit did not simply refuse everything.
    assert granted >= RATE * RUN_SECONDS * 0.5, results

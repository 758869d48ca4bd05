"""Call rates held for the whole deployment: several limiters on one real database, as
several processes would run them (``reachstore_server/storage/rate_buckets.py``,
``reachstore_server/common/limits.py`` ``FleetLimiter``). Each limiter is what one process holds;
the threads stand for that process's concurrent calls."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy
from sqlalchemy import text

from reachstore_server.common.limits import Limits, RequestLimiter
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.rate_buckets import fleet_limiter

# Counts what a rate admits in wall-clock seconds: run with the machine to itself (the
# Makefile's "alone" pass).
pytestmark = pytest.mark.alone

RATE, BURST = 20.0, 10
LIMITS = Limits(key_query_rate=RATE, key_query_burst=BURST, tenant_query_rate=0)


def _hammer(limiters: list[RequestLimiter], seconds: float, key: str = "k1") -> int:
    """Calls as fast as they come from two threads per limiter; how many were admitted."""
    admitted = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def run(limiter: RequestLimiter) -> None:
        while time.monotonic() < stop_at:
            if limiter.check_call("acme", key, "query") == 0.0:
                with lock:
                    admitted[0] += 1

    threads = [threading.Thread(target=run, args=(lim,)) for lim in limiters for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return admitted[0]


def test_four_processes_admit_what_one_would(engine: sqlalchemy.Engine) -> None:
    seconds = 3.0
    fleet = [fleet_limiter(LIMITS, make_sessions(engine)) for _ in range(4)]
    alone = [RequestLimiter(LIMITS) for _ in range(4)]

    shared = _hammer(fleet, seconds)
    separate = _hammer(alone, seconds)

    ceiling = BURST + RATE * seconds  # 70: what one process lets through
    assert separate > 3 * ceiling  # per-process buckets: four times the rate
    assert 0.8 * ceiling <= shared <= ceiling + 1, (shared, ceiling)


def test_a_refusal_names_the_wait_and_other_keys_are_untouched(engine: sqlalchemy.Engine) -> None:
    slow = Limits(key_query_rate=0.5, key_query_burst=BURST, tenant_query_rate=0)
    one, two = (fleet_limiter(slow, make_sessions(engine)) for _ in range(2))
    for n in range(BURST):
        assert (one if n % 2 else two).check_call("acme", "k1", "query") == 0.0
    # The burst is spent across the two: both refuse, each saying when a token comes.
    waits = [limiter.check_call("acme", "k1", "query") for limiter in (one, two)]
    assert all(0 < wait <= 2.0 for wait in waits), waits
    assert one.check_call("acme", "k2", "query") == 0.0
    time.sleep(max(waits) + 0.05)
    assert two.check_call("acme", "k1", "query") == 0.0


def test_the_buckets_are_rows_any_process_can_read(engine: sqlalchemy.Engine) -> None:
    limiter = fleet_limiter(LIMITS, make_sessions(engine))
    assert limiter.check_call("acme", "k9", "query") == 0.0
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT name, tokens FROM rate_buckets")).all()
    [(name, tokens)] = rows
    assert name == "query/key/k9" and tokens < BURST


def test_a_database_that_is_gone_falls_back_to_this_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With no database to reach, calls are still limited, by this process alone, rather
    than every call failing."""
    engine = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=1")
    limiter = fleet_limiter(LIMITS, make_sessions(engine))
    waits = [limiter.check_call("acme", "k1", "query") for _ in range(BURST + 1)]
    assert waits[:BURST] == [0.0] * BURST and waits[BURST] > 0

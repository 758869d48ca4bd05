"""A shared call-rate bucket whose row cannot be written: what happens to the calls that
wait on one thread's lease (``FleetLimiter.take``, ``reachstore_server/common/limits.py``)
and to the other calls of the same process.

One thread per process leases for a set of buckets and the others wait on its
``lease.done`` event with no time limit. The leasing thread's transaction
(``SqlRateBuckets._lease_once``, ``reachstore_server/storage/rate_buckets.py``) first locks
the bucket rows with ``SELECT ... FOR UPDATE`` on PostgreSQL; a row lock held by another
transaction (a process frozen mid-lease: stopped, paused, swapped out) makes it wait. On
SQLite a writer that holds the file waits out ``busy_timeout`` (10 s), after which the
call falls back to the process's own buckets (``RequestLimiter._check``).

The promise under attack (README "Quotas and rate limits"): while the database cannot be
reached each process limits by its own buckets instead of refusing everything, and
nothing hangs. Each limiter below is what one process holds (its own engine); the store
is the services' own, on a real database."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import psycopg

from reachstore_server.common import grpc_server
from reachstore_server.common.auth import Caller
from reachstore_server.common.limits import Limits, RequestLimiter
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.rate_buckets import fleet_limiter
from reachstore_server.storage.schema import migrate_to_head
from tests.conftest import PG_ADMIN_URL

LIMITS = Limits(key_query_rate=10.0, key_query_burst=20, tenant_query_rate=0.0)
THREADS = 4


def _limiter(url: str) -> tuple[RequestLimiter, object]:
    engine = make_engine(url)
    migrate_to_head(engine)
    return fleet_limiter(LIMITS, make_sessions(engine)), engine


def _calls_at_once(limiter: RequestLimiter, key: str, count: int) -> tuple[list, list]:
    """``count`` threads each make one call of ``key``; the threads and their outcomes."""
    outcomes: list[object] = []
    lock = threading.Lock()

    def call() -> None:
        try:
            result: object = limiter.check_call("acme", key, "query")
        except Exception as exc:  # noqa: BLE001 - the outcome is what is asserted
            result = exc
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=call, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads, outcomes


def _still_waiting(threads: list[threading.Thread], deadline: float) -> int:
    """How many of ``threads`` have not finished by ``deadline`` (time.monotonic())."""
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    return sum(thread.is_alive() for thread in threads)


def _psycopg_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def test_a_bucket_row_locked_by_a_frozen_lease_does_not_hang_the_calls_of_its_key(
    pg_database: str,
) -> None:
    """Covers an attack not tested before; failed on PostgreSQL when written (every call of
    the key waits for as long as the other transaction holds the row: without end; the
    engine sets no lock or statement timeout, and the waiting calls have none either)."""
    first, first_engine = _limiter(pg_database)
    second, second_engine = _limiter(pg_database)
    holder = psycopg.connect(_psycopg_url(pg_database))
    threads: list[threading.Thread] = []
    try:
        assert first.check_call("acme", "k-1", "query") == 0.0  # the row exists now
        # A process frozen in the middle of its lease transaction: the row stays locked.
        holder.execute(
            "SELECT tokens FROM rate_buckets WHERE name = %s FOR UPDATE", ("query/key/k-1",)
        )
        threads, outcomes = _calls_at_once(second, "k-1", THREADS)
        stuck = _still_waiting(threads, time.monotonic() + 8.0)
        assert stuck == 0, (
            f"{stuck} of {THREADS} calls of one key still waiting after 8 s on a bucket row "
            f"another transaction holds; finished: {outcomes}"
        )
    finally:
        holder.rollback()
        holder.close()
        for thread in threads:
            thread.join(timeout=10)
        first_engine.dispose()  # type: ignore[attr-defined]
        second_engine.dispose()  # type: ignore[attr-defined]


def test_a_frozen_lease_of_one_key_does_not_stop_the_calls_of_other_keys(
    pg_database: str,
) -> None:
    """Covers an attack not tested before; failed on PostgreSQL when written. The calls of
    a process check their rate through ``grpc_server._check_rate``, which waits for the
    store in ``asyncio.to_thread``: the event loop's default executor, a few threads
    (``min(32, cores + 4)``). Calls of a key whose lease is stuck occupy them all, and a
    call of another key, whose bucket nobody holds, cannot even start its lease."""
    first, first_engine = _limiter(pg_database)
    second, second_engine = _limiter(pg_database)
    holder = psycopg.connect(_psycopg_url(pg_database))
    loop = asyncio.new_event_loop()
    try:
        assert first.check_call("acme", "k-hot", "query") == 0.0
        holder.execute(
            "SELECT tokens FROM rate_buckets WHERE name = %s FOR UPDATE", ("query/key/k-hot",)
        )
        hot = Caller(tenant="acme", key_id="k-hot", scopes=frozenset({"read"}))
        other = Caller(tenant="acme", key_id="k-other", scopes=frozenset({"read"}))

        async def scenario() -> str:
            stuck = [
                asyncio.ensure_future(grpc_server._check_rate(second, hot, "read"))
                for _ in range(40)
            ]
            await asyncio.sleep(0.5)
            try:
                await asyncio.wait_for(grpc_server._check_rate(second, other, "read"), 6.0)
                outcome = "admitted"
            except TimeoutError:
                outcome = "still waiting after 6 s"
            except Exception as exc:  # noqa: BLE001 - a refusal is an answer, not a hang
                outcome = f"answered: {type(exc).__name__}"
            for task in stuck:
                task.cancel()
            return outcome

        outcome = loop.run_until_complete(scenario())
        assert outcome == "admitted", (
            f"a call of key k-other, whose bucket nobody holds, was {outcome} while the "
            f"calls of k-hot waited on a locked bucket row"
        )
    finally:
        holder.rollback()
        holder.close()
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
        first_engine.dispose()  # type: ignore[attr-defined]
        second_engine.dispose()  # type: ignore[attr-defined]


def test_a_locked_sqlite_file_sends_every_waiting_call_to_the_fallback_in_one_timeout(
    tmp_path: Path,
) -> None:
    """Covers an attack not tested before; failed on SQLite when written. Another
    connection holds the database file's write lock; the leasing thread waits out the
    busy timeout (10 s) and its call falls back to the process's own buckets. The calls
    that waited on its lease are not given that outcome: each, in turn, goes to the store
    and waits out the timeout again, so the last of four answers after 40 s."""
    url = f"sqlite:///{tmp_path / 'reachstore.db'}"
    limiter, engine = _limiter(url)
    blocker = sqlite3.connect(tmp_path / "reachstore.db", timeout=30, isolation_level=None)
    threads: list[threading.Thread] = []
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        threads, outcomes = _calls_at_once(limiter, "k-1", THREADS)
        stuck = _still_waiting(threads, started + 15.0)  # one busy timeout (10 s) and some
        assert stuck == 0, (
            f"{stuck} of {THREADS} calls still waiting 15 s into a database lock with a "
            f"10 s busy timeout; answered so far: {outcomes}"
        )
        # The fallback admits (the process's own bucket holds 20): nothing is refused.
        assert outcomes == [0.0] * THREADS, outcomes
    finally:
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()
        for thread in threads:
            thread.join(timeout=60)
        engine.dispose()  # type: ignore[attr-defined]


def test_a_database_dropped_in_the_middle_of_a_lease_sends_every_waiting_call_to_the_fallback(
    pg_database: str,
) -> None:
    """Covers an attack not tested before; held on PostgreSQL when written. The leasing
    thread waits on a row lock when the database is dropped with FORCE (its connection is
    ended); the calls that waited on its lease must then each get an answer from the
    process's own buckets, not an exception and not an endless wait."""
    first, first_engine = _limiter(pg_database)
    second, second_engine = _limiter(pg_database)
    holder = psycopg.connect(_psycopg_url(pg_database))
    threads: list[threading.Thread] = []
    try:
        assert first.check_call("acme", "k-1", "query") == 0.0
        holder.execute(
            "SELECT tokens FROM rate_buckets WHERE name = %s FOR UPDATE", ("query/key/k-1",)
        )
        threads, outcomes = _calls_at_once(second, "k-1", 16)
        # The lease is waiting for the row (for up to the store's 1 s lock timeout), the
        # other calls for the lease.
        time.sleep(0.5)
        name = pg_database.rsplit("/", 1)[1]
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        stuck = _still_waiting(threads, time.monotonic() + 10.0)
        assert stuck == 0, f"{stuck} of 16 calls still waiting 10 s after the database went"
        # The process's own bucket holds 20: every call is admitted, none fails.
        assert outcomes == [0.0] * 16, outcomes
    finally:
        holder.close()
        for thread in threads:
            thread.join(timeout=10)
        first_engine.dispose()  # type: ignore[attr-defined]
        second_engine.dispose()  # type: ignore[attr-defined]

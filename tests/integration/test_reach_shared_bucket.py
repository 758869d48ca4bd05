"""The channel rate bucket shared through the database: several workers (each its own
engine, as separate processes would be) together never send faster than the rate."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.reach.shared_bucket import SharedTokenBucket
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def workers(database_url: str) -> Iterator[Callable[[], sessionmaker[Session]]]:
    """Makes one worker's sessions, on an engine of its own (as a separate process has),
    over the schema made once; every engine is closed at the end."""
    engines = [make_engine(database_url)]
    migrate_to_head(engines[0])

    def worker() -> sessionmaker[Session]:
        engines.append(make_engine(database_url))
        return make_sessions(engines[-1])

    yield worker
    for engine in engines:
        engine.dispose()


def test_two_workers_share_one_bucket(workers: Callable[[], sessionmaker[Session]]) -> None:
    clock = Clock()
    a = SharedTokenBucket(workers(), "hook", 10.0, clock=clock)
    b = SharedTokenBucket(workers(), "hook", 10.0, clock=clock)
    assert a.reserve() == 0.0  # the bucket starts full (one token)
    assert b.reserve() == pytest.approx(0.1)  # A took it: B must wait a token's time
    assert a.reserve() == pytest.approx(0.1)  # waiting took nothing
    clock.now += 0.05
    assert b.reserve() == pytest.approx(0.05)
    clock.now += 0.05
    assert b.reserve() == 0.0
    assert a.reserve() == pytest.approx(0.1)
    # Another channel has its own row.
    assert SharedTokenBucket(workers(), "mail", 10.0, clock=clock).reserve() == 0.0


def test_concurrent_workers_stay_under_the_rate(
    workers: Callable[[], sessionmaker[Session]],
) -> None:
    rate, seconds = 20.0, 1.5
    granted: list[float] = []
    lock = threading.Lock()
    start = time.time()

    buckets = [SharedTokenBucket(workers(), "busy", rate) for _ in range(4)]

    def worker(bucket: SharedTokenBucket) -> None:
        async def run() -> None:
            while time.time() - start < seconds:
                await bucket.acquire()
                with lock:
                    granted.append(time.time())

        asyncio.run(run())

    threads = [threading.Thread(target=worker, args=(b,)) for b in buckets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    span = max(granted) - start
    # An upper bound only (a slow machine grants fewer, never more): the rate over the
    # span, plus the one token the bucket starts with, plus one in flight per worker.
    assert len(granted) <= rate * span + 1 + 4, (len(granted), span)
    assert len(granted) >= 5  # and the workers did get tokens


def test_without_its_database_a_worker_paces_itself() -> None:
    engine = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none")
    dead = make_sessions(engine)
    clock = Clock()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    bucket = SharedTokenBucket(dead, "hook", 10.0, clock=clock, sleep=sleep)

    async def two() -> tuple[float, float]:
        return await bucket.acquire(), await bucket.acquire()

    first, second = asyncio.run(two())
    engine.dispose()
    assert first == 0.0 and second == pytest.approx(0.1)
    assert slept == [pytest.approx(0.1)]

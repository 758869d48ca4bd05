"""The namespace fan-out: cheap when jobs are quick, independent when one is slow."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from reachstore_server.query.fanout import FanOut


@pytest.fixture
def pool():  # type: ignore[no-untyped-def]
    with concurrent.futures.ThreadPoolExecutor(8) as executor:
        yield executor


def test_quick_jobs_run_in_one_thread_in_order(pool) -> None:  # type: ignore[no-untyped-def]
    threads: list[tuple[str, int]] = []

    def job(key: str) -> str:
        threads.append((key, threading.get_ident()))
        return key.upper()

    async def main() -> dict[str, object]:
        fanout = FanOut(pool, {k: (lambda k=k: job(k)) for k in "abcd"})
        try:
            return await fanout.results(5.0)
        finally:
            fanout.close()

    assert asyncio.run(main()) == {"a": "A", "b": "B", "c": "C", "d": "D"}
    assert [k for k, _ in threads] == list("abcd")
    assert len({ident for _, ident in threads}) == 1


def test_a_stuck_job_does_not_hold_back_the_others(pool) -> None:  # type: ignore[no-untyped-def]
    release = threading.Event()

    def stuck() -> str:
        release.wait(10)
        return "late"

    async def main() -> dict[str, object]:
        # "stuck" is first, so it holds the shared thread; stealing must run the others.
        jobs = {"stuck": stuck, "b": lambda: "b", "c": lambda: "c"}
        fanout = FanOut(pool, jobs, steal_after_s=0.02)
        try:
            return await fanout.results(0.5)
        finally:
            release.set()
            fanout.close()

    outcomes = asyncio.run(main())
    assert (outcomes["b"], outcomes["c"]) == ("b", "c")
    assert isinstance(outcomes["stuck"], TimeoutError)


def test_a_job_not_started_by_its_deadline_never_runs(pool) -> None:  # type: ignore[no-untyped-def]
    ran: list[str] = []
    gate = threading.Event()

    def first() -> str:
        gate.wait(10)
        ran.append("first")
        return "first"

    def second() -> str:
        ran.append("second")
        return "second"

    async def main() -> dict[str, object]:
        # Stealing effectively off: "second" can only start after "first".
        fanout = FanOut(pool, {"first": first, "second": second}, steal_after_s=60)
        try:
            return await fanout.results(0.05)
        finally:
            fanout.close()

    outcomes = asyncio.run(main())
    assert all(isinstance(v, TimeoutError) for v in outcomes.values())
    gate.set()  # "first" now finishes in its thread; "second" was given up and must not run
    deadline = time.monotonic() + 5
    while "first" not in ran and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == ["first"]


def test_a_job_error_reaches_its_waiter(pool) -> None:  # type: ignore[no-untyped-def]
    def broken() -> str:
        raise ValueError("boom")

    async def main() -> dict[str, object]:
        fanout = FanOut(pool, {"x": broken})
        try:
            return await fanout.results(5.0)
        finally:
            fanout.close()

    [error] = asyncio.run(main()).values()
    assert isinstance(error, ValueError) and str(error) == "boom"


def test_a_quick_result_does_not_wait_behind_a_slow_job_in_the_same_run(pool) -> None:  # type: ignore[no-untyped-def]
    release = threading.Event()

    def slow() -> str:
        release.wait(10)
        return "slow"

    async def main() -> dict[str, object]:
        # "quick" runs first in the shared thread, then "slow" holds that thread.
        fanout = FanOut(pool, {"quick": lambda: "quick", "slow": slow}, steal_after_s=0.02)
        try:
            return await fanout.results(0.3)
        finally:
            release.set()
            fanout.close()

    outcomes = asyncio.run(main())
    assert outcomes["quick"] == "quick"
    assert isinstance(outcomes["slow"], TimeoutError)


def test_a_slow_prelude_does_not_eat_the_jobs_budget(pool) -> None:  # type: ignore[no-untyped-def]
    prepared: dict[str, str] = {}

    def prelude() -> None:
        time.sleep(0.3)  # a cold start: longer than the budget and its allowance together
        prepared["vector"] = "v"

    async def main() -> dict[str, object]:
        fanout = FanOut(pool, {"a": lambda: prepared["vector"]}, prelude=prelude)
        try:
            return await fanout.results(0.1, 0.05)
        finally:
            fanout.close()

    assert asyncio.run(main()) == {"a": "v"}


def test_a_failing_prelude_is_reported_once(pool) -> None:  # type: ignore[no-untyped-def]
    def prelude() -> None:
        raise OSError("store unreachable")

    async def main() -> tuple[dict[str, object], BaseException | None]:
        fanout = FanOut(pool, {"a": lambda: "never", "b": lambda: "never"}, prelude=prelude)
        try:
            return await fanout.results(1.0), fanout.prelude_error
        finally:
            fanout.close()

    outcomes, error = asyncio.run(main())
    assert isinstance(error, OSError)
    assert all(isinstance(v, OSError) for v in outcomes.values())


def test_spread_jobs_run_on_two_threads_after_the_prelude(pool) -> None:  # type: ignore[no-untyped-def]
    prelude_over = threading.Event()
    seen: dict[str, tuple[int, bool]] = {}

    def prelude() -> None:
        time.sleep(0.05)  # the second thread is awake and waiting by now
        prelude_over.set()

    def job(key: str) -> str:
        seen[key] = (threading.get_ident(), prelude_over.is_set())
        return key.upper()

    async def main() -> dict[str, object]:
        jobs = {k: (lambda k=k: job(k)) for k in "abcd"}
        fanout = FanOut(pool, jobs, prelude=prelude, spread=True)
        try:
            return await fanout.results(5.0)
        finally:
            fanout.close()

    assert asyncio.run(main()) == {"a": "A", "b": "B", "c": "C", "d": "D"}
    assert all(after for _, after in seen.values())  # no job ran before the prelude ended
    assert seen["a"][0] == seen["b"][0] != seen["c"][0] == seen["d"][0]


def test_a_failing_prelude_fails_both_halves_of_a_spread_once(pool) -> None:  # type: ignore[no-untyped-def]
    ran: list[str] = []

    def prelude() -> None:
        time.sleep(0.02)
        raise OSError("store unreachable")

    async def main() -> dict[str, object]:
        jobs = {k: (lambda k=k: ran.append(k)) for k in "abcde"}
        fanout = FanOut(pool, jobs, prelude=prelude, spread=True)
        try:
            return await fanout.results(1.0)
        finally:
            fanout.close()

    outcomes = asyncio.run(main())
    assert ran == []
    assert sorted(outcomes) == list("abcde")
    assert all(isinstance(v, OSError) for v in outcomes.values())

"""Running one blocking job per namespace, each under its own deadline, cheaply.

Measured on 2 cores (bench/bench_storage.py): four 0.5 ms namespace searches handed to
four pool threads took 4 ms of wall time — thread hand-offs, wake-ups and GIL contention
cost more than the searches — while the same four run one after another in one thread
took 2 ms. So the jobs start in a single worker thread, in order. Independence is kept by
stealing: a job that has not started ``steal_after_s`` after the fan-out began is given a
thread of its own, so a slow namespace delays the others by at most that long, never by
its whole budget. A job still unstarted when its caller stops waiting never starts.

A query alone in its process (``spread=True``) has a core to spare: its jobs are split over
two threads from the start. The second thread is woken while the first runs the prelude
(the question's embedding, ~2 ms), so its wake-up costs the query nothing, and the dense
searches (faiss releases the interpreter lock) of the two halves overlap.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")
# A job's result or the exception it raised.
_Outcome = tuple[T | None, BaseException | None]

# Long enough that a normal run of small searches finishes first (they take ~0.5 ms
# each), short enough that a stuck one holds the rest back by little.
DEFAULT_STEAL_AFTER_S = 0.010


# How much longer than its budget a query waits for its namespaces in all, to cover the
# namespace-row read and the embedding that come first (each namespace's own deadline,
# enforced by its cancel token, starts after them). The same holds for a search forwarded
# to another member, which reads and embeds before its namespaces' budgets start.
PREPARE_ALLOWANCE_S = 0.5


class FanOut(Generic[T]):
    """Starts the jobs on construction; ``results(budget)`` waits for all."""

    def __init__(
        self,
        pool: concurrent.futures.Executor,
        jobs: Mapping[str, Callable[[], T]],
        steal_after_s: float = DEFAULT_STEAL_AFTER_S,
        prelude: Callable[[], None] | None = None,
        spread: bool = False,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._pool = pool
        self._steal_after_s = steal_after_s
        self._started = time.monotonic()
        self._jobs = dict(jobs)
        self._lock = threading.Lock()
        self._claimed: set[str] = set()
        self._abandoned: set[str] = set()
        self._ready: list[tuple[str, _Outcome[T]]] = []
        # Work every job needs first (the query's namespace rows and vector), run by the
        # first thread before its jobs: one hand-off for the whole query.
        self._prelude = prelude
        self._prelude_done = threading.Event()
        self.prelude_error: Exception | None = None
        if prelude is None:
            self._prelude_done.set()
        self._futures: dict[str, asyncio.Future[T]] = {
            key: self._loop.create_future() for key in self._jobs
        }
        self._closed = False
        self._stealer: asyncio.TimerHandle | None = None
        if self._jobs:
            keys = list(self._jobs)
            if spread and len(keys) > 1:
                half = (len(keys) + 1) // 2
                pool.submit(self._run_first, keys[:half])
                pool.submit(self._run_after_prelude, keys[half:])
            else:
                pool.submit(self._run_first, keys)
            self._stealer = self._loop.call_later(steal_after_s, self._steal)

    def _claim(self, key: str) -> bool:
        with self._lock:
            if key in self._claimed:
                return False
            self._claimed.add(key)
            return True

    def _run_first(self, keys: list[str]) -> None:
        if self._prelude is not None:
            try:
                self._prelude()
            except Exception as exc:  # noqa: BLE001 - re-raised by the caller of results()
                self.prelude_error = exc
                for key in self._jobs:  # the other thread's half too: it runs none
                    if self._claim(key):
                        with self._lock:
                            self._ready.append((key, (None, exc)))
            finally:
                self._started = time.monotonic()  # the jobs' own clock starts now
                self._prelude_done.set()
        self._run(keys)

    def _run_after_prelude(self, keys: list[str]) -> None:
        self._prelude_done.wait()
        self._run(keys)

    def _run(self, keys: list[str]) -> None:
        # Each hand-back wakes the event loop (a write to its self-pipe, ~7 % of the query
        # service's time under load), so finished results wait in ``_ready`` and go back
        # together at the end of the run. Once the run is slower than the stealing
        # threshold each goes back at once, and the loop also collects what is ready when
        # it steals and at the deadline, so a result never waits behind a slow job.
        for key in keys:
            if not self._claim(key):
                continue
            try:
                outcome: _Outcome[T] = (self._jobs[key](), None)
            except Exception as exc:  # noqa: BLE001 - handed to the waiting coroutine
                outcome = (None, exc)
            with self._lock:
                self._ready.append((key, outcome))
            if time.monotonic() - self._started > self._steal_after_s:
                self._loop.call_soon_threadsafe(self._settle)
        self._loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        """On the loop thread: hands every finished result to its future."""
        with self._lock:
            ready, self._ready = self._ready, []
        for key, (value, exc) in ready:
            future = self._futures[key]
            if future.done() or key in self._abandoned:
                continue
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(value)  # type: ignore[arg-type]

    def _steal(self) -> None:
        # Stealing counts from the end of the prelude. The timer is armed on the loop when
        # the fan-out starts and re-armed here while the prelude runs, instead of the
        # worker arming it when the prelude ends: that call into the loop
        # (call_soon_threadsafe) sat on every query's path, and the worker then waited
        # for the interpreter lock the woken loop had taken — at one client, py-spy put
        # ~2.8 ms of a ~10 ms query there. A quick prelude (the usual case) costs no
        # wake-up at all; a slow one, one per ``steal_after_s``.
        if self._closed:
            return
        if not self._prelude_done.is_set():
            self._stealer = self._loop.call_later(self._steal_after_s, self._steal)
            return
        left = self._started + self._steal_after_s - time.monotonic()
        if left > 0:
            self._stealer = self._loop.call_later(left, self._steal)
            return
        self._settle()
        with self._lock:
            waiting = [key for key in self._jobs if key not in self._claimed]
        for key in waiting:
            self._pool.submit(self._run, [key])

    async def results(
        self, budget_s: float, allowance_s: float = 0.0
    ) -> dict[str, T | BaseException]:
        """Every job's result or exception. The jobs get ``budget_s`` after the prelude;
        the wait is ``budget_s + allowance_s`` when the prelude is quick, and when it is
        not (a cold start), as long as the prelude takes plus ``budget_s``. Jobs not
        finished by then give ``TimeoutError`` (and never start, if they had not).
        One wait for all: the jobs of a query share their deadline."""
        futures = {key: future for key, future in self._futures.items()}
        if futures:
            done, _ = await asyncio.wait(futures.values(), timeout=budget_s + allowance_s)
            if len(done) < len(futures) and not self._prelude_done.is_set():
                await self._loop.run_in_executor(None, self._prelude_done.wait)
                await asyncio.wait(futures.values(), timeout=budget_s)
            self._settle()  # what finished but was not handed back yet still counts
        outcomes: dict[str, T | BaseException] = {}
        for key, future in futures.items():
            if not future.done():
                self._claim(key)
                self._abandoned.add(key)
                outcomes[key] = TimeoutError(key)
            elif future.exception() is not None:
                outcomes[key] = future.exception()  # type: ignore[assignment]
            else:
                outcomes[key] = future.result()
        return outcomes

    def close(self) -> None:
        self._closed = True
        if self._stealer is not None:
            self._stealer.cancel()

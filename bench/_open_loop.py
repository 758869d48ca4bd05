"""An open-loop load: requests leave at fixed times whatever the answers do.

A closed loop (each client sends its next request when the last one came back) slows
down with the system, so a stall produces few slow samples instead of many - coordinated
omission. Here one pacer thread per operation fires request ``i`` at ``t0 + i / rate``
without waiting for earlier ones (the operations are non-blocking: gRPC futures with
callbacks), and latency counts from that scheduled time, so time a request spent queued
behind a stall - in the services or in this process - is in its sample.

``Recorder`` keeps every outcome: the operation, when it was scheduled (seconds since
``t0``, negative during warm-up), its latency from the schedule, and the error, if any.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

# fire(i, scheduled) starts request i, which was due at time.perf_counter() == scheduled,
# and must return at once; the operation reports to the Recorder when it ends.
Fire = Callable[[int, float], None]


@dataclasses.dataclass(frozen=True)
class Outcome:
    op: str
    scheduled: float  # seconds since t0 (< 0: warm-up)
    seconds: float  # from the scheduled time to the answer
    error: str | None


class Recorder:
    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self.outcomes: list[Outcome] = []
        self.open = 0  # requests started and not yet ended

    def begin(self) -> None:
        with self._lock:
            self.open += 1

    def end(self, op: str, scheduled: float, error: str | None = None) -> None:
        """Ends a request that ``begin`` counted."""
        now = time.perf_counter()
        self.record(op, scheduled, now, error)
        with self._lock:
            self.open -= 1
            if self.open == 0:
                self._idle.notify_all()

    def record(self, op: str, scheduled: float, done: float, error: str | None = None) -> None:
        """A sample that another operation's request carries (an action's end, seen by the
        last of its look-ups), scheduled and done on the ``perf_counter`` clock."""
        outcome = Outcome(op, scheduled - self.t0, done - scheduled, error)
        with self._lock:
            self.outcomes.append(outcome)

    def wait_idle(self, timeout: float) -> bool:
        """Waits until no request is open; False if some still are after ``timeout``."""
        with self._idle:
            return self._idle.wait_for(lambda: self.open == 0, timeout)


class Pacer:
    """One thread that fires ``rate`` requests per second from ``t0 + start`` until
    ``t0 + end``; ``max_lag`` is how late the latest-fired request left (a pacer that
    cannot keep up - this process short of CPU - shows here, and in the latencies)."""

    def __init__(self, name: str, rate: float, fire: Fire, t0: float, start: float, end: float):
        self.name, self.rate, self.fire = name, rate, fire
        self.t0, self.start_s, self.end_s = t0, start, end
        self.fired = 0
        self.max_lag = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"pacer-{name}")

    def _run(self) -> None:
        for i in range(int((self.end_s - self.start_s) * self.rate)):
            due = self.t0 + self.start_s + i / self.rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            else:
                self.max_lag = max(self.max_lag, -wait)
            self.fire(i, due)
            self.fired += 1

    def start(self) -> Pacer:
        self._thread.start()
        return self

    def join(self) -> None:
        self._thread.join()


def run_pacers(pacers: Iterable[Pacer]) -> list[Pacer]:
    started = [p.start() for p in pacers]
    for pacer in started:
        pacer.join()
    return started


def _pct(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    ms = np.asarray(seconds) * 1000
    p50, p99 = np.percentile(ms, [50, 99])
    return {
        "n": len(seconds),
        "p50_ms": float(p50),
        "p99_ms": float(p99),
        "max_ms": float(ms.max()),
    }


def summarize(outcomes: Iterable[Outcome], window: float) -> dict[str, Any]:
    """Per operation, over the measured window (scheduled at 0 <= t < ``window``): count,
    throughput, errors (with the first few messages), p50/p99/max of the successful ones,
    and the same per minute of schedule."""
    by_op: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if 0 <= o.scheduled < window:
            by_op[o.op].append(o)
    out: dict[str, Any] = {}
    minutes = max(1, int(np.ceil(window / 60)))
    for op, items in sorted(by_op.items()):
        good = [o.seconds for o in items if o.error is None]
        errors = [o.error for o in items if o.error is not None]
        per_minute = []
        for m in range(minutes):
            in_minute = [o for o in items if 60 * m <= o.scheduled < 60 * (m + 1)]
            row = _pct([o.seconds for o in in_minute if o.error is None])
            row["errors"] = sum(1 for o in in_minute if o.error is not None)
            per_minute.append(row)
        out[op] = {
            **_pct(good),
            "requests": len(items),
            "per_s": len(items) / window,
            "errors": len(errors),
            "error_examples": sorted(set(errors))[:5],
            "per_minute": per_minute,
        }
    return out

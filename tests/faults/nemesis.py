"""The nemesis: a thread that hurts the workers and the database, one fault at a time,
at seeded random moments (each kind once per round, in a seeded order), and keeps a log
of what it did and when.

The log is what the properties use to tell a bug from bad luck: a worker killed or frozen
(or a database down) right after the receiver answered may honestly leave the action
UNKNOWN, so a receipt lost inside such a window is excused, and only there. A skewed
clock excuses nothing: leases must hold whatever a worker's clock says.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Iterable

from tests.faults.cluster import Cluster, Database
from tests.faults.config import Timing

NEMESIS_FAULTS = {
    "kill": "SIGKILL a worker, then start it again",
    "pause": "SIGSTOP a worker for longer than the lease, then SIGCONT",
    "skew": "restart a worker under faketime, its wall clock some seconds off, for a while",
    "db_restart": "stop the PostgreSQL server (immediate) and start it again (PostgreSQL "
    "only: SQLite has no server to restart)",
}
# Kinds whose window may keep a worker from recording what it learnt.
DISRUPTIONS = frozenset({"kill", "pause", "db_restart"})


@dataclasses.dataclass(frozen=True)
class Event:
    """One fault the nemesis injected, over [start, end] (``time.monotonic()``)."""

    kind: str
    target: str
    start: float
    end: float
    detail: str = ""

    def overlaps(self, low: float, high: float) -> bool:
        return self.start <= high and self.end >= low

    def describe(self, t0: float) -> str:
        return f"{self.start - t0:8.3f}..{self.end - t0:8.3f} s {self.kind} {self.target}" + (
            f" ({self.detail})" if self.detail else ""
        )


@dataclasses.dataclass
class _Skew:
    index: int
    worker: str
    offset_s: float
    measured: tuple[float, float]
    start: float
    until: float


class Nemesis:
    def __init__(
        self,
        cluster: Cluster,
        database: Database,
        seed: int,
        kinds: Iterable[str],
        timing: Timing,
        skew_s: float,
    ) -> None:
        self._cluster = cluster
        self._database = database
        self._rng = random.Random(f"{seed}/nemesis")
        self._timing = timing
        self._skew_s = skew_s
        self.kinds = [k for k in kinds if k in NEMESIS_FAULTS]
        if not database.restartable and "db_restart" in self.kinds:
            self.kinds.remove("db_restart")
        self.events: list[Event] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._skew: _Skew | None = None

    def start(self, duration_s: float) -> Nemesis:
        deadline = time.monotonic() + duration_s
        self._thread = threading.Thread(target=self._run, args=(deadline,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the faults: the current one finishes (a pause is always undone, a killed
        worker always restarted), a skewed worker is restarted with the right clock."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
            if self._thread.is_alive():
                self.errors.append(RuntimeError("the nemesis did not stop within 120 s"))

    def _next_kinds(self) -> list[str]:
        """One round: every kind once, in a seeded order, so that even a short run sees
        each of them."""
        kinds = list(self.kinds)
        self._rng.shuffle(kinds)
        return kinds

    def _run(self, deadline: float) -> None:
        try:
            round_: list[str] = []
            while self.kinds and not self._stop.wait(self._rng.uniform(0.5, 2.0)):
                now = time.monotonic()
                if now >= deadline:
                    break
                if self._skew is not None and now >= self._skew.until:
                    self._end_skew()
                round_ = round_ or self._next_kinds()
                kind = round_.pop(0)
                target = self._rng.randrange(len(self._cluster.slots))
                if kind == "kill":
                    self._kill(target, "")
                    self._cluster.restart(target)
                elif kind == "pause":
                    self._pause(target)
                elif kind == "skew" and self._skew is None:
                    self._start_skew(target)
                elif kind == "db_restart":
                    self._restart_database()
        except BaseException as exc:  # noqa: BLE001 - reported as a harness error
            self.errors.append(exc)
        finally:
            try:
                if self._skew is not None:
                    self._end_skew()
            except BaseException as exc:  # noqa: BLE001
                self.errors.append(exc)

    def _kill(self, index: int, why: str) -> None:
        at = time.monotonic()
        worker = self._cluster.kill(index)
        self.events.append(Event("kill", worker, at, at, why))

    def _pause(self, index: int) -> None:
        held = self._timing.lease_s + self._rng.uniform(0.5, 2.0)
        start = time.monotonic()
        worker = self._cluster.pause(index)
        try:
            time.sleep(held)
        finally:
            self._cluster.resume(index)
            self.events.append(Event("pause", worker, start, time.monotonic(), f"{held:.1f} s"))

    def _start_skew(self, index: int) -> None:
        offset = self._rng.choice((-1, 1)) * self._skew_s
        self._kill(index, "to restart it with a skewed clock")
        worker = self._cluster.restart(index, skew_s=offset)
        start = time.monotonic()
        hold = self._rng.uniform(8.0, 15.0)
        assert worker.measured_skew is not None
        self._skew = _Skew(
            index, worker.worker_id, offset, worker.measured_skew, start, start + hold
        )

    def _end_skew(self) -> None:
        skew = self._skew
        assert skew is not None
        self._skew = None
        end = time.monotonic()
        low, high = skew.measured
        detail = f"clock {skew.offset_s:+g} s; its log read {low:+.1f} to {high:+.1f} s"
        self.events.append(Event("skew", skew.worker, skew.start, end, detail))
        self._kill(skew.index, "to restart it with the right clock")
        self._cluster.restart(skew.index, skew_s=0.0)

    def _restart_database(self) -> None:
        down = self._rng.uniform(0.5, 2.0)
        start = time.monotonic()
        try:
            self._database.restart(down)
        finally:
            self.events.append(
                Event("db_restart", self._database.name, start, time.monotonic(), f"{down:.1f} s")
            )

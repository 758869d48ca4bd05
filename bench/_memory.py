"""Resident memory of the service processes, sampled while a load runs.

``pss_mib`` gives a process's proportional share instead, for totals over processes that
share pages.

``VmRSS`` from ``/proc/<pid>/status`` is what the kernel holds in RAM for a process right
now (anonymous memory and mapped files it touched). A leak shows as RSS that keeps rising
under a steady load, so ``MemorySampler`` takes a sample of every process every few
seconds and keeps them with the time since the measured window began.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any


def rss_mib(pid: int) -> float:
    """VmRSS of ``pid`` in MiB; NaN when the process is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024  # the kernel reports kB
    except OSError:
        pass
    return float("nan")


def pss_mib(pid: int) -> float:
    """Proportional set size of ``pid`` in MiB (``/proc/<pid>/smaps_rollup``): each page
    counted once across the processes sharing it, split between them. Summed over several
    processes this is what they hold together, where RSS counts a shared page (the model's
    file, the libraries) once per process. NaN when the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def rss_all(pids: Mapping[str, int]) -> dict[str, float]:
    return {name: rss_mib(pid) for name, pid in pids.items()}


class MemorySampler:
    """A daemon thread sampling ``rss_all(pids)`` every ``interval`` seconds; ``samples``
    holds ``(seconds since t0, {name: MiB})``."""

    def __init__(self, pids: Mapping[str, int], t0: float, interval: float = 5.0) -> None:
        self.pids = dict(pids)
        self.t0 = t0  # time.perf_counter() of the window's start; earlier samples are < 0
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float]]] = []
        # the machine's 1-minute load average with each sample: on a shared machine, other
        # users' work shows here (runnable threads; above the core count, all wait)
        self.loads: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample(self) -> dict[str, float]:
        values = rss_all(self.pids)
        now = time.perf_counter() - self.t0
        self.samples.append((now, values))
        self.loads.append((now, os.getloadavg()[0]))
        return values

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def per_minute(self, minutes: int) -> list[dict[str, float]]:
        """The last sample at or before the end of each minute of the window."""
        out = []
        for minute in range(1, minutes + 1):
            before = [v for t, v in self.samples if 0 <= t <= 60 * minute + 1]
            out.append(before[-1] if before else {})
        return out

    def load_per_minute(self, minutes: int) -> list[float]:
        """The highest 1-minute load average sampled in each minute of the window."""
        return [
            max((v for t, v in self.loads if 60 * m <= t < 60 * (m + 1)), default=float("nan"))
            for m in range(minutes)
        ]

    def summary(self, start: Mapping[str, float], end: Mapping[str, float]) -> dict[str, Any]:
        """Start, end, peak and end/start for each process."""
        peaks: dict[str, float] = {}
        for t, values in self.samples:
            if t >= 0:
                for name, mib in values.items():
                    peaks[name] = max(peaks.get(name, 0.0), mib)
        return {
            name: {
                "start_mib": start[name],
                "end_mib": end.get(name, float("nan")),
                "peak_mib": peaks.get(name, float("nan")),
                "end_over_start": end.get(name, float("nan")) / start[name],
            }
            for name in start
        }

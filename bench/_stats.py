"""Latency percentiles and per-process CPU time, as the benchmark reports them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def latency_stats(seconds: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(seconds, dtype=np.float64) * 1000
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {
        "p50_ms": float(p50),
        "p95_ms": float(p95),
        "p99_ms": float(p99),
        "mean_ms": float(ms.mean()),
        "n": int(ms.size),
    }


def p50_ms(samples: Sequence[float]) -> float:
    return 1000 * float(np.median(np.asarray(samples, dtype=np.float64)))


def timed_samples(fn: Callable[[], Any], n: int, warm_up: int = 20) -> list[float]:
    """Seconds taken by each of ``n`` calls of ``fn``, after up to ``warm_up`` untimed ones."""
    for _ in range(min(warm_up, n)):
        fn()
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return samples


def timed_p50_ms(fn: Callable[[], Any], n: int) -> float:
    """p50 of ``n`` calls of ``fn``, after a few untimed ones."""
    return p50_ms(timed_samples(fn, n))


def _process_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of one process (all its threads)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        # Split after the command name, which may contain spaces; then fields[0] is field 3
        # of proc(5) (state), so utime and stime (fields 14 and 15) are fields[11:13].
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


# A name stands for one process, or for several whose CPU is summed (the query processes
# of one `reachstore up`, reachstore_server/cli.py).
Pids = Mapping[str, int | Sequence[int]]


def cpu_seconds(pids: Pids) -> dict[str, float]:
    """CPU seconds so far of each named process (or group of processes), and of this one
    as ``bench``. The kernel counts in clock ticks (10 ms here), so divide by enough work."""
    out = {}
    for name, pid in pids.items():
        try:
            group = [pid] if isinstance(pid, int) else list(pid)
            out[name] = sum(_process_cpu_seconds(one) for one in group)
        except OSError:  # the process is gone: the caller's figures say so as NaN
            out[name] = float("nan")
    out["bench"] = time.process_time()
    return out

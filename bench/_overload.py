"""The sustained benchmark's overload mode: the mixed load at its base rates, then ``factor``
times them for a while, then back to the base rates (docs/OPERATIONS.md, "Load shedding").

Each operation gets one pacer per phase, firing request numbers that continue from the
phase before, so documents and actions stay unique across phases. What the run reports,
per phase and operation: offered and served per second (goodput: answers that were not
errors), refusals with a retry hint per second, other errors, and p50/p99 of the served
requests; then the goodput during the overload as a share of the base phase's (the rate
the machine sustains), and the time to recover: from the moment the load drops back, until
the last refusal or the last served request slower than twice the base phase's p99.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from _open_loop import Fire, Outcome, Pacer

# How _mixed_ops names an answer that refused the request and said when to come back.
REFUSED_PREFIX = "REFUSED "
# Recovery is judged over windows of this many seconds (``_recovery``).
RECOVERY_WINDOW_S = 5.0
# The operations whose goodput and recovery count (action.submit is part of action).
MEASURED = ("query", "ingest.accept", "action.submit")


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    start: float  # seconds after t0
    end: float
    factor: float


def phases(before_s: float, during_s: float, after_s: float, factor: float) -> list[Phase]:
    return [
        Phase("base", 0.0, before_s, 1.0),
        Phase("overload", before_s, before_s + during_s, factor),
        Phase("after", before_s + during_s, before_s + during_s + after_s, 1.0),
    ]


def pacers(
    name: str, rate: float, fire: Fire, t0: float, warmup_s: float, plan: Iterable[Phase]
) -> list[Pacer]:
    """The warm-up at the base rate, then one pacer per phase; request numbers continue
    from one phase to the next."""
    out = [Pacer(f"{name}-warmup", rate, fire, t0, -warmup_s, 0.0)]
    first = int(warmup_s * rate)
    for phase in plan:
        phase_rate = rate * phase.factor
        out.append(
            Pacer(
                f"{name}-{phase.name}",
                phase_rate,
                _shifted(fire, first),
                t0,
                phase.start,
                phase.end,
            )
        )
        first += int((phase.end - phase.start) * phase_rate)
    return out


def _shifted(fire: Fire, first: int) -> Fire:
    def shifted(i: int, scheduled: float) -> None:
        fire(first + i, scheduled)

    return shifted


def _ms(seconds: list[float]) -> tuple[float, float]:
    if not seconds:
        return float("nan"), float("nan")
    p50, p99 = np.percentile(np.asarray(seconds) * 1000, [50, 99])
    return float(p50), float(p99)


def report(outcomes: Iterable[Outcome], plan: list[Phase]) -> dict[str, Any]:
    everything = [o for o in outcomes if o.scheduled >= 0]
    items = [o for o in everything if o.op in MEASURED]
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for phase in plan:
        length = phase.end - phase.start
        for op in MEASURED:
            inside = [o for o in items if o.op == op and phase.start <= o.scheduled < phase.end]
            served = [o.seconds for o in inside if o.error is None]
            refused = [o for o in inside if _refused(o)]
            p50, p99 = _ms(served)
            rows.setdefault(op, {})[phase.name] = {
                "offered_per_s": len(inside) / length,
                "served_per_s": len(served) / length,
                "refused_per_s": len(refused) / length,
                "other_errors": len(inside) - len(served) - len(refused),
                "p50_ms": p50,
                "p99_ms": p99,
            }
    after = plan[-1]
    recovery_s, recovery_why = _recovery(items, plan[0], after.start)
    goodput = {
        op: _share(rows[op]["overload"]["served_per_s"], rows[op]["base"]["served_per_s"])
        for op in rows
    }
    others = [o for o in everything if o.error and not _refused(o)]
    ops = {o.op for o in everything}
    return {
        "phases": [dataclasses.asdict(p) for p in plan],
        "by_op": rows,
        "goodput_share": goodput,
        "recovery_s": recovery_s,
        "recovery_last_window": recovery_why,
        "refusals_after_drop": _refusals_after(items, after.start),
        "refusals_without_hint": sum(1 for o in everything if "no-hint" in (o.error or "")),
        "other_error_examples": sorted({o.error for o in others})[:5],
        "other_error_examples_by_op": {
            op: sorted({o.error for o in others if o.op == op}) for op in ops
        },
        "other_errors": {op: sum(1 for o in others if o.op == op) for op in ops},
    }


def _refused(o: Outcome) -> bool:
    return o.error is not None and o.error.startswith(REFUSED_PREFIX)


def _refusals_after(items: list[Outcome], drop: float) -> list[dict[str, Any]]:
    """The refusals of requests scheduled after the load dropped, counted by operation,
    second after the drop and reason: what kept the recovery from being immediate."""
    counts: dict[tuple[str, int, str], int] = {}
    for o in items:
        if o.scheduled >= drop and _refused(o):
            key = (o.op, int(o.scheduled - drop), (o.error or "").removeprefix(REFUSED_PREFIX))
            counts[key] = counts.get(key, 0) + 1
    return [
        {"op": op, "second": second, "error": error, "count": count}
        for (op, second, error), count in sorted(counts.items(), key=lambda kv: kv[0][1])
    ]


def _share(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _windows(
    items: list[Outcome], start: float, end: float
) -> dict[tuple[str, int], list[Outcome]]:
    """The requests scheduled in [start, end), by operation and ``RECOVERY_WINDOW_S``
    window from ``start``."""
    windows: dict[tuple[str, int], list[Outcome]] = {}
    for o in items:
        if start <= o.scheduled < end:
            windows.setdefault((o.op, int((o.scheduled - start) // RECOVERY_WINDOW_S)), []).append(
                o
            )
    return windows


def _window_p99s(windows: dict[tuple[str, int], list[Outcome]]) -> dict[str, float]:
    """Each operation's slowest window: the highest p99 of its windows' served requests."""
    slowest: dict[str, float] = {}
    for (op, _), inside in windows.items():
        served = [o.seconds for o in inside if o.error is None]
        if served:
            slowest[op] = max(slowest.get(op, 0.0), _ms(served)[1])
    return slowest


def _recovery(items: list[Outcome], base: Phase, drop: float) -> tuple[float, str | None]:
    """Seconds from ``drop`` to the end of the last ``RECOVERY_WINDOW_S`` window after it
    in which an operation had a refusal, or a p99 of its served requests above twice that
    of its slowest window in the base phase (0: none), and what that window was.

    Windows, not single requests: on a shared machine one late request says little, a
    window's p99 says whether the service is still behind. The bar is the base phase's
    slowest window, not its p99 over the whole phase: a window of 25 actions has a p99
    that is its slowest request, and one such window in the base phase is as slow as the
    slowest after the drop with nothing behind (a run with no refusal and the after
    phase's p99 at 1.5 times the base phase's read as 100 s to recover by the older bar)."""
    bar = _window_p99s(_windows(items, base.start, base.end))
    behind: list[tuple[float, str | None]] = [(0.0, None)]
    for (op, index), inside in _windows(items, drop, float("inf")).items():
        served = [o.seconds for o in inside if o.error is None]
        refused = sum(1 for o in inside if _refused(o))
        p99 = _ms(served)[1] if served else 0.0
        limit_ms = 2 * bar.get(op, 0.0)
        if refused or p99 > limit_ms:
            end = (index + 1) * RECOVERY_WINDOW_S
            why = f"{op} {end - RECOVERY_WINDOW_S:.0f}-{end:.0f} s after the drop: " + (
                f"{refused} refused" if refused else f"p99 {p99:.0f} ms > {limit_ms:.0f} ms"
            )
            behind.append((end, why))
    return max(behind, key=lambda b: b[0])


def print_overload(r: dict[str, Any], p: Callable[[str], None] = print) -> None:
    plan = r["phases"]
    p(
        "overload: "
        + ", then ".join(
            f"{ph['factor']:g}x for {ph['end'] - ph['start']:.0f} s ({ph['name']})" for ph in plan
        )
    )
    p(
        f"{'operation':<14} {'phase':<9} {'offered/s':>9} {'served/s':>9} {'refused/s':>9} "
        f"{'other err':>9} {'p50 ms':>8} {'p99 ms':>8}"
    )
    for op, by_phase in r["by_op"].items():
        for name, row in by_phase.items():
            p(
                f"{op:<14} {name:<9} {row['offered_per_s']:>9.1f} {row['served_per_s']:>9.1f} "
                f"{row['refused_per_s']:>9.1f} {row['other_errors']:>9d} "
                f"{row['p50_ms']:>8.0f} {row['p99_ms']:>8.0f}"
            )
    shares = ", ".join(f"{op} {share:.2f}" for op, share in r["goodput_share"].items())
    p(f"goodput during the overload / base phase: {shares} (target >= 0.90)")
    p(
        f"recovery after the load dropped: {r['recovery_s']:.1f} s (target <= 10; the end of the "
        f"last {RECOVERY_WINDOW_S:g} s window with a refusal or a p99 over twice the base "
        f"phase's slowest window's); refusals without a retry hint: {r['refusals_without_hint']}"
    )
    if r["recovery_last_window"]:
        p(f"  that window: {r['recovery_last_window']}")
    for row in r["refusals_after_drop"][:20]:
        p(
            f"  refused {row['second']}-{row['second'] + 1} s after the drop: {row['count']} x "
            f"{row['op']} {row['error']}"
        )
    for example in r["other_error_examples"]:
        p(f"  other error: {example}")

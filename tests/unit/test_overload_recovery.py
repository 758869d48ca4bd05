"""The overload benchmark's recovery rule (bench/_overload.py): when the service is back to
what it did before the overload. Benchmarks print figures; this rule decides one of them,
so it is held here on made-up outcomes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from _open_loop import Outcome  # noqa: E402
from _overload import REFUSED_PREFIX, phases, report  # noqa: E402

PLAN = phases(60.0, 120.0, 120.0, 3.0)
DROP = 180.0


def _steady(start: float, end: float, seconds: float, rate: float = 5.0) -> list[Outcome]:
    count = int((end - start) * rate)
    return [Outcome("action.submit", start + i / rate, seconds, None) for i in range(count)]


def test_a_window_no_slower_than_the_base_phases_slowest_is_recovered() -> None:
    base = _steady(0, 60, 0.012)
    base[40] = Outcome("action.submit", base[40].scheduled, 0.045, None)  # one slow window
    after = _steady(DROP, 300, 0.012)
    after[500] = Outcome("action.submit", after[500].scheduled, 0.080, None)  # < 2 x 45 ms
    result = report(base + _steady(60, DROP, 0.020, 15.0) + after, PLAN)
    assert result["recovery_s"] == 0.0
    assert result["recovery_last_window"] is None


def test_a_window_twice_as_slow_as_any_base_window_is_behind() -> None:
    base = _steady(0, 60, 0.012)
    after = _steady(DROP, 300, 0.012)
    after[60] = Outcome("action.submit", after[60].scheduled, 0.100, None)  # 12 s after
    result = report(base + after, PLAN)
    assert result["recovery_s"] == 15.0
    assert result["recovery_last_window"].startswith("action.submit 10-15 s after the drop")


def test_a_refusal_after_the_drop_is_behind_whatever_its_speed() -> None:
    after = _steady(DROP, 300, 0.012)
    after[110] = Outcome("action.submit", after[110].scheduled, 0.001, REFUSED_PREFIX + "x")
    result = report(_steady(0, 60, 0.012) + after, PLAN)
    assert result["recovery_s"] == 25.0
    assert "1 refused" in result["recovery_last_window"]


def test_refusals_after_the_drop_are_listed_by_second_and_reason() -> None:
    why = "SERVICE_OVERLOADED retry_after_ms=100 (it could not start in time)"
    after = _steady(DROP, 300, 0.012)
    for i in (5, 6, 40):  # 1.0 s, 1.2 s and 8.0 s after the drop
        after[i] = Outcome("action.submit", after[i].scheduled, 0.001, REFUSED_PREFIX + why)
    during = [Outcome("action.submit", 100.0, 0.001, REFUSED_PREFIX + why)]  # not listed
    rows = report(_steady(0, 60, 0.012) + during + after, PLAN)["refusals_after_drop"]
    assert rows == [
        {"op": "action.submit", "second": 1, "error": why, "count": 2},
        {"op": "action.submit", "second": 8, "error": why, "count": 1},
    ]


def test_the_other_errors_of_an_operation_are_its_examples_not_its_refusals() -> None:
    after = _steady(DROP, 300, 0.012)
    after[3] = Outcome("action.submit", after[3].scheduled, 0.001, REFUSED_PREFIX + "x")
    after[4] = Outcome("action.submit", after[4].scheduled, 2.0, "partial answer: coverage 0.75")
    result = report(_steady(0, 60, 0.012) + after, PLAN)
    assert result["other_errors"]["action.submit"] == 1
    assert result["other_error_examples_by_op"]["action.submit"] == [
        "partial answer: coverage 0.75"
    ]

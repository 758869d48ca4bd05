"""The circuit breaker on a fake clock: when it opens, how it probes, when it closes."""

from __future__ import annotations

import pytest

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach.policy.breaker import BreakerPolicy, CircuitBreaker


class FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Harness:
    """A breaker with the default numbers, its clock and the transitions it reported."""

    def __init__(self, **kwargs: float) -> None:
        self.clock = FakeClock()
        self.changes: list[tuple[str, str]] = []
        self.breaker = CircuitBreaker(
            **kwargs,  # type: ignore[arg-type]
            clock=self.clock,
            on_change=lambda old, new: self.changes.append((old, new)),
        )

    def calls(self, *outcomes: bool) -> None:
        """Calls that were let through, reported one after the other."""
        for ok in outcomes:
            assert self.breaker.before_call() == 0.0
            self.breaker.record(ok)

    def trip(self) -> None:
        self.calls(*[False] * 20)
        assert self.breaker.state == "open"


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_a_new_breaker_is_closed(h: Harness) -> None:
    assert h.breaker.state == "closed"
    assert h.breaker.before_call() == 0.0
    assert h.breaker.policy == BreakerPolicy()


def test_19_failures_do_not_open_it_but_the_20th_does(h: Harness) -> None:
    h.calls(*[False] * 19)
    assert h.breaker.state == "closed"
    assert h.changes == []
    h.calls(False)
    assert h.breaker.state == "open"
    assert h.changes == [("closed", "open")]


def test_11_failures_in_20_samples_open_it(h: Harness) -> None:
    h.calls(*[True] * 9, *[False] * 10)
    assert h.breaker.state == "closed"  # 10 of 19: still below the minimum of samples
    h.calls(False)
    assert h.breaker.state == "open"


def test_exactly_half_failing_keeps_it_closed(h: Harness) -> None:
    h.calls(*[True] * 10, *[False] * 10)
    assert h.breaker.state == "closed"  # 10 of 20
    h.calls(*[True, False] * 10)  # 10 of 21, 11 of 22, … 20 of 40: never above half
    assert h.breaker.state == "closed"
    h.calls(False)  # 21 of 41
    assert h.breaker.state == "open"


def test_old_outcomes_age_out_of_the_window(h: Harness) -> None:
    h.calls(*[False] * 19)
    h.clock.advance(10.001)
    h.calls(False)
    assert h.breaker.state == "closed"  # the 19 are more than 10 s old: 1 failure of 1
    h.calls(*[False] * 18)
    assert h.breaker.state == "closed"
    h.calls(False)  # 20 recent failures
    assert h.breaker.state == "open"


def test_an_outcome_exactly_window_s_old_still_counts(h: Harness) -> None:
    h.calls(*[False] * 19)
    h.clock.advance(10.0)
    h.calls(False)
    assert h.breaker.state == "open"


def test_a_steady_trickle_of_failures_below_the_minimum_never_opens_it(h: Harness) -> None:
    # One failure every 0.6 s: at most 17 in any 10 s window.
    for _ in range(1000):
        h.calls(False)
        h.clock.advance(0.6)
    assert h.changes == []
    # Every 0.5 s: 21 in a window, and all of them failures.
    h2 = Harness()
    for _ in range(25):
        if h2.breaker.state == "open":
            break
        h2.calls(False)
        h2.clock.advance(0.5)
    assert h2.changes == [("closed", "open")]


def test_mostly_successful_traffic_with_a_burst_of_failures() -> None:
    h = Harness()
    for _ in range(100):  # 20 % failures for 100 s
        h.calls(True, True, True, True, False)
        h.clock.advance(1.0)
    assert h.breaker.state == "closed"
    h.calls(*[False] * 30)  # the last 10 s: 40 ok, 10 + 30 failed
    assert h.breaker.state == "closed"
    h.calls(False)  # 41 failed of 81
    assert h.breaker.state == "open"


def test_an_open_breaker_says_how_long_to_wait(h: Harness) -> None:
    h.trip()
    assert h.breaker.before_call() == pytest.approx(30.0)
    h.clock.advance(12.0)
    assert h.breaker.before_call() == pytest.approx(18.0)
    h.clock.advance(17.9)
    assert h.breaker.state == "open"
    assert h.breaker.before_call() == pytest.approx(0.1)


def test_it_turns_half_open_after_30_seconds(h: Harness) -> None:
    h.trip()
    h.clock.advance(30.0)
    assert h.breaker.state == "half_open"
    assert h.changes == [("closed", "open"), ("open", "half_open")]


def test_half_open_lets_exactly_5_probes_through(h: Harness) -> None:
    h.trip()
    h.clock.advance(30.0)
    assert [h.breaker.before_call() for _ in range(5)] == [0.0] * 5
    for _ in range(3):
        assert h.breaker.before_call() == 1.0  # all probes out: ask again shortly
    h.clock.advance(5.0)
    assert h.breaker.before_call() == 1.0  # the clock alone changes nothing
    assert h.breaker.state == "half_open"


def test_5_successful_probes_close_it_with_a_fresh_window(h: Harness) -> None:
    h.trip()
    h.clock.advance(30.0)
    for _ in range(5):
        assert h.breaker.before_call() == 0.0
    for _ in range(4):
        h.breaker.record(True)
        assert h.breaker.state == "half_open"
    h.breaker.record(True)
    assert h.breaker.state == "closed"
    assert h.changes == [("closed", "open"), ("open", "half_open"), ("half_open", "closed")]
    # Nothing from before carries over: it takes 20 new samples to open it again.
    h.calls(*[False] * 19)
    assert h.breaker.state == "closed"
    h.calls(False)
    assert h.breaker.state == "open"


def test_closing_forgets_outcomes_still_inside_the_window() -> None:
    h = Harness(open_s=1.0)  # the open period is shorter than the window
    h.trip()
    h.clock.advance(1.0)
    h.calls(True, True, True, True, True)
    assert h.breaker.state == "closed"
    h.calls(*[True] * 10, *[False] * 10)  # the 20 failures of 1 s ago are not counted
    assert h.breaker.state == "closed"
    h.calls(False)
    assert h.breaker.state == "open"


def test_probes_reported_one_at_a_time_close_it_too(h: Harness) -> None:
    h.trip()
    h.clock.advance(30.0)
    h.calls(True, True, True, True, True)
    assert h.breaker.state == "closed"


def test_one_failed_probe_reopens_it_for_another_30_seconds(h: Harness) -> None:
    h.trip()
    h.clock.advance(30.0)
    h.calls(True, True, True, True)
    h.clock.advance(2.0)
    h.calls(False)
    assert h.breaker.state == "open"
    assert h.breaker.before_call() == pytest.approx(30.0)
    assert h.changes[-2:] == [("open", "half_open"), ("half_open", "open")]
    h.clock.advance(30.0)
    assert h.breaker.state == "half_open"
    assert [h.breaker.before_call() for _ in range(6)] == [0.0] * 5 + [1.0]


def test_the_first_probe_failing_reopens_it_at_once_and_late_answers_are_ignored(
    h: Harness,
) -> None:
    h.trip()
    h.clock.advance(30.0)
    for _ in range(5):
        h.breaker.before_call()
    h.breaker.record(False)
    assert h.breaker.state == "open"
    for _ in range(4):  # the other probes come back fine, too late
        h.breaker.record(True)
    assert h.breaker.state == "open"
    assert h.changes == [("closed", "open"), ("open", "half_open"), ("half_open", "open")]


def test_outcomes_of_calls_from_before_it_opened_are_ignored(h: Harness) -> None:
    for _ in range(25):
        assert h.breaker.before_call() == 0.0  # 25 calls in flight
    for _ in range(20):
        h.breaker.record(False)
    assert h.breaker.state == "open"
    h.breaker.record(False)
    h.breaker.record(True)
    assert h.breaker.before_call() == pytest.approx(30.0)  # not extended, not shortened
    h.clock.advance(30.0)
    for _ in range(5):  # still reporting, with no probe handed out: not probes
        h.breaker.record(True)
    assert h.breaker.state == "half_open"
    assert h.changes == [("closed", "open"), ("open", "half_open")]


def test_probe_permits_that_never_report_back_are_handed_out_again(h: Harness) -> None:
    h.trip()
    h.clock.advance(30.0)
    for _ in range(5):
        assert h.breaker.before_call() == 0.0
    h.breaker.record(True)
    h.breaker.record(True)  # three probes are never heard of again (cancelled)
    h.clock.advance(29.5)
    assert h.breaker.before_call() == pytest.approx(0.5)  # the hint stops at their expiry
    h.clock.advance(0.5)
    assert [h.breaker.before_call() for _ in range(4)] == [0.0, 0.0, 0.0, 1.0]
    h.calls()
    for _ in range(3):
        h.breaker.record(True)
    assert h.breaker.state == "closed"


def test_the_numbers_are_configurable() -> None:
    h = Harness(window_s=1.0, failure_rate=0.0, min_samples=1, open_s=5.0, half_open_probes=1)
    h.calls(False)
    assert h.breaker.state == "open"
    assert h.breaker.before_call() == pytest.approx(5.0)
    h.clock.advance(5.0)
    assert h.breaker.before_call() == 0.0
    assert h.breaker.before_call() == 1.0
    h.breaker.record(True)
    assert h.breaker.state == "closed"


def test_from_policy_and_from_table() -> None:
    policy = BreakerPolicy.from_table({"min_samples": 3, "open_s": 2}, "channels.sms.breaker")
    assert policy == BreakerPolicy(min_samples=3, open_s=2.0)
    clock = FakeClock()
    changes: list[tuple[str, str]] = []
    breaker = CircuitBreaker.from_policy(
        policy, clock=clock, on_change=lambda old, new: changes.append((old, new))
    )
    assert breaker.policy == policy
    for ok in (False, False, False):
        breaker.before_call()
        breaker.record(ok)
    assert breaker.before_call() == pytest.approx(2.0)
    assert changes == [("closed", "open")]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"windows": 10}, "b.windows: unknown setting"),
        ({"window_s": 0}, "b.window_s: must be a positive, finite number"),
        ({"failure_rate": 1.0}, "b.failure_rate: must be a number at least 0 and below 1"),
        ({"min_samples": 0}, "b.min_samples: must be an integer of at least 1"),
        ({"min_samples": 20.0}, "b.min_samples: must be an integer"),
        ({"half_open_probes": 0}, "b.half_open_probes: must be an integer of at least 1"),
        ({"open_s": "30s"}, "b.open_s: must be a number, got '30s'"),
    ],
)
def test_a_bad_table_names_the_key_and_the_rule(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BreakerPolicy.from_table(table, "b")
    assert str(caught.value).startswith(message), str(caught.value)


def test_bad_constructor_numbers_are_refused() -> None:
    with pytest.raises(ValueError, match="half_open_probes"):
        CircuitBreaker(half_open_probes=0)
    with pytest.raises(ValueError, match="failure_rate"):
        CircuitBreaker(failure_rate=-0.1)

"""Alert thresholds from a channel's own history (``reachstore_server/reach/baseline.py``),
judged on synthetic histories: seven days of one hour of the day, then the hour now."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach import baseline as bl
from reachstore_server.reach import states as st

NOW = dt.datetime(2026, 12, 6, 14, 30, tzinfo=dt.UTC)
POLICY = bl.BaselinePolicy()


def _hour(
    days_back: int,
    total: int,
    failed: int,
    *,
    unknown: int = 0,
    latency_ms: float = 200.0,
    kind: str = st.TECHNICAL,
    channel: str = "hook",
) -> tuple[list[bl.Finished], list[bl.Entered]]:
    """``total`` actions finished in the hour before NOW, ``days_back`` days earlier:
    ``failed`` of them failed, ``unknown`` of their sends went to UNKNOWN."""
    end = NOW - dt.timedelta(days=days_back)
    finished, entered = [], []
    for i in range(total):
        done = end - dt.timedelta(minutes=59 * (i + 1) / (total + 1))
        state = st.FAILED if i < failed else st.SUCCEEDED
        created = done - dt.timedelta(milliseconds=latency_ms)
        finished.append(bl.Finished("t1", channel, created, done, state, kind))
        entered.append(bl.Entered("t1", channel, created, st.SUBMITTING))
        if i < unknown:
            entered.append(bl.Entered("t1", channel, done, st.UNKNOWN))
    return finished, entered


def _history(
    failure_counts: list[int], now_failed: int, total: int = 100, **now: object
) -> list[bl.Judgement]:
    finished: list[bl.Finished] = []
    entered: list[bl.Entered] = []
    for day, failed in enumerate(failure_counts, 1):
        f, e = _hour(day, total, failed)
        finished += f
        entered += e
    f, e = _hour(0, total, now_failed, **now)  # type: ignore[arg-type]
    return bl.judge(NOW, POLICY, finished + f, entered + e)


def _signal(judgements: list[bl.Judgement], signal: str) -> bl.Judgement:
    [found] = [j for j in judgements if j.signal == signal]
    return found


def test_a_channel_that_always_fails_a_fifth_is_not_alerting_at_its_usual_rate() -> None:
    judged = _signal(_history([18, 22, 20, 19, 21, 20, 20], 22), bl.FAILURE_RATE)
    assert judged.mean == pytest.approx(0.20)
    assert judged.threshold > 0.22 and not judged.alerting
    assert judged.history_days == 7 and judged.why_not == ""


def test_past_three_standard_deviations_of_its_own_history_it_alerts() -> None:
    history = [18, 22, 20, 19, 21, 20, 20]
    judged = _signal(_history(history, 40), bl.FAILURE_RATE)
    mean = sum(history) / 700
    spread = (sum((h / 100 - mean) ** 2 for h in history) / 7) ** 0.5
    assert judged.stddev == pytest.approx(spread)
    assert judged.threshold == pytest.approx(mean + 3 * spread)
    assert judged.current == pytest.approx(0.40) and judged.alerting
    # Just under the threshold: not alerting.
    below = _signal(_history(history, int(judged.threshold * 100)), bl.FAILURE_RATE)
    assert not below.alerting


def test_the_same_rate_alerts_on_a_channel_that_never_fails() -> None:
    judged = _signal(_history([0] * 7, 5), bl.FAILURE_RATE)
    # No deviation in the history: the floor (1 point) keeps one failure from alerting.
    assert judged.stddev == 0 and judged.threshold == pytest.approx(3 * bl.RATE_FLOOR)
    assert judged.alerting
    assert not _signal(_history([0] * 7, 2), bl.FAILURE_RATE).alerting


def test_too_few_samples_now_or_in_the_past_is_said_not_judged() -> None:
    thin = bl.judge(NOW, POLICY, *_hour(0, 10, 10))
    judged = _signal(thin, bl.FAILURE_RATE)
    assert judged.current == 1.0 and not judged.alerting
    assert "fewer than 20" in judged.why_not
    finished, entered = _hour(0, 100, 90)
    for day in (1, 2):
        f, e = _hour(day, 100, 1)
        finished += f
        entered += e
    short = _signal(bl.judge(NOW, POLICY, finished, entered), bl.FAILURE_RATE)
    assert not short.alerting and short.history_days == 2 and "fewer than 3" in short.why_not


def test_unknown_rate_and_latency_are_judged_each_against_its_own_past() -> None:
    finished: list[bl.Finished] = []
    entered: list[bl.Entered] = []
    rng = random.Random(7)
    for day in range(1, 8):
        f, e = _hour(day, 100, 0, unknown=rng.randint(1, 3), latency_ms=rng.uniform(180, 220))
        finished += f
        entered += e
    f, e = _hour(0, 100, 0, unknown=15, latency_ms=900)
    judged = bl.judge(NOW, POLICY, finished + f, entered + e)
    unknown = _signal(judged, bl.UNKNOWN_RATE)
    latency = _signal(judged, bl.LATENCY_P99)
    assert unknown.alerting and unknown.current == pytest.approx(0.15)
    assert unknown.failure_kind == st.TECHNICAL
    assert latency.alerting and latency.current == pytest.approx(900, rel=0.01)
    assert 180 <= latency.mean <= 220


def test_hours_of_other_times_of_day_do_not_count() -> None:
    finished, entered = _hour(0, 100, 50)
    # Heavy failures three hours earlier every day: another hour of the day.
    for day in range(1, 8):
        for row in _hour(day, 100, 0)[0]:
            finished.append(three_hours_earlier(row))
    judged = _signal(bl.judge(NOW, POLICY, finished, entered), bl.FAILURE_RATE)
    assert judged.history_days == 0


def three_hours_earlier(row: bl.Finished) -> bl.Finished:
    shifted = dt.timedelta(hours=3)
    return bl.Finished(
        row.tenant,
        row.channel,
        row.created_at - shifted,
        row.finished_at - shifted,
        st.FAILED,
        row.failure_kind,
    )


def test_a_failure_rate_alert_carries_the_kind_of_most_of_its_failures() -> None:
    finished: list[bl.Finished] = []
    entered: list[bl.Entered] = []
    for day in range(1, 8):
        f, e = _hour(day, 100, 1)
        finished += f
        entered += e
    f, e = _hour(0, 100, 40, kind=st.BUSINESS)
    judged = _signal(bl.judge(NOW, POLICY, finished + f, entered + e), bl.FAILURE_RATE)
    assert judged.alerting and judged.failure_kind == st.BUSINESS


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"sigmas": 0.5}, "engine.baseline.sigmas"),
        ({"days": 1}, "engine.baseline.days"),
        ({"min_samples": 0}, "engine.baseline.min_samples"),
        ({"min_samples": 2.5}, "engine.baseline.min_samples"),
        ({"days": 3, "min_history_days": 5}, "engine.baseline.min_history_days"),
        ({"window": 3}, "engine.baseline.window"),
    ],
)
def test_each_policy_mistake_names_its_key(table: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        bl.BaselinePolicy.from_table(table, "engine.baseline")
    assert named in str(caught.value)


def test_the_policy_defaults_are_seven_days_three_sigmas_twenty_samples() -> None:
    policy = bl.BaselinePolicy.from_table({}, "engine.baseline")
    assert (policy.days, policy.sigmas, policy.min_samples, policy.min_history_days) == (
        7,
        3.0,
        20,
        3,
    )

"""Alert thresholds from a channel's own history (``reachstore_server/reach/baseline.py``),
judged on synthetic histories: seven days of one hour of the day, then the hour now."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach import baseline as bl
from reachstore_server.reach import states as st
from reachstore_server.reach.config import parse_config

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
        action = f"{channel}-{days_back}-{kind}-{i}"
        entered.append(bl.Entered("t1", channel, created, st.SUBMITTING, action))
        if i < unknown:
            entered.append(bl.Entered("t1", channel, done, st.UNKNOWN, action))
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
    judged = _signal(_history([18, 22, 20, 19, 21, 20, 20], 22), bl.TECHNICAL_FAILURE_RATE)
    assert judged.mean == pytest.approx(0.20)
    assert judged.threshold > 0.22 and not judged.alerting
    assert judged.history_days == 7 and judged.why_not == ""


def test_past_three_deviations_of_its_own_history_it_alerts() -> None:
    history = [18, 22, 20, 19, 21, 20, 20]
    judged = _signal(_history(history, 40), bl.TECHNICAL_FAILURE_RATE)
    # The usual value is the median, the deviation 1.4826 median absolute deviations; here
    # the noise of a 20 % rate over 100 samples (4 points) is larger and is used instead.
    assert judged.mean == pytest.approx(0.20)
    assert judged.stddev == pytest.approx(bl.MAD_TO_SIGMA * 0.01)
    noise = (0.2 * 0.8 / 100) ** 0.5
    assert judged.threshold == pytest.approx(0.20 + 3 * noise)
    assert judged.current == pytest.approx(0.40) and judged.alerting
    # Just under the threshold: not alerting.
    below = _signal(_history(history, int(judged.threshold * 100)), bl.TECHNICAL_FAILURE_RATE)
    assert not below.alerting


def test_a_wide_history_sets_its_threshold_by_its_own_deviation() -> None:
    history = [10, 30, 15, 25, 20, 22, 18]
    judged = _signal(_history(history, 40), bl.TECHNICAL_FAILURE_RATE)
    assert judged.mean == pytest.approx(0.20)
    assert judged.stddev == pytest.approx(bl.MAD_TO_SIGMA * 0.05)
    assert judged.threshold == pytest.approx(0.20 + 3 * bl.MAD_TO_SIGMA * 0.05)
    assert not judged.alerting
    # Wider still, the threshold stops halfway from the usual rate to everything failing.
    wide = _signal(_history([5, 35, 10, 30, 20, 25, 15], 40), bl.TECHNICAL_FAILURE_RATE)
    assert wide.threshold == pytest.approx((1 + 0.20) / 2) and not wide.alerting


def test_the_same_rate_alerts_on_a_channel_that_never_fails() -> None:
    judged = _signal(_history([0] * 7, 5), bl.TECHNICAL_FAILURE_RATE)
    # No deviation in the history: the floor (1 point) keeps one failure from alerting.
    assert judged.stddev == 0 and judged.threshold == pytest.approx(3 * bl.RATE_FLOOR)
    assert judged.alerting
    assert not _signal(_history([0] * 7, 2), bl.TECHNICAL_FAILURE_RATE).alerting


def test_too_few_samples_now_or_in_the_past_is_said_not_judged() -> None:
    thin = bl.judge(NOW, POLICY, *_hour(0, 10, 10))
    judged = _signal(thin, bl.TECHNICAL_FAILURE_RATE)
    assert judged.current == 1.0 and not judged.alerting
    assert "fewer than 20" in judged.why_not
    finished, entered = _hour(0, 100, 90)
    for day in (1, 2):
        f, e = _hour(day, 100, 1)
        finished += f
        entered += e
    short = _signal(bl.judge(NOW, POLICY, finished, entered), bl.TECHNICAL_FAILURE_RATE)
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
    judged = _signal(bl.judge(NOW, POLICY, finished, entered), bl.TECHNICAL_FAILURE_RATE)
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


def test_a_business_failure_rate_alert_is_the_business() -> None:
    finished: list[bl.Finished] = []
    entered: list[bl.Entered] = []
    for day in range(1, 8):
        f, e = _hour(day, 100, 1)
        finished += f
        entered += e
    f, e = _hour(0, 100, 40, kind=st.BUSINESS)
    judged = _signal(bl.judge(NOW, POLICY, finished + f, entered + e), bl.BUSINESS_FAILURE_RATE)
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


# --- attacks: each of these broke the judgement before its fix -------------------------


def test_a_technical_spike_on_a_channel_of_routine_business_refusals_is_technical() -> None:
    """A channel refuses 30 % of requests every day for business reasons; today 30 % more
    fail technically. The spike is operations', judged against the technical history."""
    finished: list[bl.Finished] = []
    entered: list[bl.Entered] = []
    for day in range(1, 8):
        f, e = _hour(day, 100, 30, kind=st.BUSINESS)
        finished += f
        entered += e
    f, e = _hour(0, 100, 30, kind=st.BUSINESS)
    f2, e2 = _hour(0, 100, 30, kind=st.TECHNICAL, channel="hook")
    judged = bl.judge(NOW, POLICY, finished + f + f2, entered + e + e2)
    technical = _signal(judged, bl.TECHNICAL_FAILURE_RATE)
    business = _signal(judged, bl.BUSINESS_FAILURE_RATE)
    assert technical.alerting and technical.failure_kind == st.TECHNICAL
    assert not business.alerting and business.failure_kind == st.BUSINESS


def test_one_failure_in_twenty_five_on_a_perfect_history_is_noise() -> None:
    judged = _signal(_history([0] * 7, 1, total=25), bl.TECHNICAL_FAILURE_RATE)
    assert judged.current == pytest.approx(0.04)
    assert not judged.alerting, judged
    # A real break of a perfect channel still alerts.
    assert _signal(_history([0] * 7, 8, total=25), bl.TECHNICAL_FAILURE_RATE).alerting


def test_one_earlier_outage_does_not_hide_a_full_outage() -> None:
    judged = _signal(_history([0, 0, 100, 0, 0, 0, 0], 100), bl.TECHNICAL_FAILURE_RATE)
    assert judged.threshold < 1.0 and judged.alerting, judged


def test_a_failure_rate_never_needs_more_than_everything_to_alert() -> None:
    """A history spread so wide that mean + 3 sigma passes 100 %: a full outage alerts."""
    judged = _signal(_history([0, 90, 10, 80, 5, 70, 20], 100), bl.TECHNICAL_FAILURE_RATE)
    assert judged.threshold < 1.0 and judged.alerting, judged


def test_skipped_actions_are_not_the_channels_failures() -> None:
    """Actions skipped because an earlier step failed never reached the channel."""
    finished: list[bl.Finished] = []
    entered: list[bl.Entered] = []
    for day in range(0, 8):
        f, e = _hour(day, 100, 0)
        finished += f
        entered += e
    end = NOW - dt.timedelta(minutes=5)
    finished += [bl.Finished("t1", "hook", end, end, st.SKIPPED, "") for _ in range(60)]
    judged = bl.judge(NOW, POLICY, finished, entered)
    for signal in (bl.TECHNICAL_FAILURE_RATE, bl.BUSINESS_FAILURE_RATE):
        assert not _signal(judged, signal).alerting, _signal(judged, signal)


def test_the_unknown_rate_counts_each_action_once() -> None:
    """One action in 40 went to UNKNOWN, and was looked up four times, each look-up
    returning it to UNKNOWN: the rate is 1/40, not 4/40."""
    finished, entered = _hour(0, 40, 0)
    first = entered[0]
    for minutes in (1, 2, 3):
        entered.append(
            bl.Entered(
                "t1", "hook", first.at + dt.timedelta(minutes=minutes), st.UNKNOWN, first.action_id
            )
        )
    entered.append(bl.Entered("t1", "hook", first.at, st.UNKNOWN, first.action_id))
    judged = _signal(bl.judge(NOW, POLICY, finished, entered), bl.UNKNOWN_RATE)
    assert judged.current == pytest.approx(1 / 40)


def test_the_reach_file_sets_the_baseline() -> None:
    config = parse_config(
        {"engine": {"baseline": {"days": 14, "sigmas": 4, "min_samples": 50}}, "channels": {}}
    )
    assert (config.baseline.days, config.baseline.sigmas, config.baseline.min_samples) == (
        14,
        4.0,
        50,
    )
    with pytest.raises(ConfigError, match=r"engine\.baseline\.sigmas"):
        parse_config({"engine": {"baseline": {"sigmas": 0}}, "channels": {}})

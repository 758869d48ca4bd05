"""Retry, poll and pending policies: schedules, jitter bounds, budgets and their settings."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach.policy.backoff import (
    PendingPolicy,
    PolicyValueError,
    PollPolicy,
    RetryPolicy,
)

DRAWS = 2000


def test_defaults_are_the_documented_numbers() -> None:
    assert RetryPolicy() == RetryPolicy(0.5, 30.0, 4, 0.3, 5.0, 300.0, 6, 600.0)
    assert PollPolicy() == PollPolicy(30.0, 3600.0, 5, 0.3)
    assert PendingPolicy() == PendingPolicy(2.0, 120.0)


def test_delays_double_from_half_a_second_up_to_the_cap() -> None:
    policy = RetryPolicy(jitter=0.0)
    rng = random.Random(1)
    delays = [policy.delay(n, rng) for n in range(9)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


@pytest.mark.parametrize("retry_number", [0, 1, 2, 3, 6, 50])
def test_jitter_stays_within_30_percent_and_uses_the_whole_range(retry_number: int) -> None:
    policy = RetryPolicy()
    raw = min(0.5 * 2**retry_number, 30.0)
    rng = random.Random(retry_number)
    delays = [policy.delay(retry_number, rng) for _ in range(DRAWS)]
    assert all(raw * 0.7 <= d <= raw * 1.3 for d in delays)
    # Spread over the range, centred on the raw delay: jitter that barely moved would not
    # de-synchronise anything.
    assert min(delays) < raw * 0.72 and max(delays) > raw * 1.28
    assert statistics.fmean(delays) == pytest.approx(raw, rel=0.02)


def test_the_same_seed_gives_the_same_schedule() -> None:
    policy = RetryPolicy()
    first = [policy.delay(n, random.Random(7)) for n in range(4)]
    again = [policy.delay(n, random.Random(7)) for n in range(4)]
    assert first == again


def test_a_huge_retry_number_is_capped_without_overflow() -> None:
    assert RetryPolicy(jitter=0.0).delay(10_000, random.Random(0)) == 30.0
    assert PollPolicy(jitter=0.0).delay(10_000, random.Random(0)) == 3600.0


def test_a_negative_retry_number_is_a_bug() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        RetryPolicy().delay(-1, random.Random(0))


def test_rate_limited_delays_follow_their_own_longer_schedule() -> None:
    policy = RetryPolicy(jitter=0.0)
    rng = random.Random(0)
    delays = [policy.rate_limited_delay(n, None, rng) for n in range(8)]
    assert delays == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    jittered = RetryPolicy()
    for n in range(8):
        raw = min(5.0 * 2**n, 300.0)
        for _ in range(200):
            assert raw * 0.7 <= jittered.rate_limited_delay(n, None, rng) <= raw * 1.3


def test_retry_after_is_always_honoured() -> None:
    policy = RetryPolicy()
    rng = random.Random(3)
    # Longer than our own schedule: Retry-After wins, to the second.
    assert policy.rate_limited_delay(0, 120.0, rng) == 120.0
    assert policy.rate_limited_delay(0, 1000.0, rng) == 1000.0  # even beyond the cap
    # Shorter: our own (longer) delay still applies, never less than the hint.
    for n in range(6):
        assert policy.rate_limited_delay(n, 1.0, rng) >= 5.0 * 0.7 * 2 ** min(n, 5)
        assert policy.rate_limited_delay(n, 3.4, rng) >= 3.4


@pytest.mark.parametrize("hint", [None, 0.0, -5.0, math.nan])
def test_a_missing_or_meaningless_retry_after_is_ignored(hint: float | None) -> None:
    policy = RetryPolicy(jitter=0.0)
    assert policy.rate_limited_delay(2, hint, random.Random(0)) == 20.0


def test_retries_stop_after_max_retries() -> None:
    policy = RetryPolicy()
    assert [policy.should_retry(n, 0.0, 1.0) for n in range(6)] == [True] * 4 + [False] * 2


def test_rate_limited_retries_have_their_own_count() -> None:
    policy = RetryPolicy()
    answers = [policy.should_retry(n, 0.0, 1.0, rate_limited=True) for n in range(8)]
    assert answers == [True] * 6 + [False] * 2
    assert not RetryPolicy(max_retries=0).should_retry(0, 0.0, 0.5)


def test_the_deadline_stops_retries() -> None:
    policy = RetryPolicy()
    assert policy.should_retry(0, 590.0, 10.0)  # starts exactly at the deadline
    assert not policy.should_retry(0, 590.0, 10.001)
    assert not policy.should_retry(0, 600.5, 0.0)
    assert not policy.should_retry(0, 500.0, 120.0, rate_limited=True)


def run_until_refused(policy: RetryPolicy, rng: random.Random) -> tuple[int, float]:
    """An action failing every time, driven the way the executor drives it: the retries made
    and when the last one started."""
    elapsed, retries = 0.0, 0
    while policy.should_retry(retries, elapsed, delay := policy.delay(retries, rng)):
        elapsed += delay
        retries += 1
    return retries, elapsed


@pytest.mark.parametrize("seed", range(50))
def test_a_whole_retry_run_stays_within_both_budgets(seed: int) -> None:
    # With the default deadline four retries always fit: (0.5 + 1 + 2 + 4) · 1.3 < 600.
    retries, elapsed = run_until_refused(RetryPolicy(), random.Random(seed))
    assert retries == 4 and 7.5 * 0.7 <= elapsed <= 7.5 * 1.3
    retries, elapsed = run_until_refused(RetryPolicy(deadline_s=3.0), random.Random(seed))
    assert 2 <= retries <= 3 and elapsed <= 3.0


def test_a_tight_deadline_cuts_the_run_short() -> None:
    policy = RetryPolicy(jitter=0.0, deadline_s=3.0)
    # 0.5 + 1; the third retry (2 s more) would start at 3.5, past the deadline.
    assert run_until_refused(policy, random.Random(0)) == (2, 1.5)


def test_unknown_outcomes_are_rechecked_slowly() -> None:
    policy = PollPolicy(jitter=0.0)
    rng = random.Random(0)
    delays = [policy.delay(n, rng) for n in range(9)]
    assert delays == [30.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 3600.0, 3600.0]
    rng = random.Random(9)
    assert all(21.0 <= PollPolicy().delay(0, rng) <= 39.0 for _ in range(DRAWS))


def test_a_pending_outcome_stalls_after_the_timeout() -> None:
    short, long = PendingPolicy(), PendingPolicy(stall_timeout_s=1800.0)
    assert not short.stalled(120.0)
    assert short.stalled(120.001)
    assert not long.stalled(1799.0)
    assert long.stalled(1800.5)


# --- settings --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [RetryPolicy, PollPolicy, PendingPolicy])
def test_an_empty_table_gives_the_defaults(cls: Any) -> None:
    assert cls.from_table({}, "reach.x") == cls()


def test_a_table_sets_fields_and_integers_become_seconds() -> None:
    policy = RetryPolicy.from_table({"base_s": 1, "max_retries": 2, "jitter": 0}, "r")
    assert policy == RetryPolicy(base_s=1.0, max_retries=2, jitter=0.0)
    assert isinstance(policy.base_s, float) and isinstance(policy.jitter, float)
    poll = PollPolicy.from_table({"cap_s": 600, "max_polls": 0}, "p")
    assert (poll.cap_s, poll.max_polls) == (600.0, 0)
    pending = PendingPolicy.from_table({"stall_timeout_s": 1800}, "channels.slow.pending")
    assert pending.stall_timeout_s == 1800.0


@pytest.mark.parametrize(
    ("cls", "table", "message"),
    [
        (RetryPolicy, {"bogus": 1}, "reach.retry.bogus: unknown setting"),
        (RetryPolicy, {"base": 1}, "reach.retry.base: unknown setting (known: base_s, "),
        (RetryPolicy, {"base_s": "1"}, "reach.retry.base_s: must be a number, got '1'"),
        (RetryPolicy, {"base_s": True}, "reach.retry.base_s: must be a number, got True"),
        (RetryPolicy, {"max_retries": 2.0}, "reach.retry.max_retries: must be an integer"),
        (RetryPolicy, {"max_retries": False}, "reach.retry.max_retries: must be an integer"),
        (RetryPolicy, {"max_retries": -1}, "reach.retry.max_retries: must be an integer of at"),
        (RetryPolicy, {"base_s": 0}, "reach.retry.base_s: must be a positive, finite number"),
        (RetryPolicy, {"deadline_s": -3.0}, "reach.retry.deadline_s: must be a positive"),
        (RetryPolicy, {"cap_s": math.inf}, "reach.retry.cap_s: must be a positive, finite"),
        (RetryPolicy, {"cap_s": math.nan}, "reach.retry.cap_s: must be a positive, finite"),
        (RetryPolicy, {"jitter": 1.0}, "reach.retry.jitter: must be a number at least 0 and"),
        (RetryPolicy, {"jitter": -0.1}, "reach.retry.jitter: must be a number at least 0 and"),
        (RetryPolicy, {"cap_s": 0.25}, "reach.retry.cap_s: must be at least base_s (0.5)"),
        (
            RetryPolicy,
            {"rate_limited_base_s": 400},
            "reach.retry.rate_limited_cap_s: must be at least rate_limited_base_s (400.0)",
        ),
        (RetryPolicy, {"max_rate_limited": -2}, "reach.retry.max_rate_limited: must be an"),
        (PollPolicy, {"max_polls": -1}, "reach.retry.max_polls: must be an integer of at"),
        (PollPolicy, {"base_s": 7200}, "reach.retry.cap_s: must be at least base_s (7200.0)"),
        (PendingPolicy, {"poll_interval_s": 0}, "reach.retry.poll_interval_s: must be a posi"),
        (PendingPolicy, {"stall_timeout_s": 1}, "reach.retry.stall_timeout_s: must be at least"),
    ],
)
def test_a_bad_table_names_the_key_and_the_rule(
    cls: Any, table: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        cls.from_table(table, "reach.retry")
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_table_that_is_not_a_table_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^reach\.retry: must be a table"):
        RetryPolicy.from_table(5, "reach.retry")  # type: ignore[arg-type]


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(PolicyValueError, match=r"^jitter: must be a number at least 0"):
        RetryPolicy(jitter=1.5)
    with pytest.raises(ValueError, match=r"^max_polls: must be an integer"):
        PollPolicy(max_polls=1.5)  # type: ignore[arg-type]


def test_policies_are_frozen() -> None:
    with pytest.raises(AttributeError):
        RetryPolicy().base_s = 1.0  # type: ignore[misc]

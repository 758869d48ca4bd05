"""When to retry a send, when to re-check an UNKNOWN outcome, when a PENDING one has stalled.

Delays grow exponentially up to a cap and carry random jitter, so that the many actions a
provider outage failed at once do not all come back at the same instant and knock the
provider over again as it recovers. A 429 (rate limited) has its own, longer schedule: the
receiver said it is overloaded, and hammering it at the transient-error pace only extends
that. A retry is also bounded by an overall deadline, so an action never keeps retrying for
longer than anyone still cares about its outcome.

The policies are frozen dataclasses checked on construction, and readable from a TOML table
(``from_table``); the table reader here is shared with the breaker's policy.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar

from reachstore_server.common.config_errors import ConfigError

# ``2.0 ** n`` overflows past n = 1023; the cap is reached long before, so clamp the exponent.
_MAX_EXPONENT = 1000

P = TypeVar("P")


@dataclasses.dataclass(frozen=True)
class Rule:
    """What one policy field accepts: its type and its range. An integer field refuses 2.5
    (and ``true``: TOML booleans are not counts); a number field also takes an integer."""

    integer: bool
    text: str
    ok: Callable[[float], bool]


SECONDS = Rule(False, "must be a positive, finite number of seconds", lambda v: 0 < v < math.inf)
FRACTION = Rule(False, "must be a number at least 0 and below 1", lambda v: 0 <= v < 1)
COUNT = Rule(True, "must be an integer of at least 0", lambda v: v >= 0)
POSITIVE_COUNT = Rule(True, "must be an integer of at least 1", lambda v: v >= 1)


class PolicyValueError(ValueError):
    """A policy field out of its rule; ``from_table`` turns it into a ``ConfigError`` that
    names the TOML key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key, self.problem = key, problem


def check_fields(policy: object, rules: Mapping[str, Rule]) -> None:
    """Raises ``PolicyValueError`` for the first field of ``policy`` that breaks its rule."""
    for key, rule in rules.items():
        value = getattr(policy, key)
        if isinstance(value, bool) or not isinstance(value, int if rule.integer else int | float):
            kind = "an integer" if rule.integer else "a number"
            raise PolicyValueError(key, f"must be {kind}, got {value!r}")
        if not rule.ok(value):
            raise PolicyValueError(key, f"{rule.text}, got {value!r}")


def check_not_below(policy: object, key: str, floor_key: str) -> None:
    """A cap below its base would make the base meaningless: refused."""
    value, floor = getattr(policy, key), getattr(policy, floor_key)
    if value < floor:
        raise PolicyValueError(key, f"must be at least {floor_key} ({floor!r}), got {value!r}")


def load_table(cls: type[P], table: Mapping[str, Any], where: str, rules: Mapping[str, Rule]) -> P:
    """Builds ``cls`` from a TOML table whose keys are field names; a missing key keeps the
    default. Any mistake raises ``ConfigError("<where>.<key>: <rule>")``, so the operator sees
    exactly which line of which file to fix."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: must be a table, got {table!r}")
    values: dict[str, Any] = {}
    for key, value in table.items():
        rule = rules.get(key)
        if rule is None:
            known = ", ".join(sorted(rules))
            raise ConfigError(f"{where}.{key}: unknown setting (known: {known})")
        # TOML writes 5 for 5.0; a number field stores it as a float all the same.
        if not rule.integer and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        values[key] = value
    try:
        return cls(**values)
    except PolicyValueError as exc:
        raise ConfigError(f"{where}.{exc.key}: {exc.problem}") from None


def jittered(base_s: float, cap_s: float, jitter: float, number: int, rng: random.Random) -> float:
    """``min(base·2^number, cap)`` scaled by a uniform factor in ``[1 - jitter, 1 + jitter]``.

    The jitter applies after the cap, so a capped delay still spreads callers out (a delay
    may therefore exceed the cap by up to ``jitter``)."""
    if number < 0:
        raise ValueError(f"the retry number must be at least 0, got {number}")
    raw = min(base_s * 2.0 ** min(number, _MAX_EXPONENT), cap_s)
    return raw * (1.0 + rng.uniform(-jitter, jitter))


_RETRY_RULES = {
    "base_s": SECONDS,
    "cap_s": SECONDS,
    "max_retries": COUNT,
    "jitter": FRACTION,
    "rate_limited_base_s": SECONDS,
    "rate_limited_cap_s": SECONDS,
    "max_rate_limited": COUNT,
    "deadline_s": SECONDS,
}


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """When a failed send is tried again.

    ``max_retries`` bounds retries after transient errors and ``max_rate_limited`` retries
    after a 429; the caller keeps the two counts apart, so a provider that throttles for a
    while does not use up the budget meant for real failures. ``deadline_s`` is the overall
    budget counted from the first attempt: no retry is scheduled to start after it.
    """

    base_s: float = 0.5
    cap_s: float = 30.0
    max_retries: int = 4
    jitter: float = 0.3
    rate_limited_base_s: float = 5.0
    rate_limited_cap_s: float = 300.0
    max_rate_limited: int = 6
    deadline_s: float = 600.0

    def __post_init__(self) -> None:
        check_fields(self, _RETRY_RULES)
        check_not_below(self, "cap_s", "base_s")
        check_not_below(self, "rate_limited_cap_s", "rate_limited_base_s")

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str) -> Self:
        return load_table(cls, table, where, _RETRY_RULES)

    def delay(self, retry_number: int, rng: random.Random) -> float:
        """Seconds before retry ``retry_number`` (0 for the first retry): 0.5, 1, 2, 4 … with
        the defaults, before jitter."""
        return jittered(self.base_s, self.cap_s, self.jitter, retry_number, rng)

    def rate_limited_delay(
        self, retry_number: int, retry_after_s: float | None, rng: random.Random
    ) -> float:
        """Seconds before retry ``retry_number`` after a 429: the longer schedule, but never
        sooner than the receiver's Retry-After (a missing, negative or NaN hint is ignored)."""
        own = jittered(
            self.rate_limited_base_s, self.rate_limited_cap_s, self.jitter, retry_number, rng
        )
        hint = retry_after_s if retry_after_s is not None and retry_after_s > 0 else 0.0
        return max(hint, own)

    def should_retry(
        self,
        retries_so_far: int,
        elapsed_s: float,
        next_delay_s: float,
        *,
        rate_limited: bool = False,
    ) -> bool:
        """Whether to schedule one more retry ``next_delay_s`` from now, ``elapsed_s`` after
        the first attempt, ``retries_so_far`` of this kind having been made already."""
        limit = self.max_rate_limited if rate_limited else self.max_retries
        return retries_so_far < limit and elapsed_s + next_delay_s <= self.deadline_s


_POLL_RULES = {"base_s": SECONDS, "cap_s": SECONDS, "max_polls": COUNT, "jitter": FRACTION}


@dataclasses.dataclass(frozen=True)
class PollPolicy:
    """How an UNKNOWN outcome is re-checked with the receiver: slowly (30 s, 1 min, 2 min …
    up to an hour), because the receiver's own records settle on that scale, and at most
    ``max_polls`` times before a person has to look."""

    base_s: float = 30.0
    cap_s: float = 3600.0
    max_polls: int = 5
    jitter: float = 0.3

    def __post_init__(self) -> None:
        check_fields(self, _POLL_RULES)
        check_not_below(self, "cap_s", "base_s")

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str) -> Self:
        return load_table(cls, table, where, _POLL_RULES)

    def delay(self, n: int, rng: random.Random) -> float:
        """Seconds before re-check ``n`` (0 for the first)."""
        return jittered(self.base_s, self.cap_s, self.jitter, n, rng)


_PENDING_RULES = {"poll_interval_s": SECONDS, "stall_timeout_s": SECONDS}


@dataclasses.dataclass(frozen=True)
class PendingPolicy:
    """How a PENDING outcome is watched: polled every ``poll_interval_s``; once it has been
    PENDING for longer than ``stall_timeout_s`` it becomes UNKNOWN, since a receiver that
    should answer within seconds and has not is no longer telling us anything. The timeout is
    per channel: 2 min (the default) for quick channels, 30 min for slow ones."""

    poll_interval_s: float = 2.0
    stall_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        check_fields(self, _PENDING_RULES)
        check_not_below(self, "stall_timeout_s", "poll_interval_s")

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str) -> Self:
        return load_table(cls, table, where, _PENDING_RULES)

    def stalled(self, pending_for_s: float) -> bool:
        """Whether an outcome PENDING for ``pending_for_s`` seconds should become UNKNOWN."""
        return pending_for_s > self.stall_timeout_s

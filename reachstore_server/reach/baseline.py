"""Alert thresholds from each channel's own history, not fixed numbers.

A channel that always fails 20 % of its requests (a receiver that refuses stale orders) and
one that never fails cannot share a fixed failure threshold: one would alert for ever, the
other never. So each (tenant, channel) is judged against itself: the last hour's failure
rate, UNKNOWN rate and latency p99 against the same hour of the day on each of the last
``days`` days (mean and population standard deviation of those daily figures). A signal
alerts only when it lies more than ``sigmas`` standard deviations above its mean, the last
hour holds at least ``min_samples`` actions, and at least ``min_history_days`` of the days
held that many as well; otherwise it says why it was not judged.

A history whose figures never moved has a standard deviation of 0, and the first failed
request of a hitherto perfect channel would alert. The deviation is therefore taken to be
at least ``RATE_FLOOR`` for rates and ``LATENCY_FLOOR_SHARE`` of the mean for latency.

The figures come from rows the reach service keeps anyway (actions' reservation and finish
times, their state history), read by ``ReachStore.baseline_rows``: every action stays live
for at least ``MIN_RETENTION_DAYS`` (14) in ``dedupe_archive.py``, longer than the 8 days a
judgement reads, so no aggregate table is needed (docs/OPERATIONS.md, "Alert baselines").
Pure: the caller hands in the rows and the moment (``now``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Iterable, Mapping
from typing import Any

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach import states as st
from reachstore_server.reach.health import percentile

FAILURE_RATE = "failure_rate"
UNKNOWN_RATE = "unknown_rate"
LATENCY_P99 = "latency_p99_ms"
SIGNALS = (FAILURE_RATE, UNKNOWN_RATE, LATENCY_P99)
RATE_FLOOR = 0.01  # one percentage point
LATENCY_FLOOR_SHARE = 0.05  # 5 % of the mean latency
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class BaselinePolicy:
    """``[engine.baseline]`` of the reach file: how a signal is judged against its past."""

    days: int = 7
    sigmas: float = 3.0
    min_samples: int = 20
    min_history_days: int = 3

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str) -> BaselinePolicy:
        allowed = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise ConfigError(
                f"{where}.{unknown[0]}: unknown key (allowed: {', '.join(sorted(allowed))})"
            )
        values: dict[str, Any] = {}
        for name, low, high, kind in (
            ("days", 2, 28, int),
            ("sigmas", 1.0, 10.0, float),
            ("min_samples", 1, 1_000_000, int),
            ("min_history_days", 1, 28, int),
        ):
            value = table.get(name, getattr(cls, name))
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{where}.{name}: must be a number")
            if kind is int and value != int(value):
                raise ConfigError(f"{where}.{name}: must be a whole number")
            if not low <= value <= high:
                raise ConfigError(f"{where}.{name}: must be {low:g} to {high:g}")
            values[name] = kind(value)
        if values["min_history_days"] > values["days"]:
            raise ConfigError(f"{where}.min_history_days: must not exceed {where}.days")
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class Finished:
    """An action that reached a final state: when it was reserved and finished, how."""

    tenant: str
    channel: str
    created_at: dt.datetime
    finished_at: dt.datetime
    state: str
    failure_kind: str


@dataclasses.dataclass(frozen=True)
class Entered:
    """One state change of an action (from its history)."""

    tenant: str
    channel: str
    at: dt.datetime
    to_state: str


@dataclasses.dataclass(frozen=True)
class Judgement:
    """One signal of one channel, judged. ``alerting`` only when every condition held;
    ``why_not`` says which did not when there was too little to judge by."""

    tenant: str
    channel: str
    signal: str
    current: float
    samples: int
    mean: float
    stddev: float
    threshold: float
    history_days: int
    alerting: bool
    why_not: str
    # The failure kind an alert on it carries: a failure rate's is that of most of the last
    # hour's failures; UNKNOWN and latency are operations' matter.
    failure_kind: str


@dataclasses.dataclass
class _Hour:
    finished: int = 0
    failed: int = 0
    failed_business: int = 0
    sends: int = 0
    unknowns: int = 0
    latencies_ms: list[float] = dataclasses.field(default_factory=list)

    def figure(self, signal: str) -> tuple[float, int]:
        """The signal's value in this hour and the number of samples behind it."""
        if signal == FAILURE_RATE:
            return (self.failed / self.finished if self.finished else 0.0), self.finished
        if signal == UNKNOWN_RATE:
            return (self.unknowns / self.sends if self.sends else 0.0), self.sends
        return percentile(self.latencies_ms, 0.99), len(self.latencies_ms)


def _utc(value: dt.datetime) -> dt.datetime:
    # SQLite hands back naive datetimes; everything is stored in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def history_start(now: dt.datetime, policy: BaselinePolicy) -> dt.datetime:
    """The earliest moment a judgement at ``now`` reads."""
    return now - policy.days * DAY - HOUR


def judge(
    now: dt.datetime,
    policy: BaselinePolicy,
    finished: Iterable[Finished],
    entered: Iterable[Entered],
    channels: Iterable[tuple[str, str]] | None = None,
) -> list[Judgement]:
    """Every signal of every (tenant, channel) seen in the rows (and of ``channels``, if
    given), judged at ``now``: the hour before ``now`` against the same hour on each of the
    ``policy.days`` days before."""
    hours: dict[tuple[str, str], list[_Hour]] = {}

    def slot(tenant: str, channel: str, at: dt.datetime) -> _Hour | None:
        back = now - _utc(at)
        if back < dt.timedelta(0):
            return None
        day, rest = divmod(back, DAY)
        if rest >= HOUR or day > policy.days:
            return None  # outside the hour of the day being judged
        slots = hours.setdefault((tenant, channel), [_Hour() for _ in range(policy.days + 1)])
        return slots[day]

    for row in finished:
        found = slot(row.tenant, row.channel, row.finished_at)
        if found is None:
            continue
        found.finished += 1
        found.latencies_ms.append(
            (_utc(row.finished_at) - _utc(row.created_at)).total_seconds() * 1000
        )
        if row.state in st.DID_NOT_HAPPEN and row.state != st.CANCELLED:
            found.failed += 1
            found.failed_business += row.failure_kind == st.BUSINESS
    for change in entered:
        found = slot(change.tenant, change.channel, change.at)
        if found is None:
            continue
        if change.to_state == st.SUBMITTING:
            found.sends += 1
        elif change.to_state == st.UNKNOWN:
            found.unknowns += 1
    for key in channels or ():
        hours.setdefault(key, [_Hour() for _ in range(policy.days + 1)])
    out = []
    for (tenant, channel), slots in sorted(hours.items()):
        for signal in SIGNALS:
            out.append(_judge_one(tenant, channel, signal, slots, policy))
    return out


def _judge_one(
    tenant: str, channel: str, signal: str, slots: list[_Hour], policy: BaselinePolicy
) -> Judgement:
    current, samples = slots[0].figure(signal)
    past = [h.figure(signal) for h in slots[1:]]
    usable = [value for value, n in past if n >= policy.min_samples]
    mean = sum(usable) / len(usable) if usable else 0.0
    spread = math.sqrt(sum((v - mean) ** 2 for v in usable) / len(usable)) if usable else 0.0
    floor = RATE_FLOOR if signal != LATENCY_P99 else LATENCY_FLOOR_SHARE * mean
    threshold = mean + policy.sigmas * max(spread, floor)
    why_not = ""
    if samples < policy.min_samples:
        why_not = f"{samples} sample(s) in the last hour, fewer than {policy.min_samples}"
    elif len(usable) < policy.min_history_days:
        why_not = (
            f"{len(usable)} day(s) of history with {policy.min_samples} samples in this "
            f"hour, fewer than {policy.min_history_days}"
        )
    kind = st.TECHNICAL
    if signal == FAILURE_RATE and slots[0].failed_business * 2 > slots[0].failed:
        kind = st.BUSINESS
    return Judgement(
        tenant=tenant,
        channel=channel,
        signal=signal,
        current=current,
        samples=samples,
        mean=mean,
        stddev=spread,
        threshold=threshold,
        history_days=len(usable),
        alerting=not why_not and current > threshold,
        why_not=why_not,
        failure_kind=kind,
    )

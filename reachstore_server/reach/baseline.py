"""Alert thresholds from each channel's own history, not fixed numbers.

A channel that always fails 20 % of its requests (a receiver that refuses stale orders) and
one that never fails cannot share a fixed failure threshold: one would alert for ever, the
other never. So each (tenant, channel) is judged against itself: the last hour's figures
against the same hour of the day on each of the last ``days`` days. A signal alerts only
when it lies more than ``sigmas`` deviations above its usual value, the last hour holds at
least ``min_samples`` actions, and at least ``min_history_days`` of the days held that many
as well; otherwise it says why it was not judged.

The signals: the technical failure rate and the business failure rate, each against its
own history and alerted to its own owner (a spike of broken sends on a channel that
routinely has orders refused is operations' matter, and must not read as more refusals);
the UNKNOWN rate (actions that first entered UNKNOWN in the hour, over actions first sent
in it: each action once, however often a look-up leaves it undecided); and latency p99.
Actions skipped because an earlier step failed, or cancelled, never reached the channel
and are no failures of it.

The usual value is the median of the daily figures and the deviation 1.4826 times their
median absolute deviation (what the standard deviation is for normally spread figures),
not the mean and standard deviation: one outage in the week would otherwise raise the bar
past 100 %, and a full outage would never alert. For the same reason a failure rate more
than halfway from its usual value to 100 % always alerts.

A history whose figures never moved has a deviation of 0, and the first failed request of
a hitherto perfect channel would alert. So a rate's deviation is taken to be at least the
noise of a rate measured over the hour's samples (the binomial standard error at the usual
rate, or at one in the samples when the usual rate is lower) and at least ``RATE_FLOOR``;
latency's at least ``LATENCY_FLOOR_SHARE`` of the usual value. One failure in 25 on a
perfect channel is noise; eight is not.

The figures come from rows the reach service keeps anyway (actions' reservation and finish
times, their state history), read by ``ReachStore.baseline_rows``: every action stays live
for at least ``MIN_RETENTION_DAYS`` (14) in ``dedupe_archive.py``, longer than the days a
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

TECHNICAL_FAILURE_RATE = "technical_failure_rate"
BUSINESS_FAILURE_RATE = "business_failure_rate"
UNKNOWN_RATE = "unknown_rate"
LATENCY_P99 = "latency_p99_ms"
# Each signal and the kind of failure its alert carries, so the owner it goes to.
SIGNALS = {
    TECHNICAL_FAILURE_RATE: st.TECHNICAL,
    BUSINESS_FAILURE_RATE: st.BUSINESS,
    UNKNOWN_RATE: st.TECHNICAL,
    LATENCY_P99: st.TECHNICAL,
}
RATE_FLOOR = 0.01  # one percentage point
LATENCY_FLOOR_SHARE = 0.05  # 5 % of the usual latency
MAD_TO_SIGMA = 1.4826  # median absolute deviation -> standard deviation of a normal spread
# States an action the channel never carried out ends in.
_NOT_THE_CHANNELS = frozenset({st.SKIPPED, st.CANCELLED})
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
    action_id: str


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
    # The failure kind an alert on it carries (``SIGNALS``).
    failure_kind: str


@dataclasses.dataclass
class _Hour:
    finished: int = 0
    failed: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(st.FAILURE_KINDS, 0)
    )
    sends: int = 0
    unknowns: int = 0
    latencies_ms: list[float] = dataclasses.field(default_factory=list)

    def figure(self, signal: str) -> tuple[float, int]:
        """The signal's value in this hour and the number of samples behind it."""
        if signal == UNKNOWN_RATE:
            return (self.unknowns / self.sends if self.sends else 0.0), self.sends
        if signal == LATENCY_P99:
            return percentile(self.latencies_ms, 0.99), len(self.latencies_ms)
        failed = self.failed[SIGNALS[signal]]
        return (failed / self.finished if self.finished else 0.0), self.finished


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
        if row.state in _NOT_THE_CHANNELS:
            continue
        found = slot(row.tenant, row.channel, row.finished_at)
        if found is None:
            continue
        found.finished += 1
        found.latencies_ms.append(
            (_utc(row.finished_at) - _utc(row.created_at)).total_seconds() * 1000
        )
        if row.state == st.FAILED:
            kind = row.failure_kind if row.failure_kind in st.FAILURE_KINDS else st.TECHNICAL
            found.failed[kind] += 1
    # Each action counts once: where it was first sent, and where it first became UNKNOWN
    # (a look-up that leaves it undecided enters UNKNOWN again).
    first: dict[tuple[str, str], Entered] = {}
    for change in entered:
        if change.to_state not in (st.SUBMITTING, st.UNKNOWN):
            continue
        seen = first.get((change.action_id, change.to_state))
        if seen is None or _utc(change.at) < _utc(seen.at):
            first[(change.action_id, change.to_state)] = change
    for change in first.values():
        found = slot(change.tenant, change.channel, change.at)
        if found is None:
            continue
        if change.to_state == st.SUBMITTING:
            found.sends += 1
        else:
            found.unknowns += 1
    for key in channels or ():
        hours.setdefault(key, [_Hour() for _ in range(policy.days + 1)])
    out = []
    for (tenant, channel), slots in sorted(hours.items()):
        for signal in SIGNALS:
            out.append(_judge_one(tenant, channel, signal, slots, policy))
    return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def _judge_one(
    tenant: str, channel: str, signal: str, slots: list[_Hour], policy: BaselinePolicy
) -> Judgement:
    current, samples = slots[0].figure(signal)
    past = [h.figure(signal) for h in slots[1:]]
    usable = [value for value, n in past if n >= policy.min_samples]
    usual = _median(usable) if usable else 0.0
    spread = MAD_TO_SIGMA * _median([abs(v - usual) for v in usable]) if usable else 0.0
    if signal == LATENCY_P99:
        threshold = usual + policy.sigmas * max(spread, LATENCY_FLOOR_SHARE * usual)
    else:
        # The noise of a rate over this hour's samples, at the usual rate (or one in the
        # samples, when that is lower: a perfect past says little about the next hour).
        p = max(usual, 1 / samples) if samples else usual
        noise = math.sqrt(p * (1 - p) / samples) if samples else 0.0
        threshold = usual + policy.sigmas * max(spread, noise, RATE_FLOOR)
        # More than halfway from the usual rate to everything failing always alerts.
        threshold = min(threshold, (1 + usual) / 2) if usual < 1 else threshold
    why_not = ""
    if samples < policy.min_samples:
        why_not = f"{samples} sample(s) in the last hour, fewer than {policy.min_samples}"
    elif len(usable) < policy.min_history_days:
        why_not = (
            f"{len(usable)} day(s) of history with {policy.min_samples} samples in this "
            f"hour, fewer than {policy.min_history_days}"
        )
    return Judgement(
        tenant=tenant,
        channel=channel,
        signal=signal,
        current=current,
        samples=samples,
        mean=usual,
        stddev=spread,
        threshold=threshold,
        history_days=len(usable),
        alerting=not why_not and current > threshold,
        why_not=why_not,
        failure_kind=SIGNALS[signal],
    )

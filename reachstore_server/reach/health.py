"""Per-channel health over time, computed from stored rows (pure: no database, no gRPC).

The three signals an operator of reach watches, cut into buckets of a recent window: state
changes by the state entered, end-to-end latency percentiles of the actions that finished, and the
retry rate (retries per send). Everything here comes from the database rows the store
hands over, so every reach replica computes the same figures for the same window.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections import Counter
from collections.abc import Iterable, Sequence

from reachstore_server.reach import states as st

MIN_WINDOW_S = 60
MAX_WINDOW_S = 7 * 24 * 3600
DEFAULT_WINDOW_S = 3600
MIN_BUCKET_S = 10
MAX_BUCKET_S = 24 * 3600
MAX_BUCKETS = 120
DEFAULT_BUCKETS = 12
# History reasons that schedule a send again; ``sending`` marks every request sent.
RETRY_REASONS = frozenset({"retry_scheduled", "rate_limited", "worker_lost_resending"})
SEND_STATE = st.SUBMITTING


@dataclasses.dataclass
class Bucket:
    start: dt.datetime
    entered: Counter[str] = dataclasses.field(default_factory=Counter)
    latencies_ms: list[float] = dataclasses.field(default_factory=list)
    sends: int = 0
    retries: int = 0

    def percentile(self, share: float) -> float:
        return percentile(self.latencies_ms, share)

    @property
    def retry_rate(self) -> float:
        return self.retries / self.sends if self.sends else 0.0


@dataclasses.dataclass
class ChannelSignals:
    channel: str
    current: dict[str, int]
    buckets: list[Bucket]


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (0 for no values): the smallest value with at least
    ``share`` of the values at or below it, so it is always a latency that happened."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def _utc(value: dt.datetime) -> dt.datetime:
    # SQLite hands back naive datetimes; everything is stored in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def default_bucket_s(window_s: int) -> int:
    return max(MIN_BUCKET_S, window_s // DEFAULT_BUCKETS)


def channel_signals(
    channels: Iterable[str],
    now: dt.datetime,
    window_s: int,
    bucket_s: int,
    current: Iterable[tuple[str, str, int]],
    finished: Iterable[tuple[str, dt.datetime, dt.datetime]],
    changes: Iterable[tuple[str, dt.datetime, str, str]],
) -> list[ChannelSignals]:
    """The signals of each channel in ``channels`` over ``[now - window_s, now]``."""
    count = math.ceil(window_s / bucket_s)
    start = now - dt.timedelta(seconds=count * bucket_s)
    wanted = list(channels)
    per: dict[str, ChannelSignals] = {
        name: ChannelSignals(
            name,
            {},
            [Bucket(start + dt.timedelta(seconds=i * bucket_s)) for i in range(count)],
        )
        for name in wanted
    }

    def bucket(channel: str, at: dt.datetime) -> Bucket | None:
        signals = per.get(channel)
        if signals is None:
            return None
        index = int((_utc(at) - start).total_seconds() // bucket_s)
        return signals.buckets[index] if 0 <= index < count else None

    for channel, state, n in current:
        if channel in per and n:
            per[channel].current[state] = n
    for channel, created, done in finished:
        found = bucket(channel, done)
        if found is not None:
            found.latencies_ms.append((_utc(done) - _utc(created)).total_seconds() * 1000)
    for channel, at, to_state, reason in changes:
        found = bucket(channel, at)
        if found is None:
            continue
        found.entered[to_state] += 1
        if to_state == SEND_STATE:
            found.sends += 1
        if reason in RETRY_REASONS:
            found.retries += 1
    return [per[name] for name in wanted]

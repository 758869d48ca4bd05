"""The three signals an operator of reach watches, plus what explains them.

- actions by state: counted from the store on every scrape (``reachstore_reach_actions``),
  so every worker process reports the same, whole picture;
- end-to-end latency from reservation to a final state, per channel (a histogram: p50,
  p95 and p99 come from its buckets);
- retries per channel, by reason — with sends per channel, the retry rate;
- breaker state and limiter waits per channel, in the answering process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from reachstore_server.common.metrics_http import serve_metrics
from reachstore_server.common.tls import PLAIN, TlsFiles

BREAKER_VALUES = {"closed": 0, "half_open": 1, "open": 2}


class _StateCounts(Collector):
    def __init__(self, counts: Callable[[], dict[tuple[str, str], int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "reachstore_reach_actions",
            "Actions in the store, by channel and state.",
            labels=["channel", "state"],
        )
        for (channel, state), n in sorted(self._counts().items()):
            family.add_metric([channel, state], n)
        yield family


class _Behind(Collector):
    def __init__(self, behind: Callable[[], dict[str, float]]) -> None:
        self._behind = behind

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "reachstore_reach_behind_seconds",
            "How long the oldest due action of each channel has been due: how far behind "
            "the workers are (a channel with nothing due is absent).",
            labels=["channel"],
        )
        for channel, seconds in sorted(self._behind().items()):
            family.add_metric([channel], seconds)
        yield family


class ReachMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.transitions = Counter(
            "reachstore_reach_transitions_total",
            "Action state changes made by this process, by channel and new state.",
            ["channel", "state"],
            registry=self.registry,
        )
        self.sends = Counter(
            "reachstore_reach_sends_total",
            "Requests sent to receivers, by channel.",
            ["channel"],
            registry=self.registry,
        )
        self.retries = Counter(
            "reachstore_reach_retries_total",
            "Sends scheduled again, by channel and reason (transient, rate_limited, resend).",
            ["channel", "reason"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "reachstore_reach_action_seconds",
            "From reservation to a final state (succeeded, failed, cancelled, skipped).",
            ["channel"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600),
            registry=self.registry,
        )
        self.breaker = Gauge(
            "reachstore_reach_breaker_state",
            "Circuit breaker per channel in this process: 0 closed, 1 half-open, 2 open.",
            ["channel"],
            registry=self.registry,
        )
        self.limiter_wait = Histogram(
            "reachstore_reach_limiter_wait_seconds",
            "Time a send waited for its channel's token bucket.",
            ["channel"],
            buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )

    def count_states_from(self, counts: Callable[[], dict[tuple[str, str], int]]) -> None:
        self.registry.register(_StateCounts(counts))

    def measure_lag_from(self, behind: Callable[[], dict[str, float]]) -> None:
        self.registry.register(_Behind(behind))

    def serve(self, address: str, allowed_hosts: Iterable[str] = (), tls: TlsFiles = PLAIN) -> None:
        """Exposes the metrics in Prometheus text format at http://address/metrics, to
        the hosts ``reachstore_server/common/metrics_http.py`` lets in."""
        serve_metrics(address, self.registry, allowed_hosts, tls)

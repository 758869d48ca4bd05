"""What monitoring needs to see of partial answers: status codes cannot show them, so the
query service counts coverage and failed namespaces by category itself."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import Counter, Histogram

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.common.metrics_http import serve_metrics
from reachstore_server.common.metrics_registry import Registries, component_registries
from reachstore_server.common.tls import PLAIN, TlsFiles


class QueryMetrics:
    def __init__(self, registries: Registries | None = None) -> None:
        # ``registry`` is what /metrics serves (other collectors join it too). When several
        # query processes share a port (set by `reachstore up`, reachstore_server/cli.py), this
        # process's counters live in a registry of their own and the served one reports
        # every process's sums (reachstore_server/common/metrics_registry.py).
        registries = registries or component_registries()
        self.registries = registries
        self.registry = registries.served
        own = registries.own
        self.queries = Counter(
            "reachstore_queries_total",
            "Queries answered (including partial answers).",
            registry=own,
        )
        self.partial = Counter(
            "reachstore_query_partial_answers_total",
            "Queries answered with coverage below 1.",
            registry=own,
        )
        self.coverage = Histogram(
            "reachstore_query_coverage_ratio",
            "Coverage ratio of each answered query.",
            buckets=(0.0, 0.25, 0.5, 0.75, 0.99, 1.0),
            registry=own,
        )
        self.namespace_failures = Counter(
            "reachstore_query_namespace_failures_total",
            "Namespaces missing from answers, by category and error code.",
            ["category", "error_code"],
            registry=own,
        )
        self.cancelled = Counter(
            "reachstore_query_searches_cancelled_total",
            "Namespace searches stopped because their time budget ran out.",
            registry=own,
        )

    def observe(self, coverage: float, failed: Sequence[pf_pb2.PartialFailure]) -> None:
        self.queries.inc()
        self.coverage.observe(coverage)
        if coverage < 1.0:
            self.partial.inc()
        for failure in failed:
            category = pf_pb2.Category.Name(failure.category).removeprefix("CATEGORY_").lower()
            self.namespace_failures.labels(category, failure.error_code).inc()

    def serve(self, address: str, allowed_hosts: Iterable[str] = (), tls: TlsFiles = PLAIN) -> None:
        """Exposes the metrics in Prometheus text format at http://address/metrics, to
        the hosts ``reachstore_server/common/metrics_http.py`` lets in."""
        serve_metrics(address, self.registry, allowed_hosts, tls)

"""What monitoring needs to see of partial answers: status codes cannot show them, so the
query service counts coverage and failed namespaces by category itself."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from services.common.metrics_http import serve_metrics
from services.common.tls import PLAIN, TlsFiles

# Set (by `reachstore up`, services/cli.py) when several query processes serve one port:
# prometheus_client then keeps every process's counts in files in that folder, and the
# process that serves /metrics reports their sum.
SHARED_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


class QueryMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # ``registry`` is what /metrics serves (other collectors join it too). With a shared
        # folder, this process's counters live in a registry of their own (their values
        # are in the folder) and the served one reads the folder: all processes' sums.
        self.registry = registry or CollectorRegistry()
        shared = os.environ.get(SHARED_DIR_VARIABLE)
        own = self.registry
        if shared:
            own = CollectorRegistry()
            MultiProcessCollector(self.registry, path=shared)
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
        the hosts ``services/common/metrics_http.py`` lets in."""
        serve_metrics(address, self.registry, allowed_hosts, tls)

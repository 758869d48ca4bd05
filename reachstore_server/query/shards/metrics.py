"""What monitoring sees of the shards: the members this one knows, the namespaces it holds,
and the searches it forwarded (read on each scrape)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from reachstore_server.query.shards.router import Router


class ShardGauges(Collector):
    def __init__(self, router: Router, held: Callable[[], int]) -> None:
        self._router = router
        self._held = held

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        view = self._router.membership.view
        members = GaugeMetricFamily(
            "reachstore_query_shard_members",
            "Query members this process sees, by state (warming: loading before it serves).",
            labels=["state"],
        )
        for state in ("warming", "serving"):
            members.add_metric([state], sum(1 for m in view.members if m.state == state))
        yield members
        yield GaugeMetricFamily(
            "reachstore_query_shard_namespaces_held",
            "Namespaces whose index this process holds (loaded or loading).",
            value=self._held(),
        )
        yield CounterMetricFamily(
            "reachstore_query_shard_forwarded_calls",
            "Searches this process sent to the owners of namespaces it does not hold.",
            value=self._router.forwarded_calls,
        )
        yield CounterMetricFamily(
            "reachstore_query_shard_failovers",
            "Namespaces sent to their next owner because the one asked did not answer.",
            value=self._router.failovers,
        )

"""What monitoring sees of the shards: the members this one knows, the indexes and chunks it
holds, and the searches it forwarded (read on each scrape)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from reachstore_server.query.indexes import IndexManager
from reachstore_server.query.shards.router import Router


class ShardGauges(Collector):
    def __init__(self, router: Router, indexes: IndexManager) -> None:
        self._router = router
        self._indexes = indexes

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
            "Indexes this process holds, loaded or loading: one per namespace, or per "
            "partition of a namespace split into partitions.",
            value=len(self._indexes.loaded()),
        )
        yield GaugeMetricFamily(
            "reachstore_query_shard_chunks_held",
            "Chunks in the indexes this process holds (what its memory grows with).",
            value=self._indexes.chunks_held(),
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

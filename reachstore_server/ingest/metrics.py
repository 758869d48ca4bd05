"""What an operator of ingest watches: how much waits, and for how long.

Read from the task table on every scrape, so any ingest process shows the whole queue
(every tenant's tasks; the figures name no tenant):

- ``reachstore_ingest_tasks{state}``: unfinished tasks by state (``queued``,
  ``processing``, ``cancelling``); a ``queued`` count that only grows means the workers
  cannot keep up;
- ``reachstore_ingest_oldest_queued_seconds``: how long the oldest queued task has
  waited, by the database's clock (0 when none waits).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from reachstore_server.storage.tasks import CANCELLING, PROCESSING, QUEUED, TaskStore


class QueueGauges(Collector):
    def __init__(self, tasks: TaskStore) -> None:
        self._tasks = tasks

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts, waited = self._tasks.queue()
        family = GaugeMetricFamily(
            "reachstore_ingest_tasks",
            "Unfinished ingest tasks in the store, by state.",
            labels=["state"],
        )
        for state in (QUEUED, PROCESSING, CANCELLING):  # every state, zero included
            family.add_metric([state], counts.get(state, 0))
        yield family
        yield GaugeMetricFamily(
            "reachstore_ingest_oldest_queued_seconds",
            "How long the oldest queued ingest task has waited (0 when none waits).",
            value=waited,
        )

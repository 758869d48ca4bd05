"""The registry every component serves at /metrics, with the process's own figures.

Each registry gets the process collectors (``process_*``: CPU, memory, open files, start
time), the interpreter's (``python_gc_*``) and the platform's (``python_info``), so a
dashboard can tell a busy process from a leaking one without another exporter.

Several query processes may share one port (``reachstore up --query-processes``): then
``PROMETHEUS_MULTIPROC_DIR`` names a folder where prometheus_client keeps every process's
counts, the served registry reads their sums from it, and a component's own counters are
registered in a registry of their own (``Registries.own``) so the serving process does not
count itself twice.
"""

from __future__ import annotations

import dataclasses
import os

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
)
from prometheus_client.multiprocess import MultiProcessCollector

SHARED_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


@dataclasses.dataclass(frozen=True)
class Registries:
    served: CollectorRegistry  # what /metrics answers
    own: CollectorRegistry  # where this process's counters, gauges and histograms go


def component_registries() -> Registries:
    served = CollectorRegistry()
    # The default collectors are stateless readers of /proc and the interpreter: the same
    # objects may join any number of registries.
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        served.register(collector)
    shared = os.environ.get(SHARED_DIR_VARIABLE)
    if not shared:
        return Registries(served, served)
    MultiProcessCollector(served, path=shared)
    return Registries(served, CollectorRegistry())

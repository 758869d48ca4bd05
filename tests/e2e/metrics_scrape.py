"""Reading a running system's /metrics ports, as a Prometheus server would."""

from __future__ import annotations

from collections.abc import Iterable

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from reachstore_server.cli import METRICS_PORT_OFFSETS
from tests.e2e.system import RunningSystem

COMPONENTS = tuple(METRICS_PORT_OFFSETS)

# The series names a family of each type exposes (a family of no samples yet included).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}


def metrics_url(system: RunningSystem, component: str) -> str:
    return f"http://127.0.0.1:{system.grpc_port_base + METRICS_PORT_OFFSETS[component]}/metrics"


def scrape(system: RunningSystem, component: str) -> list[Metric]:
    reply = httpx.get(metrics_url(system, component), timeout=10)
    assert reply.status_code == 200, f"{component}: {reply.status_code} {reply.text[:200]}"
    return list(text_string_to_metric_families(reply.text))


def value(families: Iterable[Metric], sample: str, **labels: str) -> float:
    """The sum of ``sample``'s values whose labels include ``labels`` (0 when none)."""
    total = 0.0
    for family in families:
        for found in family.samples:
            if found.name == sample and all(found.labels.get(k) == v for k, v in labels.items()):
                total += found.value
    return total


def label_values(families: Iterable[Metric], sample: str, label: str) -> set[str]:
    return {
        found.labels[label]
        for family in families
        for found in family.samples
        if found.name == sample and label in found.labels
    }


def series_count(families: Iterable[Metric], sample: str) -> int:
    return sum(1 for family in families for found in family.samples if found.name == sample)


def exported_names(families: Iterable[Metric]) -> set[str]:
    """Every series name the families expose or would expose once they hold samples."""
    names: set[str] = set()
    for family in families:
        names.update(found.name for found in family.samples)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
    return names

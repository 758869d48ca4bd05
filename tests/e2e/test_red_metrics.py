"""Rate, errors and duration of a real `reachstore up`, read from its metrics ports.

A few calls through the bridge — complete, partial and failing, on every service — then
each component's /metrics is scraped and the counters must have moved with the right
labels (docs/OPERATIONS.md, "Metrics"). The bridge's counters are attacked with many
distinct paths: they must not make many series. And the Grafana dashboard in
deploy/grafana may only name series these running components export. The system is the
e2e fixture's (tests/e2e/conftest.py), one per module.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.e2e.metrics_scrape import (
    COMPONENTS,
    exported_names,
    label_values,
    scrape,
    series_count,
    value,
)
from tests.e2e.promql import parse
from tests.e2e.system import RunningSystem

pytestmark = pytest.mark.e2e

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "reachstore.json"
QUERY = "reachstore.query.v1.QueryService"
REQUESTS = "reachstore_rpc_requests_total"


def _query(http: httpx.Client, **body: object) -> httpx.Response:
    return http.post("/api/v1/query", json={"query": "semantic storage", **body})


def test_query_calls_are_counted_by_code_and_category(
    system: RunningSystem, http: httpx.Client
) -> None:
    before = scrape(system, "query")
    assert _query(http, namespaces=["demo"]).status_code == 200
    partial = _query(http, namespaces=["demo", f"nope-{uuid.uuid4().hex[:6]}"])
    assert partial.json()["meta"]["coverage_ratio"] == 0.5, partial.text
    assert _query(http, namespace="demo").status_code == 400  # deprecated field: refused
    after = scrape(system, "query")

    def moved(**labels: str) -> float:
        labels = {"service": QUERY, "method": "Query", **labels}
        return value(after, REQUESTS, **labels) - value(before, REQUESTS, **labels)

    assert moved(code="OK", category="none") == 1
    assert moved(code="OK", category="permanent") == 1, "the partial answer's category"
    assert moved(code="INVALID_ARGUMENT", category="permanent") == 1
    durations = "reachstore_rpc_duration_seconds_count"
    counted = value(after, durations, service=QUERY, method="Query")
    assert counted - value(before, durations, service=QUERY, method="Query") == 3
    assert value(after, "reachstore_rpc_duration_seconds_bucket", method="Query", le="+Inf") == (
        counted
    )


def test_every_service_counts_its_calls(system: RunningSystem, http: httpx.Client) -> None:
    created = http.post(
        "/api/v1/namespaces/demo/documents",
        json={"document": {"document_id": "red-1", "text": "a document for the metrics"}},
    )
    assert created.status_code == 202, created.text
    missing = f"/api/v1/reach/tasks/{uuid.uuid4().hex}"
    assert http.get(missing).status_code == 404
    assert http.get("/api/v1/audit/events").status_code == 200
    expected = {
        "ingest": ("reachstore.ingest.v1.IngestService", "CreateDocument", "OK", "none"),
        "reach": ("reachstore.reach.v1.ReachService", "GetTask", "NOT_FOUND", "permanent"),
        "audit": ("reachstore.audit.v1.AuditService", "ListEvents", "OK", "none"),
    }
    for component, (service, method, code, category) in expected.items():
        families = scrape(system, component)
        labels = {"service": service, "method": method, "code": code, "category": category}
        assert value(families, REQUESTS, **labels) >= 1, (component, labels)
        assert value(families, "reachstore_rpc_duration_seconds_count", method=method) >= 1


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_component_reports_its_process(system: RunningSystem, component: str) -> None:
    families = scrape(system, component)
    assert value(families, "process_cpu_seconds_total") > 0
    assert value(families, "process_resident_memory_bytes") > 0
    assert series_count(families, "python_gc_objects_collected_total") >= 1
    assert series_count(families, "python_info") == 1


def test_ingest_exports_its_queue(system: RunningSystem) -> None:
    families = scrape(system, "ingest")
    assert label_values(families, "reachstore_ingest_tasks", "state") == {
        "queued",
        "processing",
        "cancelling",
    }
    assert series_count(families, "reachstore_ingest_oldest_queued_seconds") == 1


def test_the_bridge_counts_routes_not_paths(system: RunningSystem, http: httpx.Client) -> None:
    """Attack: hundreds of distinct ids, unknown paths and made-up methods. The series must
    stay one per route template, one for every unknown path, one for other methods."""
    for i in range(150):
        http.get(f"/api/v1/tasks/{uuid.uuid4().hex}")
        http.get(f"/nowhere/{uuid.uuid4().hex}/{i}")
        http.request(f"X{uuid.uuid4().hex[:8].upper()}", f"/api/v1/tasks/{i}")
        # Refused by the Host guard before any route is matched.
        http.get(f"/api/v1/tasks/{i}", headers={"Host": f"rebind-{i}.test"})
    families = scrape(system, "bridge")
    routes = label_values(families, "reachstore_http_requests_total", "route")
    assert "/api/v1/tasks/{task_id}" in routes
    assert "unmatched" in routes
    assert not [r for r in routes if "{" not in r and r.startswith("/api/v1/tasks/")], routes
    assert len(routes) < 20, sorted(routes)
    assert label_values(families, "reachstore_http_requests_total", "method") <= {
        "GET",
        "POST",
        "OTHER",
    }
    assert series_count(families, "reachstore_http_requests_total") < 30
    assert (
        value(
            families,
            "reachstore_http_requests_total",
            route="/api/v1/tasks/{task_id}",
            status="404",
        )
        >= 150
    )
    assert value(families, "reachstore_http_requests_total", route="unmatched") >= 300
    assert value(families, "reachstore_http_requests_total", route="unmatched", status="403") >= 150
    buckets = label_values(families, "reachstore_http_request_duration_seconds_bucket", "route")
    assert buckets == routes


def test_the_dashboard_names_only_exported_series(
    system: RunningSystem, http: httpx.Client
) -> None:
    assert _query(http, namespaces=["demo"]).status_code == 200  # some samples everywhere
    exported: dict[str, set[str]] = {}
    deadline = time.monotonic() + 10
    for component in COMPONENTS:
        for name in exported_names(scrape(system, component)):
            exported.setdefault(name, set()).add(component)
    assert time.monotonic() < deadline
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    named: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            named |= parse(target["expr"]).metrics
    unknown = sorted(named - exported.keys())
    assert not unknown, f"the dashboard names series no component exports: {unknown}"
    for wanted in (
        "reachstore_rpc_requests_total",
        "reachstore_rpc_duration_seconds_bucket",
        "reachstore_http_requests_total",
        "reachstore_ingest_tasks",
        "reachstore_audit_outbox_lag_seconds",
    ):
        assert wanted in named, f"the dashboard has no panel on {wanted}"

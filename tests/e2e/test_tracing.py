"""Tracing across real processes: `reachstore up` exporting OTLP/HTTP to a receiver in this
test (``otlp_receiver.py``), a REST query and a reach action followed through the exported
spans, hostile trace headers from a caller, and a system left unconfigured exporting
nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.otlp_receiver import ExportedSpan, OtlpReceiver
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _reach_config(receiver: HttpReceiver) -> str:
    return f"""
[channels.hook]
kind = "webhook"
description = "posts to a test receiver"
action_types = ["notify"]
idempotency_params = ["ticket"]
window = "day"
[channels.hook.webhook]
url = "{receiver.url}"
read_timeout_s = 2
"""


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpReceiver]:
    rx = HttpReceiver().start()
    yield rx
    rx.stop()


@pytest.fixture(scope="module")
def otlp() -> Iterator[OtlpReceiver]:
    collector = OtlpReceiver().start()
    yield collector
    collector.stop()


def _system(folder: Path, receiver: HttpReceiver, otel_env: dict[str, str]) -> RunningSystem:
    config = folder / "reach.toml"
    config.write_text(_reach_config(receiver))
    env = {"REACHSTORE_REACH_CONFIG": str(config), **otel_env}
    return RunningSystem(folder / "data", env)


@pytest.fixture(scope="module")
def traced(
    tmp_path_factory: pytest.TempPathFactory, receiver: HttpReceiver, otlp: OtlpReceiver
) -> Iterator[RunningSystem]:
    system = _system(
        tmp_path_factory.mktemp("traced"),
        receiver,
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
            # Spans leave within a fifth of a second rather than the SDK's five.
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        },
    )
    system.start()
    yield system
    assert system.stop() == 0, "".join(system.output[-40:])


def _trace(spans: list[ExportedSpan], trace_id: str) -> list[ExportedSpan]:
    return [s for s in spans if s.trace_id == trace_id]


def _server_span_of(spans: list[ExportedSpan], service: str, name: str) -> ExportedSpan | None:
    return next((s for s in spans if s.service == service and s.name == name), None)


def test_one_rest_query_is_one_trace_from_the_bridge_into_the_query_service(
    traced: RunningSystem, otlp: OtlpReceiver
) -> None:
    with httpx.Client(base_url=traced.http_url, timeout=30) as http:
        reply = http.post("/api/v1/query", json={"namespaces": ["nowhere"], "query": "refunds"})
    assert reply.status_code == 200, reply.text
    rpc = "/reachstore.query.v1.QueryService/Query"

    def complete(spans: list[ExportedSpan]) -> bool:
        server = _server_span_of(spans, "reachstore-query", rpc)
        return server is not None and any(
            s.service == "reachstore-bridge"
            and s.trace_id == server.trace_id
            and not s.parent_span_id
            for s in spans
        )

    spans = otlp.wait_for(complete)
    server = _server_span_of(spans, "reachstore-query", rpc)
    assert server is not None, sorted({(s.service, s.name) for s in spans})
    trace = _trace(spans, server.trace_id)
    ids = {s.span_id for s in trace}
    # The query service's span hangs under a span the bridge exported (its gRPC client
    # span), which hangs under the bridge's request span: one tree, two processes.
    [client] = [s for s in trace if s.span_id == server.parent_span_id]
    assert client.service == "reachstore-bridge" and client.name == rpc
    roots = [s for s in trace if not s.parent_span_id]
    assert [r.service for r in roots] == ["reachstore-bridge"]
    assert all(s.parent_span_id in ids for s in trace if s.parent_span_id)


def test_a_log_line_written_during_a_traced_call_carries_its_trace_id(
    traced: RunningSystem, otlp: OtlpReceiver
) -> None:
    with httpx.Client(base_url=traced.http_url, timeout=30) as http:
        reply = http.post("/api/v1/query", json={"namespaces": [], "query": "log me"})
    assert reply.status_code == 400, reply.text
    # The query service logs the refusal; the line names the trace of the refused call.
    [entry] = _log_entries(
        traced, lambda e: e.get("component") == "query" and "rejected" in e.get("msg", "")
    )
    trace_id = entry["trace_id"]

    def services_of(spans: list[ExportedSpan]) -> set[str]:
        return {s.service for s in _trace(spans, trace_id)}

    services = services_of(otlp.wait_for(lambda spans: len(services_of(spans)) == 2))
    assert services == {"reachstore-bridge", "reachstore-query"}


def _log_entries(
    system: RunningSystem, wanted: Callable[[dict[str, Any]], bool], timeout: float = 5.0
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for line in list(system.output):
            start = line.find("{")
            try:
                entry = json.loads(line[start:]) if start >= 0 else None
            except ValueError:
                continue
            if isinstance(entry, dict) and wanted(entry):
                found.append(entry)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _logged_trace(system: RunningSystem, trace_id: str) -> bool:
    return bool(_log_entries(system, lambda e: e.get("trace_id") == trace_id))


def _audited_traces(system: RunningSystem, trace_id: str, timeout: float = 15.0) -> list[Any]:
    """The audit events that carry ``trace_id`` (they are shipped to the trail a moment
    after the call)."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=system.http_url, timeout=30) as http:
        while True:
            reply = http.get("/api/v1/audit/events", params={"trace_id": trace_id})
            assert reply.status_code == 200, reply.text
            events = reply.json().get("events", [])
            if events or time.monotonic() > deadline:
                return list(events)
            time.sleep(0.2)


def _submit(system: RunningSystem, ticket: str, headers: dict[str, str]) -> dict[str, object]:
    with httpx.Client(base_url=system.http_url, timeout=30) as http:
        reply = http.post(
            "/api/v1/reach/tasks",
            json={
                "entity_id": ticket,
                "actions": [
                    {
                        "name": "notify",
                        "channel": "hook",
                        "action_type": "notify",
                        "params": {"ticket": ticket},
                    }
                ],
            },
            headers=headers,
        )
    assert reply.status_code == 202, reply.text
    task = reply.json()["task"]
    assert isinstance(task, dict)
    return task


def _delivery_headers(receiver: HttpReceiver, ticket: str) -> dict[str, str]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for record in receiver.records:
            if isinstance(record.body, dict) and record.body.get("ticket") == ticket:
                return record.headers
        time.sleep(0.05)
    raise AssertionError(f"no delivery of {ticket} reached the receiver")


def test_a_reach_action_is_one_trace_from_the_bridge_to_the_receiver(
    traced: RunningSystem, otlp: OtlpReceiver, receiver: HttpReceiver
) -> None:
    task = _submit(traced, "TRACE-1", {"traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"})
    # The caller's valid trace is continued: the task, its audit and its sends carry it.
    assert task["trace_id"] == CALLER_TRACE
    headers = _delivery_headers(receiver, "TRACE-1")
    version, trace_id, parent, flags = headers["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", CALLER_TRACE, "01")

    def chain_of(spans: list[ExportedSpan]) -> list[tuple[str, str]]:
        """(service, name) from the span the receiver was told of up through its parents."""
        by_id = {s.span_id: s for s in _trace(spans, CALLER_TRACE)}
        chain, span = [], by_id.get(parent)
        while span is not None:
            chain.append((span.service, span.name))
            span = by_id.get(span.parent_span_id)
        return chain

    # Each process exports on its own timer: wait until the bridge's spans are in too.
    def complete(spans: list[ExportedSpan]) -> bool:
        chain = chain_of(spans)
        return bool(chain) and chain[-1][0] == "reachstore-bridge"

    spans = _trace(otlp.wait_for(complete, timeout=40), CALLER_TRACE)
    by_id = {s.span_id: s for s in spans}
    # The span the receiver was told about exists in the exported trace, and its chain
    # of parents runs back through reach to the bridge's request span.
    assert parent in by_id, sorted({(s.service, s.name) for s in spans})
    chain = chain_of(spans)
    services = [service for service, _ in chain]
    assert services[0] == "reachstore-reach" and services[-1] == "reachstore-bridge", chain
    assert ("reachstore-reach", "reach.task accepted") in chain
    assert ("reachstore-reach", "/reachstore.reach.v1.ReachService/SubmitTask") in chain
    # The caller's own span id is the bridge request span's remote parent, never exported.
    assert by_id.get("00f067aa0ba902b7") is None


HOSTILE = {
    "bad version": "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "zero trace id": "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    "zero span id": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
    "not hex": "00-4bf92f3577b34da6a3ce929d0e0e473Z-00f067aa0ba902b7-01",
    "extra field on 00": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
}
# Far more list members (W3C allows 32) and longer than the 512 characters a propagator
# must keep: no receiver should be handed this.
OVERSIZE_TRACESTATE = ",".join(f"k{i}=" + "v" * 200 for i in range(60))


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_traceparent_neither_breaks_the_call_nor_reaches_the_receiver(
    traced: RunningSystem, receiver: HttpReceiver, name: str
) -> None:
    value = HOSTILE[name]
    ticket = f"HOSTILE-{sorted(HOSTILE).index(name)}"
    task = _submit(traced, ticket, {"traceparent": value, "tracestate": OVERSIZE_TRACESTATE})
    trace_id = str(task["trace_id"])
    # The invalid header starts a new trace, never the caller's (or an all-zero) id.
    assert len(trace_id) == 32 and trace_id not in value and set(trace_id) != {"0"}
    headers = _delivery_headers(receiver, ticket)
    assert headers["traceparent"] != value
    assert headers["traceparent"].split("-")[1] == trace_id
    assert OVERSIZE_TRACESTATE not in headers.get("tracestate", "")
    assert len(headers.get("tracestate", "")) <= 512
    # The audit event of the submitting call names the trace that was exported.
    assert "SubmitTask" in [e["method"] for e in _audited_traces(traced, trace_id)]


def test_an_oversize_tracestate_with_a_valid_traceparent_is_not_passed_on(
    traced: RunningSystem, receiver: HttpReceiver
) -> None:
    task = _submit(
        traced,
        "STATE-1",
        {
            "traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01",
            "tracestate": OVERSIZE_TRACESTATE,
        },
    )
    assert task["trace_id"] == CALLER_TRACE
    headers = _delivery_headers(receiver, "STATE-1")
    assert headers["traceparent"].split("-")[1] == CALLER_TRACE
    assert len(headers.get("tracestate", "")) <= 512


@pytest.mark.parametrize(
    "otel_env",
    [
        {"OTEL_SERVICE_NAME": "reachstore-test"},
        {"OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
    ],
    ids=["unset", "exporter none", "sdk disabled"],
)
def test_a_system_not_configured_for_tracing_exports_nothing(
    tmp_path: Path, receiver: HttpReceiver, otel_env: dict[str, str]
) -> None:
    collector = OtlpReceiver().start()
    try:
        # The collector's address is known to the system, yet nothing asked to trace, so
        # nothing goes there (and callers still get their answers and trace ids).
        env = {**otel_env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.endpoint + "/v1/traces"}
        if "OTEL_SERVICE_NAME" in otel_env:
            env = dict(otel_env)
        system = _system(tmp_path, receiver, {**env, "OTEL_BSP_SCHEDULE_DELAY": "100"})
        system.start()
        try:
            with httpx.Client(base_url=system.http_url, timeout=30) as http:
                reply = http.post("/api/v1/query", json={"namespaces": ["x"], "query": "q"})
            assert reply.status_code == 200, reply.text
            task = _submit(
                system, "OFF-1", {"traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"}
            )
            assert task["trace_id"] == CALLER_TRACE
            headers = _delivery_headers(receiver, "OFF-1")
            assert headers["traceparent"].split("-")[1] == CALLER_TRACE
            assert _logged_trace(system, CALLER_TRACE)
        finally:
            assert system.stop() == 0, "".join(system.output[-40:])
        time.sleep(0.5)
        assert collector.requests == 0 and collector.spans == []
    finally:
        collector.stop()

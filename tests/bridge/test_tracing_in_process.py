"""One REST query traced in one process: the bridge (real uvicorn, real ``create_app``) and
a gRPC backend from the real ``create_server``, both built under ``otel.using`` with the
SDK's in-memory exporter, so every span either side records is at hand."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from reachstore_server.common import otel
from tests.bridge.conftest import (
    BACKEND_SERVICES,
    LoopThread,
    _start_backend,
    _start_bridge,
    _stop_bridge,
)

QUERY_RPC = "/reachstore.query.v1.QueryService/Query"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = otel.new_provider("test", {})
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with otel.using(provider):
        yield spans
    provider.shutdown()


def test_one_rest_query_is_one_trace_from_the_bridge_request_into_the_query_server(
    loop: LoopThread, exporter: InMemorySpanExporter
) -> None:
    from reachstore_server.bridge.app import create_app

    backend = loop.run(_start_backend())
    app = create_app(backend.settings(), deadline_s=5.0, services=BACKEND_SERVICES)
    bridge = loop.run(_start_bridge(app))
    try:
        with httpx.Client(base_url=bridge.url, timeout=10) as http:
            reply = http.post("/api/v1/query", json={"namespaces": ["a"], "query": "refunds"})
        assert reply.status_code == 200, reply.text
    finally:
        loop.run(_stop_bridge(bridge))
        loop.run(backend.server.stop(None))

    spans = exporter.get_finished_spans()
    [server] = [s for s in spans if s.name == QUERY_RPC and s.kind is SpanKind.SERVER]
    [client] = [s for s in spans if s.name == QUERY_RPC and s.kind is SpanKind.CLIENT]
    trace_id = server.context.trace_id
    trace = [s for s in spans if s.context.trace_id == trace_id]
    by_id = {s.context.span_id: s for s in trace}
    # server <- client <- the bridge's request span, which has no parent: one tree.
    assert server.parent is not None and server.parent.span_id == client.context.span_id
    assert client.parent is not None and client.parent.span_id in by_id
    roots = [s for s in trace if s.parent is None]
    assert len(roots) == 1 and roots[0].kind is SpanKind.SERVER
    assert roots[0].attributes is not None and roots[0].attributes.get("http.method") == "POST"
    assert all(s.parent.span_id in by_id for s in trace if s.parent is not None)
    # The query itself made exactly one trace (the readiness probe's health calls and the
    # query are the only requests; health is untraced).
    query_traces = {s.context.trace_id for s in spans if s.name == QUERY_RPC}
    assert query_traces == {trace_id}

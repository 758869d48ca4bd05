"""A small OTLP/HTTP trace receiver: what a collector would get, decoded with the OTLP
message types (``opentelemetry-proto``)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


@dataclasses.dataclass(frozen=True)
class ExportedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str


class OtlpReceiver:
    """Listens on 127.0.0.1:<free port>; ``endpoint`` is what OTEL_EXPORTER_OTLP_ENDPOINT
    takes. Every POST to /v1/traces is decoded and its spans kept."""

    def __init__(self) -> None:
        self.spans: list[ExportedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                receiver._keep(request)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _keep(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ExportedSpan(
                            service,
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(spans)

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait_for(
        self, done: Callable[[list[ExportedSpan]], bool], timeout: float = 20.0
    ) -> list[ExportedSpan]:
        """The spans received so far, once ``done`` holds for them (or at the timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if done(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)

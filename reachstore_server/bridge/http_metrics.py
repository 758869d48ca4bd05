"""Rate, status and latency of the bridge's HTTP requests, by route template.

- ``reachstore_http_requests_total{route,method,status}``
- ``reachstore_http_request_duration_seconds{route}``, a histogram.

``route`` is the template the request matched, as the proto writes it
(``/api/v1/namespaces/{namespace}/documents``), never the path a caller sent: ids in paths
would otherwise make one series per id, and a caller could grow the number of series
without bound. The fixed paths (``/healthz``, ``/readyz``, the OpenAPI document, the
console's files) are their own routes; every other request — an unknown path, or one the
Host/Origin guard refused before routing — counts under ``unmatched``. ``method`` is one
of the standard HTTP methods or ``OTHER``; ``status`` is the status sent, or ``499`` when
the caller went away before an answer.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Where the bridge writes the route it matched: a one-item list the middleware puts in the
# request's scope before routing.
ROUTE_KEY = "reachstore.route"
UNMATCHED = "unmatched"
CLIENT_GONE = "499"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def set_route(scope: Scope, route: str) -> None:
    """Names the route this request matched (called by the handler that matched it)."""
    holder = scope.get(ROUTE_KEY)
    if holder is not None:
        holder[0] = route


class HttpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "reachstore_http_requests_total",
            "HTTP requests answered by the bridge, by route template, method and status.",
            ["route", "method", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "reachstore_http_request_duration_seconds",
            "Time from a request's arrival to its answer's first byte, by route template.",
            ["route"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )


class HttpMetricsMiddleware:
    """Outermost ASGI middleware: every HTTP request is counted, refused ones included."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        route = [UNMATCHED]
        scope[ROUTE_KEY] = route
        status = [CLIENT_GONE]
        elapsed: list[float] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = str(int(message["status"]))
                elapsed.append(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            method: Any = scope.get("method", "")
            label = method if method in METHODS else "OTHER"
            self.metrics.requests.labels(route[0], label, status[0]).inc()
            seconds = elapsed[0] if elapsed else time.perf_counter() - started
            self.metrics.duration.labels(route[0]).observe(seconds)

"""The Starlette app: one generic handler for every API route, plus health and OpenAPI.

Per request: refuse hosts and web origins it does not serve (403, ``web_guard.py``),
match the route (404 vs 405), read the body under the size cap (413), insist on JSON (415;
a POST always, even empty), decode it strictly (400 naming the field), call the RPC with
a deadline and an ``x-request-id``, and render the reply with the route's success status.
Every failure, expected or not, leaves as the one error body; nothing reaches Starlette's
default 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.types import Receive, Scope, Send

from reachstore_server.bridge import error_responses, http_body, json_codec
from reachstore_server.bridge.backends import DEFAULT_SERVICES, Backends, backend_addresses
from reachstore_server.bridge.body_budget import BodyBudget
from reachstore_server.bridge.console import PREFIX as CONSOLE_PREFIX
from reachstore_server.bridge.console import Console
from reachstore_server.bridge.error_responses import JsonResponse
from reachstore_server.bridge.http_metrics import HttpMetrics, HttpMetricsMiddleware, set_route
from reachstore_server.bridge.openapi import build_openapi
from reachstore_server.bridge.request_builder import build_request
from reachstore_server.bridge.routes import Route, RouteTable
from reachstore_server.bridge.web_guard import WebGuard, WebGuardMiddleware
from reachstore_server.common import errors, otel, tracing
from reachstore_server.common.config import Settings
from reachstore_server.common.metrics_registry import component_registries

log = logging.getLogger(__name__)

DEFAULT_DEADLINE_S = 60.0
DEFAULT_READINESS_TIMEOUT_S = 2.0
OPENAPI_PATH = "/api/v1/openapi.json"
CONSOLE_ROUTE = CONSOLE_PREFIX + "/{file}"

Handler = Callable[[Request, str], Awaitable[Response]]


# Trace headers travel on to the services (and from reach to the receivers).
_TRACE_HEADERS = ("traceparent", "x-trace-id")


def _credentials(request: Request) -> list[tuple[str, str]]:
    """The caller's key, passed through as gRPC metadata: the services authenticate every
    call themselves, so the bridge forwards the credential and vouches for nothing. Trace
    headers go along when they are printable ASCII."""
    metadata = [
        (name, request.headers[name])
        for name in _TRACE_HEADERS
        if name in request.headers and _printable_ascii(request.headers[name])
    ]
    header = request.headers.get("authorization")
    if header is None and "x-api-key" in request.headers:
        header = f"Bearer {request.headers['x-api-key']}"
    if header is None:
        return metadata
    # gRPC metadata only carries printable ASCII; anything else cannot be a key of ours.
    if not _printable_ascii(header):
        raise errors.ReachstoreError(errors.AUTH_MALFORMED)
    return [*metadata, ("authorization", header)]


def _printable_ascii(value: str) -> bool:
    return value.isascii() and value.isprintable()


# Bodies larger than this are decoded and built into their request in a worker thread:
# at up to 200,000 values (http_body.MAX_JSON_VALUES), that takes the bridge 0.2 s, and
# up to 1.8 s for values of a Struct (protobuf builds those in Python), during which the
# event loop would answer no one. In a thread, the loop gets the interpreter every few
# milliseconds meanwhile.
OFF_LOOP_BYTES = 64 * 1024


def _message(
    route: Route, raw: bytes, path_params: dict[str, str], query: Sequence[tuple[str, str]]
) -> Message:
    """The request message of a call, from its body, path and query."""
    body: dict[str, Any] | None = None
    if route.body == "*":
        body = http_body.parse_json_object(raw) if raw else {}
    elif raw:
        raise errors.invalid(
            "body", "this route takes no request body; send fields as query parameters"
        )
    return build_request(route, body, path_params, query)


class Bridge:
    """The ASGI endpoint behind every path. Holds the route table and the backends."""

    def __init__(
        self,
        table: RouteTable,
        backends: Backends,
        *,
        deadline_s: float,
        readiness_timeout_s: float,
        max_body_bytes: int,
    ) -> None:
        self.table = table
        self.backends = backends
        self.deadline_s = deadline_s
        self.readiness_timeout_s = readiness_timeout_s
        self.max_body_bytes = max_body_bytes
        self.bodies = BodyBudget()
        # Rendered once: the document only changes when the descriptors do.
        self._openapi = json.dumps(build_openapi(table), separators=(",", ":")).encode()
        self._builtins: dict[str, dict[str, Handler]] = {
            "/healthz": {"GET": self._healthz},
            "/readyz": {"GET": self._readyz},
            OPENAPI_PATH: {"GET": self._openapi_doc},
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        request_id = uuid.uuid4().hex
        started = time.perf_counter()
        try:
            with tracing.bound(tracing.caller_trace(request.headers.get("traceparent", ""))):
                response = await self._dispatch(request, request_id)
        except ClientDisconnect:
            log.info("client went away (request_id=%s)", request_id)
            return
        except errors.ReachstoreError as exc:
            response = error_responses.from_error(exc, request_id)
        except Exception:  # noqa: BLE001 - the one place an unexpected bridge error is caught
            log.exception(
                "bridge error on %s %s (request_id=%s)",
                request.method,
                scope.get("path"),
                request_id,
            )
            response = error_responses.from_error(
                errors.ReachstoreError(
                    errors.INTERNAL,
                    f"unexpected bridge error; request_id={request_id}",
                    structured_data={"request_id": request_id},
                ),
                request_id,
            )
        response.headers["X-Request-Id"] = request_id
        await response(scope, receive, send)
        log.debug(
            "%s %s -> %d in %.1f ms (request_id=%s)",
            request.method,
            scope.get("path"),
            response.status_code,
            (time.perf_counter() - started) * 1000,
            request_id,
        )

    async def _dispatch(self, request: Request, request_id: str) -> Response:
        raw_path = _raw_path(request.scope)
        builtin = self._builtins.get(raw_path)
        if builtin is not None:
            set_route(request.scope, raw_path)
            handler = builtin.get(request.method)
            if handler is None:
                return _method_not_allowed(request.method, raw_path, sorted(builtin), request_id)
            return await handler(request, request_id)
        match = self.table.match(request.method, raw_path)
        if match.route is None:
            if match.allowed:
                return _method_not_allowed(request.method, raw_path, match.allowed, request_id)
            raise errors.ReachstoreError(
                errors.ROUTE_NOT_FOUND,
                f"no API route matches {raw_path}; see {OPENAPI_PATH}",
                structured_data={"path": raw_path, "openapi": OPENAPI_PATH},
            )
        set_route(request.scope, match.route.template)
        return await self._call(request, match.route, match.path_params, request_id)

    async def _call(
        self, request: Request, route: Route, path_params: dict[str, str], request_id: str
    ) -> Response:
        async with self.bodies.body() as take:
            return await self._call_holding(request, route, path_params, request_id, take)

    async def _call_holding(
        self,
        request: Request,
        route: Route,
        path_params: dict[str, str],
        request_id: str,
        take: Callable[[int], Awaitable[None]],
    ) -> Response:
        """The call, its body's bytes held in the budget (``take``) until the answer."""
        raw = await http_body.read_body(request, self.max_body_bytes, take)
        query = request.query_params.multi_items()
        if len(raw) > OFF_LOOP_BYTES:
            message = await asyncio.to_thread(_message, route, raw, path_params, query)
        else:
            message = _message(route, raw, path_params, query)
        try:
            reply = await self.backends.call(
                route,
                message,
                timeout=self.deadline_s,
                metadata=[("x-request-id", request_id), *_credentials(request)],
            )
        except grpc.aio.AioRpcError as exc:
            return error_responses.from_rpc_error(exc, route.service.full_name, request_id)
        return JsonResponse(json_codec.message_to_dict(reply), route.success_status)

    async def _healthz(self, request: Request, request_id: str) -> Response:
        return JsonResponse({"status": "ok"})

    async def _readyz(self, request: Request, request_id: str) -> Response:
        names = [service.full_name for service in self.table.services]
        states = await self.backends.health_of(names, self.readiness_timeout_s)
        down = [name for name, state in states.items() if state != "serving"]
        if not down:
            return JsonResponse({"status": "ok", "services": states})
        error = errors.ReachstoreError(
            errors.SERVICE_UNAVAILABLE,
            f"not serving: {', '.join(down)}",
            structured_data={"services": states, "down": down},
        )
        return error_responses.from_error(error, request_id)

    async def _openapi_doc(self, request: Request, request_id: str) -> Response:
        return Response(self._openapi, media_type="application/json")


def _raw_path(scope: Scope) -> str:
    # The raw path keeps %2F inside an id from splitting it into two segments.
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else scope["path"]


def _method_not_allowed(
    method: str, path: str, allowed: Sequence[str], request_id: str
) -> Response:
    error = errors.ReachstoreError(
        errors.METHOD_NOT_ALLOWED,
        f"{method} is not allowed on {path}; use {', '.join(allowed)}",
        structured_data={"method": method, "allowed": list(allowed)},
    )
    # RFC 9110: a 405 must say which methods the resource supports.
    return error_responses.from_error(error, request_id, {"Allow": ", ".join(allowed)})


class _CountedConsole:
    """The console's files under one metrics route. A class, not a function: Starlette
    calls a function endpoint with a request, an object with the ASGI triple."""

    def __init__(self, console: Console) -> None:
        self._console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        set_route(scope, CONSOLE_ROUTE)  # one series for all of the console's files
        await self._console(scope, receive, send)


def create_app(
    settings: Settings,
    channels: Mapping[str, grpc.aio.Channel] | None = None,
    *,
    services: Sequence[ServiceDescriptor] = DEFAULT_SERVICES,
    deadline_s: float = DEFAULT_DEADLINE_S,
    readiness_timeout_s: float = DEFAULT_READINESS_TIMEOUT_S,
    max_body_bytes: int = http_body.MAX_BODY_BYTES,
    http_metrics: HttpMetrics | None = None,
) -> Starlette:
    """The bridge app. ``channels`` (service full name -> channel) replace the channels the
    app would open from ``settings``; the caller keeps ownership of them. Requests are
    counted in ``http_metrics`` (a registry of the app's own without), which
    ``app.state.http_metrics`` holds for the metrics port."""
    http_metrics = http_metrics or HttpMetrics(component_registries().served)
    backends = Backends(backend_addresses(settings), channels, settings.tls)
    bridge = Bridge(
        RouteTable(services),
        backends,
        deadline_s=deadline_s,
        readiness_timeout_s=readiness_timeout_s,
        max_body_bytes=max_body_bytes,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await backends.close()

    # An ASGI endpoint (not a function) makes Starlette pass every method through, so 405
    # and 404 answers are ours, in the error shape, never Starlette's plain-text pages.
    # The operator console's static files; the page itself calls the API routes below.
    console_counted = _CountedConsole(Console())
    routes = [
        StarletteRoute(CONSOLE_PREFIX, endpoint=console_counted),
        StarletteRoute(CONSOLE_PREFIX + "/{file:path}", endpoint=console_counted),
        StarletteRoute("/{path:path}", endpoint=bridge),
    ]
    guard = WebGuard.of(settings.http_allowed_hosts, settings.http_allowed_origins, settings.listen)
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        # Tracing outermost: refused requests are traced too; then the HTTP metrics.
        middleware=[
            *otel.asgi_middleware(),
            Middleware(HttpMetricsMiddleware, metrics=http_metrics),
            Middleware(WebGuardMiddleware, guard=guard),
        ],
    )
    # "{path:path}" does not match a path holding a newline (%0A); such paths still get
    # our 404 body rather than Starlette's plain-text one.
    app.router.default = bridge
    app.state.bridge = bridge
    app.state.http_metrics = http_metrics
    return app

"""OpenTelemetry tracing: off unless the standard ``OTEL_*`` variables turn it on.

Off (the default) costs one ``enabled()`` check where a span would start: no OpenTelemetry
module is imported, no tracer provider is installed, nothing is exported. On, each process
installs one SDK tracer provider; the gRPC servers and channels, the bridge's ASGI app and
the webhook channel's HTTP client are instrumented with the official
``opentelemetry-instrumentation-*`` packages (the ``[otel]`` extra), SQL statements by
``instrument_engine`` here. The services run without that extra installed: ``setup`` then
logs once that tracing stays off.

What turns tracing on, and why these and no others (docs/OPERATIONS.md, "Tracing"):
``OTEL_TRACES_EXPORTER`` naming an exporter other than ``none``, or an OTLP endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT``/``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``). The SDK's own
default exporter is OTLP to localhost, which would send spans somewhere nobody asked for;
``OTEL_SDK_DISABLED=true`` wins over everything.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from reachstore_server.common.config_errors import ConfigError

log = logging.getLogger(__name__)

_EXPORTERS = ("otlp", "console", "none")
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

# The tracer provider this process installed; None while tracing is off.
_provider: Any = None
# A span id the next span started in this context must carry (``task_span``).
_forced_span_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "reachstore_forced_span_id", default=None
)


def enabled() -> bool:
    """Whether this process traces: the one check every instrumented path makes first."""
    return _provider is not None


def configured(env: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` variables ask for tracing (see the module's comment)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = _exporter_names(env)
    if names:
        return names != ["none"]
    return any(env.get(name, "").strip() for name in _ENDPOINTS)


def _exporter_names(env: Mapping[str, str]) -> list[str]:
    raw = env.get("OTEL_TRACES_EXPORTER", "")
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    for name in names:
        if name not in _EXPORTERS:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (known: {', '.join(_EXPORTERS)})"
            )
    if "none" in names and len(names) > 1:
        raise ConfigError("OTEL_TRACES_EXPORTER: 'none' cannot be combined with other exporters")
    return names


def setup(component: str, env: Mapping[str, str] | None = None) -> bool:
    """Turns tracing on for this process when the variables ask for it; True if it did.

    Called once by each component's composition root, before its servers and clients are
    built (they ask ``enabled()`` when they are made)."""
    env = os.environ if env is None else env
    if _provider is not None or not configured(env):
        return _provider is not None
    protocol = env.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    ).strip()
    if protocol not in ("", "http/protobuf"):
        raise ConfigError(
            "OTEL_EXPORTER_OTLP_PROTOCOL: only http/protobuf is supported "
            f"(got {protocol!r}); point it at the collector's OTLP/HTTP port (4318)"
        )
    try:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        log.warning(
            "OTEL_* variables ask for tracing but the [otel] extra is not installed; "
            "tracing stays off (pip install 'reachstore[otel]')"
        )
        return False
    provider = new_provider(component, env)
    names = _exporter_names(env) or ["otlp"]
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    install(provider)
    log.info("tracing on: exporting spans with %s", ", ".join(names))
    return True


def start(component: str) -> None:
    """``setup`` for a composition root: a bad variable ends the start-up with its name."""
    try:
        setup(component)
    except ConfigError as exc:
        sys.stderr.write(f"{component}: {exc}\n")
        raise SystemExit(2) from None


def new_provider(component: str, env: Mapping[str, str] | None = None) -> Any:
    """An SDK tracer provider for ``component`` (no span processor yet). Its service name
    is ``OTEL_SERVICE_NAME`` when set, else ``reachstore-<component>``."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    env = os.environ if env is None else env
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: f"reachstore-{component}"}
    return TracerProvider(resource=Resource.create(attributes), id_generator=_id_generator())


def install(provider: Any) -> None:
    """Makes ``provider`` this process's tracer provider (once per process: the API allows
    one global provider). The instrumentation here is always handed ``provider``
    explicitly, so ``using`` can trace one block of a test without the global."""
    from opentelemetry import trace

    global _provider
    trace.set_tracer_provider(provider)
    _provider = trace.get_tracer_provider()


@contextlib.contextmanager
def using(provider: Any) -> Iterator[Any]:
    """Traces with ``provider`` inside the block (servers, channels and apps made inside
    are instrumented), leaving the process's global provider alone."""
    global _provider
    before = _provider
    _provider = provider
    try:
        yield provider
    finally:
        _provider = before


def _id_generator() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class _Ids(RandomIdGenerator):
        """Random ids, except a span id ``task_span`` asks for."""

        def generate_span_id(self) -> int:
            forced = _forced_span_id.get()
            return forced if forced is not None else super().generate_span_id()

    return _Ids()


def server_interceptors() -> list[Any]:
    """The gRPC server's tracing interceptor (outermost, so the span covers the whole call
    and the call's audit event sees its trace id); none while tracing is off."""
    if not enabled():
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters

    # Health and reflection stay untraced: their streaming handlers write to the context
    # instead of yielding, which the instrumentation's stream wrapper cannot run, and a
    # health probe every few seconds is noise in a trace store.
    untraced = filters.any_of(filters.health_check(), filters.service_prefix("grpc.reflection"))
    return [aio_server_interceptor(tracer_provider=_provider, filter_=filters.negate(untraced))]


def client_interceptors() -> list[Any]:
    """The gRPC channel's tracing interceptors: a client span per call, and its
    ``traceparent`` in the call's metadata (replacing any the caller put there)."""
    if not enabled():
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors, filters

    untraced = filters.health_check()
    return list(
        aio_client_interceptors(tracer_provider=_provider, filter_=filters.negate(untraced))
    )


def asgi_middleware() -> list[Any]:
    """The bridge's ASGI tracing middleware (a server span per request, continuing a valid
    incoming ``traceparent``); none while tracing is off."""
    if not enabled():
        return []
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from starlette.middleware import Middleware

    return [Middleware(OpenTelemetryMiddleware, tracer_provider=_provider)]


def instrument_httpx(client: Any) -> Any:
    """A client span per request of ``client``, whose ``traceparent`` the receiver gets."""
    if enabled():
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        HTTPXClientInstrumentor.instrument_client(client, tracer_provider=_provider)
    return client


def instrument_engine(engine: Any) -> None:
    """A client span per SQL statement run by ``engine``, under the span of the call that
    ran it (``asyncio.to_thread`` carries the context to the worker thread). The statement
    is recorded as SQLAlchemy sends it: placeholders, never the bound values."""
    if not enabled():
        return
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from sqlalchemy import event

    tracer = trace.get_tracer("reachstore.sql", tracer_provider=_provider)
    system = engine.dialect.name

    def before(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        operation = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "SQL"
        context._reachstore_span = tracer.start_span(
            f"{operation} {system}",
            kind=SpanKind.CLIENT,
            attributes={"db.system.name": system, "db.query.text": statement[:2000]},
        )

    def after(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        span = getattr(context, "_reachstore_span", None)
        if span is not None:
            span.end()

    def failed(exception_context: Any) -> None:
        context = exception_context.execution_context
        span = getattr(context, "_reachstore_span", None) if context is not None else None
        if span is not None:
            error = exception_context.original_exception
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.end()

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    event.listen(engine, "handle_error", failed)


def current_ids() -> tuple[str, str] | None:
    """The current span's (trace id, span id) as lowercase hex; None when off or no span."""
    if not enabled():
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def current_trace_id() -> str:
    ids = current_ids()
    return ids[0] if ids else ""


def current_traceparent() -> str:
    """The W3C ``traceparent`` naming the current span as parent; "" when there is none."""
    ids = current_ids()
    return f"00-{ids[0]}-{ids[1]}-01" if ids else ""


def _task_span_id(task_id: str) -> int:
    # Derived from the task id so that the worker that later sends the task's actions
    # (maybe on another replica) can name this span as their parent without storing it.
    return int(hashlib.sha256(f"reach-task:{task_id}".encode()).hexdigest()[:16], 16) or 1


def task_span(task_id: str, trace_id: str) -> None:
    """Records the acceptance of a reach task as a span whose id the task's sends derive
    (``action_span``), when ``trace_id`` is the current trace's."""
    if current_trace_id() != trace_id or not trace_id:
        return
    from opentelemetry import trace

    token = _forced_span_id.set(_task_span_id(task_id))
    try:
        span = trace.get_tracer(__name__, tracer_provider=_provider).start_span(
            "reach.task accepted", attributes={"reachstore.task_id": task_id}
        )
    finally:
        _forced_span_id.reset(token)
    span.end()


@contextlib.contextmanager
def action_span(
    name: str, task_id: str, trace_id: str, attributes: dict[str, str]
) -> Iterator[None]:
    """A span for one step of a reach action, child of its task's acceptance span, so a
    send made long after the submitting call still sits in that call's trace."""
    if not enabled():
        yield
        return
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    try:
        trace_int = int(trace_id, 16)
    except ValueError:
        trace_int = 0
    parent = None
    if len(trace_id) == 32 and trace_int:
        parent = trace.set_span_in_context(
            NonRecordingSpan(
                SpanContext(
                    trace_int,
                    _task_span_id(task_id),
                    is_remote=True,
                    trace_flags=TraceFlags(TraceFlags.SAMPLED),
                )
            )
        )
    tracer = trace.get_tracer(__name__, tracer_provider=_provider)
    with tracer.start_as_current_span(name, context=parent, attributes=attributes):
        yield

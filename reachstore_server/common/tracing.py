"""Trace ids: the current span's when tracing is on (``otel.py``), else the caller's (W3C
``traceparent`` or ``x-trace-id``); carried into log lines, audit events and on to the
receivers of reach actions."""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import grpc

from reachstore_server.common import otel

TRACE_RE = re.compile(r"[0-9a-f]{32}")
# W3C trace context: version 00 has exactly these four fields; a later version may append
# more after a dash. Version ff and all-zero ids are invalid and the header is ignored.
_TRACEPARENT_RE = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


def caller_trace(value: str) -> str:
    """The trace id of a caller's ``traceparent`` value, or empty when it is not valid."""
    match = _TRACEPARENT_RE.fullmatch(value.strip())
    if match is None:
        return ""
    version, trace_id, span_id, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _ZERO_TRACE:
        return ""
    return "" if span_id == _ZERO_SPAN else trace_id


def trace_from_metadata(metadata: Sequence[tuple[str, str | bytes]]) -> str:
    """The call's trace id: the current span's when tracing is on, else the caller's W3C
    ``traceparent``, else its ``x-trace-id``, else empty."""
    current = otel.current_trace_id()
    if current:
        return current
    values = {k: v if isinstance(v, str) else v.decode("latin-1") for k, v in metadata}
    from_traceparent = caller_trace(values.get("traceparent", ""))
    if from_traceparent:
        return from_traceparent
    candidate = values.get("x-trace-id", "").strip().lower()
    return candidate if TRACE_RE.fullmatch(candidate) and candidate != _ZERO_TRACE else ""


# The caller's trace id for the call in progress, for log lines (``logs.py``).
_call_trace: contextvars.ContextVar[str] = contextvars.ContextVar("reachstore_trace", default="")


def log_trace_id() -> str:
    """The trace id a log line written now carries: the current span's when tracing is on,
    else that of the call in progress (empty outside a call)."""
    return otel.current_trace_id() or _call_trace.get()


@contextlib.contextmanager
def bound(trace_id: str) -> Iterator[None]:
    """Log lines written inside carry ``trace_id`` (when tracing is off)."""
    token = _call_trace.set(trace_id)
    try:
        yield
    finally:
        _call_trace.reset(token)


class TraceInterceptor(grpc.aio.ServerInterceptor):
    """Binds each call's trace id for its log lines. Separate from the call guard
    (``grpc_server.py``) so that each wrapping stays about one concern."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        behavior = handler.unary_unary
        metadata = tuple(handler_call_details.invocation_metadata or ())

        async def traced(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with bound(trace_from_metadata(metadata)):
                return await behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            traced,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

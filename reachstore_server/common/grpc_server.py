"""gRPC bootstrap shared by every service: health, reflection, error translation, limits.

``create_server`` is the one factory; tests bind it to port 0. Every handler runs behind
``_CallGuard``: it authenticates the call (``auth.py``) and is the one place where our
exceptions become rich gRPC statuses and an unexpected exception becomes an INTERNAL
status with a request id instead of a stack trace on the wire.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import inspect
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import grpc
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.common import (
    database_errors,
    errors,
    identity,
    limits,
    nul_strings,
    otel,
    wire,
)
from reachstore_server.common.admission import (
    DEFAULT_LIMITS,
    Admission,
    AdmissionLimits,
    Kind,
    Ticket,
)
from reachstore_server.common.auth import Authenticator, Caller, scopes_by_method
from reachstore_server.common.limits import CallKind, RequestLimiter
from reachstore_server.common.request_reads import RequestReads
from reachstore_server.common.rpc_metrics import NONE, RpcMetrics, category_name, partial_category
from reachstore_server.common.tls import PLAIN, TlsFiles
from reachstore_server.common.tracing import TraceInterceptor

log = logging.getLogger(__name__)

# Batches carry up to 16 MiB of text; leave room for the envelope.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]

Registrar = Callable[[grpc.aio.Server], None]

# How long a call may wait in gRPC's own queue for the process to take it (seconds, whole);
# past that gRPC cancels it without any of our code running (docs/OPERATIONS.md, "Load
# shedding"). Admission bounds the calls a process serves, but it runs in the handler, on
# the event loop: a process starved of CPU takes calls off its connections slower than they
# come, and without this bound they waited there until their callers' deadlines (gRPC's own
# default is 30 s) before admission could refuse them.
UNTAKEN_WAIT_OPTION = "grpc.server_max_unrequested_time_in_server"


# What a caller may send ahead of the service reading it stays gRPC's default per-call window
# (64 KiB) instead of growing with the measured bandwidth-delay product: calls waiting for
# a place to be read (or refused) are not read (``request_reads.py``), and with growing
# windows their callers had sent megabytes each into the process's buffers anyway; a flood
# of large batches grew an ingest process by 1 GiB and more (tests/e2e/
# test_attack18_large_bodies.py). The cost: a single large request from a distant caller
# moves at most 64 KiB per round trip (16 MiB takes 5 s at 20 ms), docs/OPERATIONS.md.
FIXED_RECEIVE_WINDOW = ("grpc.http2.bdp_probe", 0)


def untaken_wait_s(admission: AdmissionLimits) -> int:
    """As long as a call may wait for a slot (``REACHSTORE_ADMIT_WAIT_MS``), at least 1 s:
    a call not even taken in that time could not have started in time either."""
    return max(1, math.ceil(admission.max_wait_s))


class _Status(
    collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status
):
    pass


# Tells a client's gRPC retry policy not to send the call again: the service answered, so
# the answer stands (callers decide from its category and retry_after_ms). Channel-level
# retries are for replicas that did not answer at all.
NO_TRANSPORT_RETRY = ("grpc-retry-pushback-ms", "-1")


async def abort_with(context: grpc.aio.ServicerContext, error: errors.ReachstoreError) -> None:
    """Ends the call with ``error`` as a rich status (google.rpc details + PartialFailure)."""
    status = rpc_status.to_status(errors.fitted_rpc_status(error))
    await context.abort_with_status(
        _Status(status.code, status.details, (*status.trailing_metadata, NO_TRANSPORT_RETRY))
    )


class AuditedCall(Protocol):
    """The audit record of one call in progress (``reachstore_server/audit_client/calls.py``)."""

    async def end(self, status: grpc.StatusCode, error_code: str = "", category: str = "") -> None:
        """Records how the call ended, unless its change already carried its event."""


class CallAudit(Protocol):
    def begin(
        self,
        method: str,
        scope: str,
        request: Any,
        caller: Caller,
        metadata: Sequence[tuple[str, str | bytes]],
    ) -> AuditedCall | None:
        """Starts the record of an audited call; None for a call that is not audited."""


# (request, call metadata) -> whether the call is a verified forward of another member's.
ForwardedCheck = Callable[[Any, Sequence[tuple[str, str | bytes]]], bool]


@dataclasses.dataclass(frozen=True)
class Guards:
    """What stands in front of every handler: authentication, call rates, admission (the
    bound of calls served at once), the audit, and the per-call rate, error and duration
    counts."""

    authenticator: Authenticator | None = None
    limiter: RequestLimiter | None = None
    audit: CallAudit | None = None
    metrics: RpcMetrics | None = None
    admission: Admission | None = None
    # The methods ``admission`` bounds, and whether each is a read or a write.
    admitted: Mapping[str, Admitted] = dataclasses.field(default_factory=dict)
    # The requests being read (``request_reads.py``).
    reads: RequestReads = dataclasses.field(
        default_factory=lambda: RequestReads(DEFAULT_LIMITS.concurrency, DEFAULT_LIMITS.max_wait_s)
    )
    # Whether a call is one another member of the deployment forwarded, signed, after it
    # charged and audited the caller's call itself (reachstore_server/query/shards/): such a
    # call is authenticated and admitted, but neither charged nor audited again.
    forwarded: ForwardedCheck | None = None


def _wrap_unary(
    behavior: Callable[..., Awaitable[Any]],
    method: str,
    guards: Guards,
    metadata: Sequence[tuple[str, str | bytes]],
) -> Callable[..., Awaitable[Any]]:
    authenticator = guards.authenticator
    metrics = guards.metrics
    admission = guards.admission
    admitted = guards.admitted.get(method)
    kind: Kind = admitted.kind if admitted is not None else "read"

    async def handler(requests: object, context: grpc.aio.ServicerContext) -> Any:
        """Serves one call, reading its request first (``request_reads.py``; served as a
        client-streaming call, ``requests`` is left unread)."""
        started = time.perf_counter()
        # How the call ended, for the metrics: (gRPC status name, failure category).
        outcome = ("UNKNOWN", NONE)
        token = None
        audited: AuditedCall | None = None
        undecodable: _Undecodable | None = None
        who: Caller | None = None
        scope = ""
        ticket: Ticket | None = None
        abandoned = False
        try:
            # The request's place is held until admission has taken or refused the call.
            async with guards.reads.held(context, kind) as request:
                if isinstance(request, _Undecodable):
                    # Authenticated and audited like any other call (as an empty request),
                    # then refused naming the field; admission reads ``wait_ms`` of it too.
                    undecodable = request
                    request = undecodable.empty
                if (
                    admission is not None
                    and admitted is not None
                    and not (admitted.polls and request.wait_ms > 0)
                ):
                    # First of all: looking up the caller's key and charging its rate are
                    # reads of the database too, and a flood of made-up keys must be shed
                    # like any other call, not cost a read each before the service asks if
                    # it has room. Before the audit and the work, so a refused call changed
                    # nothing.
                    ticket = await admission.enter(method, admitted.kind, context.time_remaining())
            forwarded = guards.forwarded is not None and guards.forwarded(request, metadata)
            if authenticator is not None and authenticator.guards(method):
                who = authenticator.authenticate(method, metadata)
                scope = authenticator.scope_of(method)
                # The keyless local caller (development mode) is not rate limited.
                if guards.limiter is not None and who.key_id and not forwarded:
                    await _check_rate(guards.limiter, who, scope)
                token = identity.set_caller(who)
            if who is not None and guards.audit is not None and not forwarded:
                audited = guards.audit.begin(method, scope, request, who, metadata)
            if undecodable is not None:
                raise undecodable.error
            nul_strings.check(request)
            result = await behavior(request, context)
            outcome = ("OK", partial_category(result))
            if audited is not None:
                await audited.end(grpc.StatusCode.OK)
            return result
        except errors.ReachstoreError as exc:
            log.info("rejected %s: %s %s", method, exc.code, exc.failure.message)
            outcome = (exc.spec.grpc_status.name, category_name(exc.failure.category))
            if audited is not None:
                category = pf_pb2.Category.Name(exc.failure.category)
                await audited.end(
                    exc.spec.grpc_status, exc.code, category.removeprefix("CATEGORY_").lower()
                )
            await abort_with(context, exc)
        except grpc.aio.AbortError:
            if outcome[0] == "UNKNOWN":  # a handler that aborted by itself
                code = context.code()
                outcome = (code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN", NONE)
            raise
        except asyncio.CancelledError:
            abandoned = True
            outcome = _abandoned(context)
            # The caller gave up (its deadline ran out, or it cancelled) while the call was
            # under way, perhaps after a change had reached the outside world: the trail
            # must still say how the call ended.
            if audited is not None:
                await _end_abandoned(audited, context)
            raise
        except Exception as exc:  # noqa: BLE001 - the one place unexpected errors end
            if database_errors.is_transient(exc):
                log.warning("database unavailable in %s: %s", method, type(exc).__name__)
                error = errors.ReachstoreError(
                    errors.DATABASE_UNAVAILABLE,
                    "the service could not reach its database; retry after the advised wait",
                )
                outcome = (error.spec.grpc_status.name, category_name(error.spec.category))
                await _end_unrecorded(audited, error.spec.grpc_status, error.code)
                await abort_with(context, error)
            request_id = uuid.uuid4().hex
            log.exception("internal error in %s (request_id=%s)", method, request_id)
            outcome = ("INTERNAL", category_name(errors.INTERNAL.category))
            await _end_unrecorded(audited, grpc.StatusCode.INTERNAL, errors.INTERNAL.code)
            await abort_with(
                context,
                errors.ReachstoreError(
                    errors.INTERNAL,
                    f"unexpected server error; request_id={request_id}",
                    structured_data={"request_id": request_id},
                ),
            )
        finally:
            if ticket is not None and admission is not None:
                # An abandoned call's time says how long its caller waited, not what the
                # call costs: a caller that opened calls and dropped them would otherwise
                # make the method look too slow for every deadline.
                admission.leave(ticket, served=not abandoned)
            if token is not None:
                identity.reset_caller(token)
            if metrics is not None:
                metrics.observe(method, outcome[0], outcome[1], time.perf_counter() - started)

    return handler


def _abandoned(context: grpc.aio.ServicerContext) -> tuple[str, str]:
    """A call its caller gave up on: its deadline ran out, or it cancelled."""
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        return grpc.StatusCode.DEADLINE_EXCEEDED.name, "timeout"
    return grpc.StatusCode.CANCELLED.name, "transient"


async def _end_unrecorded(audited: AuditedCall | None, status: grpc.StatusCode, code: str) -> None:
    """Records a call that failed on the server's side. When the database is what failed,
    the event cannot be written either (the outbox lives there): the caller still gets
    its error, and the log says what went unrecorded."""
    if audited is None:
        return
    category = pf_pb2.Category.Name(errors.lookup(code).category)
    try:
        await audited.end(status, code, category.removeprefix("CATEGORY_").lower())
    except Exception as exc:  # noqa: BLE001 - the call's own error must still reach the caller
        if not database_errors.is_transient(exc):
            raise
        log.warning("audit event of a failed call not written: %s", type(exc).__name__)


async def _end_abandoned(audited: AuditedCall, context: grpc.aio.ServicerContext) -> None:
    remaining = context.time_remaining()
    ran_out = remaining is not None and remaining <= 0
    status = grpc.StatusCode.DEADLINE_EXCEEDED if ran_out else grpc.StatusCode.CANCELLED
    try:
        # The event is written on a worker thread, which a second cancellation of this task
        # does not stop: the write completes even if this await is cut short.
        await audited.end(status, status.name, "timeout" if ran_out else "transient")
    except asyncio.CancelledError:
        pass
    except Exception as exc:  # noqa: BLE001 - the cancellation must still propagate
        log.warning("audit event of an abandoned call not written: %s", type(exc).__name__)


async def _check_rate(limiter: RequestLimiter, who: Caller, scope: str) -> None:
    """Reads count against the query rate, everything else against the write rate. Most
    calls are settled by tokens this process holds; the others wait for the shared
    buckets in a thread, off the event loop."""
    kind: CallKind = "query" if scope == "read" else "write"
    wait = limiter.check_call_now(who.tenant, who.key_id, kind)
    if wait is None:
        wait = await asyncio.to_thread(limiter.check_call, who.tenant, who.key_id, kind)
    if wait > 0:
        raise errors.ReachstoreError(
            errors.RATE_LIMITED,
            f"too many {kind} calls for this key or its tenant; retry in {wait:.3f} s",
            retry_after_ms=limits.retry_after_ms(wait),
            structured_data={"kind": kind},
        )


class _CallGuard(grpc.aio.ServerInterceptor):
    """Authenticates each call to our services, applies the call-rate limits, then runs it
    with our error translation."""

    def __init__(self, guards: Guards) -> None:
        self._guards = guards

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        if handler.unary_unary is None:
            return _streaming_read_within_bounds(handler, self._guards.reads)
        wrapped = _wrap_unary(
            handler.unary_unary,
            method,
            self._guards,
            tuple(handler_call_details.invocation_metadata or ()),
        )
        # Client-streaming on our side, unary on the wire: the handler reads the request
        # itself, within bounds (``request_reads.py``), where gRPC would read it whole
        # before any of our code ran.
        return grpc.stream_unary_rpc_method_handler(
            wrapped,
            request_deserializer=_tolerant(handler.request_deserializer, method),
            response_serializer=handler.response_serializer,
        )


def _streaming_read_within_bounds(
    handler: grpc.RpcMethodHandler, reads: RequestReads
) -> grpc.RpcMethodHandler:
    """A streaming method (health's ``Watch``, reflection) served so that each of its
    requests is read within the bounds of ``request_reads.py`` too: gRPC reads a
    streaming call's messages as they come, as it does a unary call's, and calls that never
    finished sending theirs grew a process without bound
    (tests/e2e/test_attack18_partial_requests.py). Their requests are reads."""

    async def requests(context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        while (request := await reads.read(context, "read", end_allowed=True)) is not grpc.aio.EOF:
            yield _small(request)

    async def serve(behavior: Any, context: grpc.aio.ServicerContext) -> None:
        try:
            replies = await behavior if inspect.isawaitable(behavior) else behavior
            if inspect.isasyncgen(replies):
                async for reply in replies:
                    await context.write(reply)
        except errors.ReachstoreError as exc:
            await abort_with(context, exc)

    async def one_request(_: object, context: grpc.aio.ServicerContext) -> None:
        try:
            request = _small(await reads.read(context, "read"))
        except errors.ReachstoreError as exc:
            await abort_with(context, exc)
        await serve(handler.unary_stream(request, context), context)

    async def many_requests(_: object, context: grpc.aio.ServicerContext) -> None:
        await serve(handler.stream_stream(requests(context), context), context)

    if handler.unary_stream is not None:
        behavior = one_request
    elif handler.stream_stream is not None:
        behavior = many_requests
    else:  # client-streaming with one reply: none is served here
        return handler
    return grpc.stream_stream_rpc_method_handler(
        behavior,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


# The largest request of a call that may last: a streaming method's (a service name to
# watch, a file or symbol to reflect on), which lasts as long as its caller keeps it, and a
# long poll's (a task id and a version), which admission does not count while it waits.
# Such a call holds its request as long as it lasts, and fields the service does not know
# are kept with it. Calls that each sent 30 MiB of unknown fields, gzip-compressed to
# 30 KiB, 12 every 2 s, grew a process by 3 GiB (tests/e2e/test_attack18_partial_requests.py);
# 200 long polls with 8 MiB each, by 670 MiB (tests/e2e/test_attack18_long_poll_requests.py).
MAX_LASTING_REQUEST_BYTES = 64 * 1024


def _lasting_too_large(what: str, size: int) -> errors.ReachstoreError:
    return errors.invalid(
        "request", f"{size} bytes; {what} may be at most {MAX_LASTING_REQUEST_BYTES} bytes"
    )


def _small(request: Any) -> Any:
    """``request``, refused when larger than a streaming method's request may be."""
    size = request.ByteSize()
    if size > MAX_LASTING_REQUEST_BYTES:
        raise _lasting_too_large("a streaming method's request", size)
    return request


@dataclasses.dataclass(frozen=True)
class _Undecodable:
    """A request whose bytes protobuf refused, standing in for it until the handler can
    answer INVALID_ARGUMENT naming the field (an exception in the deserializer itself would
    leave as a bare UNKNOWN)."""

    empty: Any
    error: errors.ReachstoreError


@functools.cache
def _input_of(method: str) -> tuple[Descriptor, type[Message]] | None:
    """The request type of a method path, looked up once per method (the interceptor runs
    for every call, and these look-ups by name cost more than the rest of its work)."""
    service, _, name = method.strip("/").rpartition("/")
    try:
        descriptor = descriptor_pool.Default().FindServiceByName(service)
        input_type = descriptor.methods_by_name[name].input_type
    except KeyError:
        return None
    return input_type, message_factory.GetMessageClass(input_type)


def _tolerant(
    deserialize: Callable[[bytes], Any] | None, method: str
) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None
    known = _input_of(method)
    if known is None:
        return deserialize
    input_type, message_class = known
    # A request that can ask to wait (``Admitted.polls``): refused before it is decoded.
    polls = _can_wait(input_type)

    def parse(data: bytes) -> Any:
        if polls and len(data) > MAX_LASTING_REQUEST_BYTES:
            error = _lasting_too_large("the request of a call that can wait (wait_ms)", len(data))
            return _Undecodable(message_class(), error)
        try:
            return deserialize(data)
        except DecodeError as exc:
            field, rule = wire.locate(input_type, data)
            error = errors.invalid(field, f"{rule} ({exc})")
            return _Undecodable(message_class(), error)

    return parse


# The calls that add work (a document to embed, an action to send, events to append): under
# pressure every other call (reads, cancels, an operator's resolutions) is served first.
_ADDS_WORK = frozenset(
    {"SubmitTask", "Reach", "CreateDocument", "BatchCreateDocuments", "AppendEvents"}
)


@dataclasses.dataclass(frozen=True)
class Admitted:
    """How admission treats a method: as a read or a write, and whether its request may ask
    to wait for a change (``wait_ms``). Such a long poll spends its time waiting, holding no
    worker, and is not counted while it waits; the same call without a wait is."""

    kind: Kind
    polls: bool


def _can_wait(request: Descriptor) -> bool:
    """Whether a method's request can ask it to wait for a change (a long poll)."""
    return "wait_ms" in request.fields_by_name


def _admitted_methods(service_names: Iterable[str]) -> dict[str, Admitted]:
    """Every method of ``service_names``, as admission treats it."""
    pool = descriptor_pool.Default()
    services = [pool.FindServiceByName(name) for name in service_names]
    admitted: dict[str, Admitted] = {}
    for method in scopes_by_method(services):
        service, _, name = method.strip("/").rpartition("/")
        request = pool.FindServiceByName(service).methods_by_name[name].input_type
        kind: Kind = "write" if name in _ADDS_WORK else "read"
        admitted[method] = Admitted(kind, _can_wait(request))
    return admitted


def create_server(
    registrars: Iterable[Registrar],
    service_names: Iterable[str],
    address: str,
    authenticator: Authenticator | None = None,
    limiter: RequestLimiter | None = None,
    audit: CallAudit | None = None,
    tls: TlsFiles = PLAIN,
    also_listen: Sequence[str] = (),
    metrics: RpcMetrics | None = None,
    admission: AdmissionLimits = DEFAULT_LIMITS,
    forwarded: ForwardedCheck | None = None,
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    """Builds a server with our services, health and reflection, bound to ``address``.

    Returns the server (not started), the bound port (useful with ``host:0``) and the
    health servicer so the caller can flip serving states. With ``tls`` serving, the port
    speaks TLS only (and asks callers for a certificate when ``tls`` says so). The server
    also listens on every ``also_listen`` address (same services, same credentials). With
    ``metrics``, every call is counted there (``reachstore_server/common/rpc_metrics.py``).
    At most ``admission.concurrency`` calls of our services are served at once
    (``reachstore_server/common/admission.py``).
    """
    # Tracing first (outermost): its span covers the guard, so the audit event of the call
    # and every log line in it carry the span's trace id.
    names = list(service_names)
    admitting = Admission(admission)
    guards = Guards(
        authenticator,
        limiter,
        audit,
        metrics,
        admitting,
        _admitted_methods(names),
        forwarded=forwarded,
        reads=RequestReads(admission.concurrency, admission.max_wait_s, admitting.drain_s),
    )
    interceptors = [*otel.server_interceptors(), TraceInterceptor(), _CallGuard(guards)]
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            *GRPC_OPTIONS,
            (UNTAKEN_WAIT_OPTION, untaken_wait_s(admission)),
            FIXED_RECEIVE_WINDOW,
        ],
    )
    for register in registrars:
        register(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    credentials = tls.server_credentials()
    ports = []
    for where in (address, *also_listen):
        if credentials is None:
            bound = server.add_insecure_port(where)
        else:
            bound = server.add_secure_port(where, credentials)
        if bound == 0:
            raise RuntimeError(f"could not bind gRPC server to {where}")
        ports.append(bound)
    return server, ports[0], health_servicer


async def mark_serving(health_servicer: health.aio.HealthServicer, names: Iterable[str]) -> None:
    """Reports every named service, and the server as a whole, as SERVING."""
    for name in ["", *names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)

"""The gRPC channel: one unary call per action to an internal service.

No generated code is needed: the request and response types come from a serialized
FileDescriptorSet named in the settings or, without one, from the target's server
reflection (asked once, then cached). The request is built from the action's JSON
parameters with the protobuf JSON mapping, so the parameters read like the service's
own JSON form (``{"ticket": "T-1", "count": 2}``).

gRPC status codes are classified the way the executor expects: UNAVAILABLE means the
call did not get through (transient, safe to resend); DEADLINE_EXCEEDED and the
"something broke" codes (INTERNAL, UNKNOWN, DATA_LOSS, CANCELLED) may have taken effect
(ambiguous); refusals of this request (INVALID_ARGUMENT, NOT_FOUND, ...) are permanent
and the business's concern.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from grpc_reflection.v1alpha import reflection_pb2

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.common.tls import (
    PLAIN,
    TlsFiles,
    load_tls,
    secure_aio_channel,
    secure_channel,
)
from reachstore_server.reach.channels.base import (
    SNIPPET_CHARS,
    Answer,
    Category,
    ChannelError,
    InvalidParams,
    Outgoing,
    Status,
)
from reachstore_server.reach.channels.common import (
    Stopwatch,
    TableReader,
    json_default,
    traceparent,
)

REFLECTION_METHOD = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
_METHOD = re.compile(r"/([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)/([A-Za-z_]\w*)")
_TARGET = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})")

# The channel sends once: no retry policy, not even gRPC's transparent retries, and no
# service config fetched from DNS that could turn retries on behind our back.
_CHANNEL_OPTIONS = [("grpc.enable_retries", 0), ("grpc.service_config_disable_resolution", 1)]


@dataclasses.dataclass(frozen=True)
class _Outcome:
    category: Category
    code: str
    business: bool = False
    ambiguous: bool = False


_S = grpc.StatusCode
_REJECTED = _Outcome("permanent", "RECEIVER_REJECTED", business=True)
_BROKEN = _Outcome("transient", "RECEIVER_ERROR", ambiguous=True)
OUTCOMES: dict[grpc.StatusCode, _Outcome] = {
    # Unless its details say no connection was made (see _NEVER_CONNECTED).
    _S.UNAVAILABLE: _Outcome("transient", "RECEIVER_UNAVAILABLE", ambiguous=True),
    _S.DEADLINE_EXCEEDED: _Outcome("timeout", "RECEIVER_TIMEOUT", ambiguous=True),
    _S.RESOURCE_EXHAUSTED: _Outcome("quota", "RECEIVER_RATE_LIMITED"),
    _S.INVALID_ARGUMENT: _REJECTED,
    _S.FAILED_PRECONDITION: _REJECTED,
    _S.NOT_FOUND: _REJECTED,
    _S.ALREADY_EXISTS: _REJECTED,
    _S.OUT_OF_RANGE: _REJECTED,
    _S.UNAUTHENTICATED: _Outcome("auth", "RECEIVER_AUTH_FAILED"),
    _S.PERMISSION_DENIED: _Outcome("auth", "RECEIVER_AUTH_FAILED"),
    _S.UNIMPLEMENTED: _Outcome("permanent", "RECEIVER_UNIMPLEMENTED"),
    _S.ABORTED: _Outcome("transient", "RECEIVER_ABORTED"),
    _S.INTERNAL: _BROKEN,
    _S.UNKNOWN: _BROKEN,
    _S.DATA_LOSS: _BROKEN,
    _S.CANCELLED: _BROKEN,
}


@dataclasses.dataclass(frozen=True)
class GrpcOptions:
    """An internal gRPC method's settings (one ``[channels.<name>]`` table of kind "grpc")."""

    target: str
    method: str
    descriptor_set: str | None = None
    timeout_s: float = 8.0
    token: str | None = dataclasses.field(default=None, repr=False)
    idempotency_metadata: bool = False
    # None: plain text, which the settings must ask for (``tls = false``).
    tls: TlsFiles | None = dataclasses.field(default=None, repr=False)

    @property
    def service(self) -> str:
        return self.method.split("/")[1]

    @classmethod
    def from_table(
        cls, table: Mapping[str, Any], where: str, env: Mapping[str, str]
    ) -> GrpcOptions:
        reader = TableReader(table, where, env)
        target = reader.required_text("target")
        if not _TARGET.fullmatch(target) or not 1 <= int(target.rsplit(":", 1)[1]) <= 65535:
            raise reader.error("target", "must be host:port")
        method = reader.required_text("method")
        if not _METHOD.fullmatch(method):
            raise reader.error("method", "must be a full method name: /package.Service/Method")
        descriptor_set = reader.optional_text("descriptor_set")
        if descriptor_set is not None:
            try:
                load_descriptor_set(descriptor_set, method)
            except (OSError, DecodeError, LookupError, TypeError) as exc:
                raise reader.error("descriptor_set", str(exc)) from None
        options = cls(
            target=target,
            method=method,
            descriptor_set=descriptor_set,
            timeout_s=reader.seconds("timeout_s", 8.0),
            token=reader.secret("token_env", header=True),
            idempotency_metadata=reader.boolean("idempotency_metadata", False),
            tls=_tls(reader, where),
        )
        reader.finish()
        return options


def _tls(reader: TableReader, where: str) -> TlsFiles | None:
    """TLS unless the settings say ``tls = false``: the call carries a bearer token and
    the action's parameters, which must not cross a network in clear by default. The
    files are checked now, like every other setting."""
    keys = ("cert_file", "key_file", "ca_file", "server_name")
    paths = {key: reader.optional_text(key) for key in keys}
    if not reader.boolean("tls", True):
        given = [key for key, value in paths.items() if value]
        if given:
            raise reader.error(given[0], "needs tls = true")
        return None
    files = load_tls(
        {
            "cert": paths["cert_file"] or "",
            "key": paths["key_file"] or "",
            "ca": paths["ca_file"] or "",
        },
        server_name=paths["server_name"] or "",
        names=(f"{where}.cert_file", f"{where}.key_file", f"{where}.ca_file"),
    )
    # Without a CA file the target is checked against the system's trust store.
    return dataclasses.replace(files, system_trust=True)


@dataclasses.dataclass(frozen=True)
class MethodTypes:
    """The request and response classes of one unary method."""

    request: type[Message]
    response: type[Message]


def load_descriptor_set(path: str, method: str) -> MethodTypes:
    """Reads a serialized FileDescriptorSet and finds ``method``'s types in it."""
    files = descriptor_pb2.FileDescriptorSet.FromString(Path(path).read_bytes()).file
    return method_types(files, method)


def method_types(files: Iterable[descriptor_pb2.FileDescriptorProto], method: str) -> MethodTypes:
    """Builds a private descriptor pool from ``files`` and returns ``method``'s types.

    Raises LookupError when a file, the service or the method is missing, and TypeError
    for a streaming method.
    """
    match = _METHOD.fullmatch(method)
    if match is None:
        raise LookupError(f"{method!r} is not a full method name")
    service_name, method_name = match.groups()
    by_name = {f.name: f for f in files}
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(name: str) -> None:  # dependencies before dependants, as the pool requires
        if name in added:
            return
        proto = by_name.get(name) or _well_known(name)
        for dependency in proto.dependency:
            add(dependency)
        pool.Add(proto)
        added.add(name)

    for name in by_name:
        add(name)
    try:
        service = pool.FindServiceByName(service_name)
    except KeyError:
        raise LookupError(f"service {service_name} is not described") from None
    found = service.methods_by_name.get(method_name)
    if found is None:
        raise LookupError(f"service {service_name} has no method {method_name}")
    if found.client_streaming or found.server_streaming:
        raise TypeError(f"{method} is a streaming method; only unary calls are supported")
    return MethodTypes(
        message_factory.GetMessageClass(found.input_type),
        message_factory.GetMessageClass(found.output_type),
    )


def _well_known(name: str) -> descriptor_pb2.FileDescriptorProto:
    """A dependency not given with the files, from the process's own pool (well-known
    types such as google/protobuf/timestamp.proto)."""
    try:
        known = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        raise LookupError(f"file {name} is needed but not described") from None
    proto = descriptor_pb2.FileDescriptorProto()
    known.CopyToProto(proto)
    return proto


def _params_error(exc: Exception) -> InvalidParams:
    """Names the offending field where the protobuf parser's message allows it."""
    text = str(exc)
    found = re.search(r'has no field named "([^"]+)"', text) or re.search(
        r"Failed to parse (\S+) field", text
    )
    return InvalidParams(found.group(1) if found else "", f"does not fit the request type: {text}")


log = logging.getLogger(__name__)


class GrpcCallChannel:
    """Calls one unary method per action over one long-lived HTTP/2 channel."""

    def __init__(self, options: GrpcOptions) -> None:
        self.options = options
        self._types: MethodTypes | None = None
        if options.descriptor_set is not None:
            try:
                self._types = load_descriptor_set(options.descriptor_set, options.method)
            except (OSError, DecodeError, LookupError, TypeError) as exc:
                raise ConfigError(f"descriptor_set {options.descriptor_set}: {exc}") from None
        self._channel: grpc.aio.Channel | None = None
        self._lock: asyncio.Lock | None = None

    @property
    def can_poll(self) -> bool:
        return False

    @property
    def can_cancel(self) -> bool:
        return False

    @property
    def sends_idempotency_key(self) -> bool:
        return self.options.idempotency_metadata

    def send_deadline(self) -> tuple[str, float]:
        if self.options.descriptor_set is not None:
            return "timeout_s", self.options.timeout_s
        # Without a descriptor set the first submit may first ask server reflection.
        return "timeout_s for reflection and again for the call", 2 * self.options.timeout_s

    def validate(self, action: Outgoing) -> None:
        """Checks the parameters against the request type once it is known; before (no
        descriptor set, reflection not yet asked) only that they are JSON."""
        self._request(action)

    def _request(self, action: Outgoing) -> Message | None:
        try:
            params = json.loads(json.dumps(action.params, allow_nan=False, default=json_default))
        except (TypeError, ValueError) as exc:
            raise InvalidParams("", f"must be JSON-serialisable ({exc})") from None
        if self._types is None:
            return None
        try:
            return json_format.ParseDict(params, self._types.request())
        except (json_format.ParseError, TypeError, ValueError) as exc:
            raise _params_error(exc) from None

    def _grpc(self) -> grpc.aio.Channel:
        # Created lazily so that it belongs to the event loop that uses it.
        if self._channel is None:
            tls = self.options.tls or PLAIN
            self._channel = secure_aio_channel(self.options.target, tls, _CHANNEL_OPTIONS)
        return self._channel

    def _auth(self) -> list[tuple[str, str]]:
        token = self.options.token
        return [] if token is None else [("authorization", f"Bearer {token}")]

    async def start(self) -> None:
        """Asks the reflection service for the types now rather than at the first action,
        so that ``validate`` can check parameters from the start. Never raises."""
        try:
            await self._method_types()
        except Exception as exc:  # best effort: the first submit asks again and reports
            log.warning("grpc channel %s: no method types yet: %s", self.options.target, exc)

    async def _method_types(self) -> MethodTypes:
        if self._types is not None:
            return self._types
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one reflection exchange even when many actions start at once
            if self._types is None:
                files = await asyncio.to_thread(reflect, self.options, self._auth())
                self._types = method_types(files, self.options.method)
            return self._types

    async def submit(self, action: Outgoing) -> Answer:
        watch = Stopwatch()
        try:
            types = await self._method_types()
        except grpc.RpcError as exc:
            raise _status_error(exc, watch.ms(), "server reflection: ") from None
        except (LookupError, TypeError, DecodeError) as exc:
            raise ChannelError(
                "permanent",
                "RECEIVER_UNIMPLEMENTED",
                f"server reflection does not describe {self.options.method}: {exc}",
                duration_ms=watch.ms(),
            ) from None
        try:
            request = self._request(action)
        except InvalidParams as exc:
            raise ChannelError("permanent", "INVALID_PARAMS", str(exc), business=True) from None
        metadata = [
            ("x-reachstore-action-id", action.action_id),
            ("x-reachstore-action-type", action.action_type),
            ("traceparent", traceparent(action.trace_id)),
            *self._auth(),
        ]
        if self.options.idempotency_metadata:
            metadata.append(("idempotency-key", action.idempotency_key))
        call = self._grpc().unary_unary(
            self.options.method,
            request_serializer=_serialize,
            response_deserializer=types.response.FromString,
        )
        watch = Stopwatch()
        try:
            response = await call(request, timeout=self.options.timeout_s, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            raise _status_error(exc, watch.ms()) from None
        return Answer(
            Status.SUCCESS,
            _external_id(response) or action.idempotency_key,
            status_code=grpc.StatusCode.OK.value[0],
            snippet=_as_json(response)[:SNIPPET_CHARS],
            duration_ms=watch.ms(),
        )

    async def poll(self, action: Outgoing, external_id: str) -> Answer:
        return Answer(Status.UNKNOWN, external_id, detail="a gRPC call has no status look-up")

    async def cancel(self, action: Outgoing, external_id: str) -> bool:
        return False

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()
        self._lock = None  # bound to the loop that used it


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def _as_json(message: Message) -> str:
    as_dict = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return json.dumps(as_dict, ensure_ascii=False, separators=(",", ":"))


def _external_id(response: Message) -> str | None:
    field = response.DESCRIPTOR.fields_by_name.get("id")
    if field is None or field.type != FieldDescriptor.TYPE_STRING or field.is_repeated:
        return None
    value = getattr(response, field.name)
    return str(value) if value else None


def _retry_after(exc: Any) -> float | None:
    """The delay of a google.rpc.RetryInfo detail in the rich status, if there is one."""
    for key, value in exc.trailing_metadata() or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except DecodeError:
            return None
        for detail in status.details:
            info = error_details_pb2.RetryInfo()
            if detail.Unpack(info):
                return info.retry_delay.ToTimedelta().total_seconds()
    return None


# UNAVAILABLE is both "could not connect" (nothing was sent) and "the connection went away
# during the call" (it may have taken effect); only the first says so in its details.
_NEVER_CONNECTED = re.compile(
    r"failed to connect|connection refused|dns resolution failed|name resolution|"
    r"no addresses|connect failed|unable to connect",
    re.IGNORECASE,
)
# The client's own limit on an answer's size: the server did the work and answered.
_ANSWER_TOO_LARGE = re.compile(r"received message larger than max", re.IGNORECASE)


def _status_error(exc: Any, duration_ms: int, prefix: str = "") -> ChannelError:
    """Classifies a failed call (``exc`` is a ``grpc.RpcError`` that is also a ``grpc.Call``:
    it has code(), details() and trailing_metadata())."""
    code = exc.code()
    outcome = OUTCOMES.get(code, _BROKEN)
    details = exc.details() or ""
    if code == _S.UNAVAILABLE and _NEVER_CONNECTED.search(details):
        outcome = _Outcome("transient", "RECEIVER_UNREACHABLE")
    elif code == _S.RESOURCE_EXHAUSTED and _ANSWER_TOO_LARGE.search(details):
        outcome = _Outcome("permanent", "RECEIVER_ANSWER_TOO_LARGE", ambiguous=True)
    return ChannelError(
        outcome.category,
        outcome.code,
        f"{prefix}{code.name}: {details}" if details else f"{prefix}{code.name}",
        retry_after_s=_retry_after(exc) if outcome.category == "quota" else None,
        business=outcome.business,
        ambiguous=outcome.ambiguous,
        status_code=code.value[0],
        snippet=details[:SNIPPET_CHARS],
        duration_ms=duration_ms,
    )


def reflect(
    options: GrpcOptions, metadata: list[tuple[str, str]]
) -> list[descriptor_pb2.FileDescriptorProto]:
    """Asks the target's server reflection for the file defining the service and every
    file it imports (those the server did not already send along). Blocking: run it in
    a worker thread.

    This uses grpc's synchronous API on a channel of its own, once per channel: with the
    asyncio API, a request written while the server ends the call at once (UNIMPLEMENTED
    from a server without reflection) fails locally with INTERNAL and hides the server's
    status; the synchronous API reports the server's status.

    Raises ``grpc.RpcError`` when reflection cannot be reached or is not served,
    LookupError when the server does not know the service.
    """
    Request = reflection_pb2.ServerReflectionRequest
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    unresolved: set[str] = set()  # left to the process's own pool (well-known types)
    with secure_channel(options.target, options.tls or PLAIN, _CHANNEL_OPTIONS) as channel:
        ask = channel.stream_stream(
            REFLECTION_METHOD,
            request_serializer=Request.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        request: Any = Request(file_containing_symbol=options.service)
        while request is not None:
            responses = list(ask(iter((request,)), timeout=options.timeout_s, metadata=metadata))
            if not responses:
                raise LookupError("the reflection service gave no answer")
            response = responses[0]
            if response.HasField("error_response"):
                if request.HasField("file_containing_symbol"):
                    message = response.error_response.error_message
                    raise LookupError(f"the server does not know {options.service}: {message}")
                unresolved.add(request.file_by_filename)
            for raw in response.file_descriptor_response.file_descriptor_proto:
                proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
                files.setdefault(proto.name, proto)
            missing = sorted(
                {d for f in files.values() for d in f.dependency} - files.keys() - unresolved
            )
            request = Request(file_by_filename=missing[0]) if missing else None
    return list(files.values())

"""The gRPC transport, blocking (``grpc``) and asynchronous (``grpc.aio``).

Calls go through ``channel.unary_unary("/package.Service/Method")`` with the serializers
of the RPC's messages, so one small mechanism serves every service and no generated stub
is needed. There is one channel per distinct target (a client whose services share an
address shares the channel), opened on first use: building a client never blocks or
fails, and a ``grpc.aio`` channel is only ever made inside the event loop that uses it,
which is the loop it belongs to.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message

from reachstore._config import MAX_MESSAGE_BYTES
from reachstore._errors import from_rpc_error
from reachstore._rpc import Rpc
from reachstore._tls import Tls

# An address may list several replicas of a service ("10.0.0.1:50051,10.0.0.2:50051", or
# one DNS name with a record per replica): calls are spread over those whose gRPC health
# service reports SERVING, and a call one replica failed with UNAVAILABLE is repeated —
# under the client's retry rules — on another.
_SERVICE_CONFIG = json.dumps(
    {"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}}
)
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.service_config", _SERVICE_CONFIG),
]


def channel_target(address: str) -> str:
    """The gRPC target of an address: ``ipv4:a,b`` (or ``ipv6:``) for a list of replicas,
    the address itself otherwise (a host name is resolved through DNS, every record)."""
    parts = [part.strip() for part in address.split(",") if part.strip()]
    if len(parts) < 2:
        return address
    scheme = "ipv6" if parts[0].startswith("[") else "ipv4"
    return f"{scheme}:{','.join(parts)}"


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


class _Targets:
    """Server name ("query", "ingest", "reach", "audit") -> address, plus credentials."""

    def __init__(self, targets: Mapping[str, str], api_key: str | None) -> None:
        self.targets = dict(targets)
        self.metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {api_key}"),) if api_key else ()
        )
        self.closed = False

    def target(self, rpc: Rpc) -> str:
        if self.closed:
            raise RuntimeError("this client is closed")
        return self.targets[rpc.server]


def _open(target: str, tls: Tls | None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(channel_target(target), options=CHANNEL_OPTIONS)
    options = [*CHANNEL_OPTIONS, *tls.grpc_options(channel_target(target))]
    return grpc.secure_channel(channel_target(target), tls.grpc_credentials(), options=options)


def _open_aio(target: str, tls: Tls | None) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(channel_target(target), options=CHANNEL_OPTIONS)
    options = [*CHANNEL_OPTIONS, *tls.grpc_options(channel_target(target))]
    return grpc.aio.secure_channel(channel_target(target), tls.grpc_credentials(), options=options)


class GrpcTransport:
    """Blocking calls; safe to share between threads. ``tls`` None: plain text."""

    def __init__(
        self, targets: Mapping[str, str], api_key: str | None, tls: Tls | None = None
    ) -> None:
        self._targets = _Targets(targets, api_key)
        self._tls = tls
        self._channels: dict[str, grpc.Channel] = {}
        self._callables: dict[tuple[str, str], Callable[..., Any]] = {}
        self._lock = threading.Lock()

    def _callable(self, rpc: Rpc) -> Callable[..., Any]:
        with self._lock:
            target = self._targets.target(rpc)
            found = self._callables.get((target, rpc.path))
            if found is None:
                channel = self._channels.get(target)
                if channel is None:
                    channel = _open(target, self._tls)
                    self._channels[target] = channel
                found = channel.unary_unary(
                    rpc.path,
                    request_serializer=_serialize,
                    response_deserializer=rpc.response_class.FromString,
                )
                self._callables[(target, rpc.path)] = found
            return found

    def call(self, rpc: Rpc, request: Message, timeout: float) -> Message:
        method = self._callable(rpc)
        try:
            response: Message = method(request, timeout=timeout, metadata=self._targets.metadata)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc
        return response

    def close(self) -> None:
        """Closes every channel; calls in flight are cancelled."""
        with self._lock:
            self._targets.closed = True
            channels, self._channels = list(self._channels.values()), {}
            self._callables.clear()
        for channel in channels:
            channel.close()


class AsyncGrpcTransport:
    """``grpc.aio`` calls, for one event loop."""

    def __init__(
        self, targets: Mapping[str, str], api_key: str | None, tls: Tls | None = None
    ) -> None:
        self._targets = _Targets(targets, api_key)
        self._tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._callables: dict[tuple[str, str], Callable[..., Any]] = {}

    def _callable(self, rpc: Rpc) -> Callable[..., Any]:
        # No lock: everything here runs on the one event loop thread, without awaiting.
        target = self._targets.target(rpc)
        found = self._callables.get((target, rpc.path))
        if found is None:
            channel = self._channels.get(target)
            if channel is None:
                channel = _open_aio(target, self._tls)
                self._channels[target] = channel
            found = channel.unary_unary(
                rpc.path,
                request_serializer=_serialize,
                response_deserializer=rpc.response_class.FromString,
            )
            self._callables[(target, rpc.path)] = found
        return found

    async def call(self, rpc: Rpc, request: Message, timeout: float) -> Message:
        method = self._callable(rpc)
        try:
            response: Message = await method(
                request, timeout=timeout, metadata=self._targets.metadata
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc
        return response

    async def close(self) -> None:
        self._targets.closed = True
        channels, self._channels = list(self._channels.values()), {}
        self._callables.clear()
        for channel in channels:
            await channel.close()

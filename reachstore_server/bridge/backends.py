"""Which services the bridge fronts, where they live, and the generic calls to them.

Calls go through ``channel.unary_unary("/pkg.Service/Method")`` with serializers taken
from the descriptors, so no generated stub is needed. Channels are created lazily, inside
the running event loop (a ``grpc.aio`` channel belongs to the loop it was made in), and
closed when the app shuts down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from reachstore.admin.v1 import key_service_pb2
from reachstore.audit.v1 import audit_service_pb2
from reachstore.ingest.v1 import ingest_service_pb2
from reachstore.query.v1 import query_service_pb2
from reachstore.reach.v1 import reach_service_pb2
from reachstore_server.bridge import json_codec
from reachstore_server.bridge.routes import Route
from reachstore_server.common.channels import grpc_target, service_config
from reachstore_server.common.config import Settings
from reachstore_server.common.grpc_server import GRPC_OPTIONS
from reachstore_server.common.tls import PLAIN, TlsFiles, secure_aio_channel

QUERY_SERVICE = query_service_pb2.DESCRIPTOR.services_by_name["QueryService"]
INGEST_SERVICE = ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"]
KEY_SERVICE = key_service_pb2.DESCRIPTOR.services_by_name["KeyService"]
REACH_SERVICE = reach_service_pb2.DESCRIPTOR.services_by_name["ReachService"]
AUDIT_SERVICE = audit_service_pb2.DESCRIPTOR.services_by_name["AuditService"]

# The services the bridge exposes. A new one joins with one line here and one address in
# ``backend_addresses``.
DEFAULT_SERVICES: tuple[ServiceDescriptor, ...] = (
    QUERY_SERVICE,
    INGEST_SERVICE,
    KEY_SERVICE,
    REACH_SERVICE,
    AUDIT_SERVICE,
)


def backend_addresses(settings: Settings) -> dict[str, str]:
    """Service full name -> host:port."""
    return {
        QUERY_SERVICE.full_name: settings.query_addr,
        INGEST_SERVICE.full_name: settings.ingest_addr,
        KEY_SERVICE.full_name: settings.ingest_addr,  # hosted by the ingest process
        REACH_SERVICE.full_name: settings.reach_addr,
        AUDIT_SERVICE.full_name: settings.audit_addr or DEFAULT_AUDIT_ADDR,
    }


DESCRIPTORS = {service.full_name: service for service in DEFAULT_SERVICES}

# Where the bridge looks for the audit service when REACHSTORE_AUDIT_ADDR is empty (the
# services then keep their events in the outbox).
DEFAULT_AUDIT_ADDR = "127.0.0.1:50054"

Metadata = Sequence[tuple[str, str]]


class Backends:
    """gRPC channels to the services, one per address, plus generic unary calls."""

    def __init__(
        self,
        addresses: Mapping[str, str],
        channels: Mapping[str, grpc.aio.Channel] | None = None,
        tls: TlsFiles = PLAIN,
    ) -> None:
        self._addresses = dict(addresses)
        self._tls = tls
        self._given = dict(channels or {})  # owned by the caller: never closed here
        self._owned: dict[str, grpc.aio.Channel] = {}
        self._callables: dict[tuple[int, str], Callable[..., Any]] = {}

    def channel(self, service: str) -> grpc.aio.Channel:
        if service in self._given:
            return self._given[service]
        address = self._addresses.get(service)
        if address is None:
            raise LookupError(f"no address configured for {service}")
        channel = self._owned.get(address)
        if channel is None:
            hosted = [
                DESCRIPTORS[name]
                for name, addr in self._addresses.items()
                if addr == address and name in DESCRIPTORS
            ]
            options = [*GRPC_OPTIONS, ("grpc.service_config", service_config(hosted))]
            channel = secure_aio_channel(grpc_target(address), self._tls, options)
            self._owned[address] = channel
        return channel

    def _callable(self, route: Route) -> Callable[..., Any]:
        channel = self.channel(route.service.full_name)
        key = (id(channel), route.grpc_path)
        found = self._callables.get(key)
        if found is None:
            response_class = json_codec.message_class(route.method.output_type)
            found = channel.unary_unary(
                route.grpc_path,
                request_serializer=lambda message: message.SerializeToString(),
                response_deserializer=response_class.FromString,
            )
            self._callables[key] = found
        return found

    async def call(
        self, route: Route, request: Message, *, timeout: float, metadata: Metadata
    ) -> Message:
        """Calls ``route``'s RPC; raises ``grpc.aio.AioRpcError`` on any failure."""
        return await self._callable(route)(request, timeout=timeout, metadata=tuple(metadata))

    async def health(self, service: str, timeout: float) -> str:
        """The standard health status of ``service`` as a lowercase word, or
        ``unreachable`` when it does not answer."""
        stub = health_pb2_grpc.HealthStub(self.channel(service))
        try:
            request = health_pb2.HealthCheckRequest(service=service)
            reply = await stub.Check(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            # NOT_FOUND: the server runs but does not report this service.
            return "service_unknown" if exc.code() == grpc.StatusCode.NOT_FOUND else "unreachable"
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status).lower()

    async def health_of(self, services: Iterable[str], timeout: float) -> dict[str, str]:
        names = list(services)
        states = await asyncio.gather(*(self.health(name, timeout) for name in names))
        return dict(zip(names, states, strict=True))

    async def close(self) -> None:
        owned, self._owned = list(self._owned.values()), {}
        self._callables.clear()
        for channel in owned:
            await channel.close()

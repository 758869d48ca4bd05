"""Every RPC the SDK calls, read from the service descriptors rather than written out.

Both transports and the retry rules work from these entries: the gRPC transport needs the
method's path and response type, the REST transport its ``google.api.http`` rule, and the
retry policy its ``idempotency_level``. Reading them from the descriptors keeps the SDK in
step with the protos: a new RPC, route or idempotency level needs no second edit here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf import descriptor_pb2, message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message

from reachstore.admin.v1 import key_service_pb2
from reachstore.audit.v1 import audit_service_pb2
from reachstore.ingest.v1 import ingest_service_pb2
from reachstore.query.v1 import query_service_pb2
from reachstore.reach.v1 import reach_service_pb2

_Level = descriptor_pb2.MethodOptions.IdempotencyLevel
_REPEATABLE = (_Level.NO_SIDE_EFFECTS, _Level.IDEMPOTENT)


def _has_idempotency_key(request: Any) -> bool:
    return bool(request.idempotency_key)


def _every_event_has_an_id(request: Any) -> bool:
    return bool(request.events) and all(event.event_id for event in request.events)


# Calls that change something and are not idempotent as such, but whose request can carry
# a key that makes a repeat harmless: the server answers a repeat with the first result.
_KEYED: dict[str, Callable[[Any], bool]] = {
    "reachstore.reach.v1.ReachService.SubmitTask": _has_idempotency_key,
    "reachstore.reach.v1.ReachService.Reach": _has_idempotency_key,
    # "Idempotent by event id": an event already stored is acknowledged, not stored again.
    "reachstore.audit.v1.AuditService.AppendEvents": _every_event_has_an_id,
}


@dataclasses.dataclass(frozen=True)
class Rpc:
    """One RPC: where it runs, what it answers, and whether repeating it is safe."""

    # Which server hosts it: "query", "ingest" (also the key service), "reach", "audit".
    server: str
    method: MethodDescriptor
    response_class: type[Message]
    # NO_SIDE_EFFECTS or IDEMPOTENT in the proto: a repeat cannot do anything twice.
    idempotent: bool
    keyed: Callable[[Any], bool] | None = None

    @property
    def path(self) -> str:
        """The gRPC method path, ``/package.Service/Method``."""
        return f"/{self.method.containing_service.full_name}/{self.method.name}"

    @property
    def name(self) -> str:
        """``Service.Method``, the key of ``RPCS``."""
        return f"{self.method.containing_service.name}.{self.method.name}"

    def repeatable(self, request: Message) -> bool:
        """Whether sending ``request`` again after a failure cannot cause a second effect.

        A call that may have reached the server before failing is only repeated when the
        proto says the method is idempotent, or when the request carries the key that
        makes the server recognise the repeat.
        """
        if self.idempotent:
            return True
        return self.keyed is not None and self.keyed(request)


def _service(module: Any, name: str) -> ServiceDescriptor:
    service: ServiceDescriptor = module.DESCRIPTOR.services_by_name[name]
    return service


# (service, the server that hosts it)
SERVICES: tuple[tuple[ServiceDescriptor, str], ...] = (
    (_service(query_service_pb2, "QueryService"), "query"),
    (_service(ingest_service_pb2, "IngestService"), "ingest"),
    (_service(key_service_pb2, "KeyService"), "ingest"),
    (_service(reach_service_pb2, "ReachService"), "reach"),
    (_service(audit_service_pb2, "AuditService"), "audit"),
)


def _build() -> dict[str, Rpc]:
    table: dict[str, Rpc] = {}
    for service, server in SERVICES:
        for method in service.methods:
            entry = Rpc(
                server=server,
                method=method,
                response_class=message_factory.GetMessageClass(method.output_type),
                idempotent=method.GetOptions().idempotency_level in _REPEATABLE,
                keyed=_KEYED.get(method.full_name),
            )
            table[entry.name] = entry
    return table


# "QueryService.Query" -> its Rpc, for every method of every service.
RPCS: Mapping[str, Rpc] = _build()

"""Client channels to reachstore services that may run as several replicas.

An address setting (``REACHSTORE_QUERY_ADDR`` and the like) holds one ``host:port`` or a
comma-separated list of replicas. gRPC's own client-side load balancing spreads calls
over them (``round_robin``: a replica that stops answering, or whose gRPC health service
reports the server NOT_SERVING — as a draining one does — is skipped until it is back),
and its retry policy sends a call that failed with UNAVAILABLE again — to another replica
— but only for methods the protos mark ``NO_SIDE_EFFECTS`` or ``IDEMPOTENT``. A host name
is resolved through DNS, so one name with a record per replica (a Kubernetes headless
Service) balances the same way.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable

from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.descriptor_pb2 import MethodOptions

from reachstore_server.common.config_errors import ConfigError

_SAFE = (MethodOptions.NO_SIDE_EFFECTS, MethodOptions.IDEMPOTENT)
RETRY_ATTEMPTS = 3


def split_addresses(raw: str, setting: str) -> list[str]:
    """The ``host:port`` entries of an address setting, each checked."""
    parts = [part.strip() for part in raw.split(",") if part.strip()]
    if not parts:
        raise ConfigError(f"{setting} must be host:port (or a comma-separated list), got {raw!r}")
    for part in parts:
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"{setting} entries must be host:port, got {part!r}")
    if len(parts) > 1 and not all(_is_ip(p.rpartition(":")[0]) for p in parts):
        raise ConfigError(
            f"{setting}: several replicas must be given as IP addresses; for host names, use "
            "one name whose DNS records list every replica"
        )
    return parts


def grpc_target(raw: str, setting: str = "address") -> str:
    """The gRPC target for an address setting: ``ipv4:a,b`` for several replicas,
    ``dns:///host:port`` for one name (all its records), the address itself otherwise."""
    parts = split_addresses(raw, setting)
    if len(parts) > 1:
        return "ipv4:" + ",".join(parts)
    host = parts[0].rpartition(":")[0]
    return parts[0] if _is_ip(host) else f"dns:///{parts[0]}"


def service_config(services: Iterable[ServiceDescriptor]) -> str:
    """Round robin over the replicas the health service reports SERVING, and retries of
    the safe methods of ``services`` on UNAVAILABLE."""
    safe = [m for s in services for m in s.methods if _safe(m)]
    config: dict[str, object] = {
        "loadBalancingConfig": [{"round_robin": {}}],
        # "" is the server as a whole: what a replica reports while it drains on SIGTERM.
        "healthCheckConfig": {"serviceName": ""},
    }
    if safe:
        config["methodConfig"] = [
            {
                "name": [
                    {"service": m.containing_service.full_name, "method": m.name} for m in safe
                ],
                "retryPolicy": {
                    "maxAttempts": RETRY_ATTEMPTS,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    return json.dumps(config)


def _safe(method: MethodDescriptor) -> bool:
    return method.GetOptions().idempotency_level in _SAFE


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True

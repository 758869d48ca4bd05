"""Defaults shared by both clients and both transports, and where credentials come from."""

from __future__ import annotations

import os

# Where `reachstore up` listens by default: query on the port base, then ingest (which
# also hosts the key service), reach and audit on the next ports; the REST bridge on 8420.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_GRPC_PORT_BASE = 50051
DEFAULT_REST_URL = "http://127.0.0.1:8420"

# Seconds one call may take when the caller gives no `timeout`.
DEFAULT_TIMEOUT_S = 30.0

# Where a client looks for an API key when none is passed.
API_KEY_ENV = "REACHSTORE_API_KEY"

# Batches carry up to 16 MiB of text; the services accept 32 MiB messages, so do we.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024

USER_AGENT = "reachstore-python/0.1"


def local_targets(host: str, grpc_port_base: int) -> dict[str, str]:
    """Service -> host:port for the port layout of ``reachstore up``."""
    return {
        "query": f"{host}:{grpc_port_base}",
        "ingest": f"{host}:{grpc_port_base + 1}",
        "reach": f"{host}:{grpc_port_base + 2}",
        "audit": f"{host}:{grpc_port_base + 3}",
    }


def resolve_api_key(api_key: str | None) -> str | None:
    """The key from the argument, else from the environment. None means the keyless
    local caller of a development system. An empty argument means "no key" on purpose,
    so a caller can opt out of a key set in the environment."""
    if api_key is not None:
        return api_key or None
    return os.environ.get(API_KEY_ENV) or None


def check_timeout(timeout: float) -> float:
    if not timeout > 0:
        raise ValueError("timeout must be positive seconds")
    return float(timeout)

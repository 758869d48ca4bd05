"""What the synchronous and the asynchronous client share: the operations and how a
client is configured. Only the way steps are run (blocking or awaited) differs."""

from __future__ import annotations

from collections.abc import Mapping

from reachstore._config import (
    DEFAULT_GRPC_PORT_BASE,
    DEFAULT_HOST,
    local_targets,
)
from reachstore._ops_audit import AuditOperations
from reachstore._ops_reach import ReachOperations
from reachstore._ops_storage import StorageOperations
from reachstore._retry import RetryPolicy

# A few attempts, within the call's own deadline (see RetryPolicy).
DEFAULT_RETRIES = RetryPolicy()

_DEFAULTS = local_targets(DEFAULT_HOST, DEFAULT_GRPC_PORT_BASE)
DEFAULT_QUERY_TARGET = _DEFAULTS["query"]
DEFAULT_INGEST_TARGET = _DEFAULTS["ingest"]
DEFAULT_REACH_TARGET = _DEFAULTS["reach"]
DEFAULT_AUDIT_TARGET = _DEFAULTS["audit"]


class Operations(StorageOperations, ReachOperations, AuditOperations):
    """Every operation of the SDK, as flows (see ``_flow``)."""


def grpc_targets(query: str, ingest: str, reach: str, audit: str) -> Mapping[str, str]:
    """Server name -> address. The key service runs in the ingest process."""
    return {"query": query, "ingest": ingest, "reach": reach, "audit": audit}

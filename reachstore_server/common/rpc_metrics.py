"""Rate, errors and duration of every RPC, counted in the shared gRPC layer.

``grpc_server._wrap_unary`` calls ``RpcMetrics.observe`` once per call of every service,
so query, ingest, reach and audit export the same two series:

- ``reachstore_rpc_requests_total{service,method,code,category}``: ``code`` is the gRPC
  status name (``OK``, ``NOT_FOUND``, ...); ``category`` is the failure's category
  (``auth``, ``permanent``, ``transient``, ``timeout``, ``quota``) when the call failed or
  answered partially (an OK reply carrying ``PartialFailure`` entries: the first one's
  category), else ``none``;
- ``reachstore_rpc_duration_seconds{service,method}``, a histogram.

Labels come only from methods the server has registered (an unknown method never reaches
the wrapper) and from fixed enums, so callers cannot grow the number of series.
"""

from __future__ import annotations

import functools
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from prometheus_client import CollectorRegistry, Counter, Histogram

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2

NONE = "none"
# From a cached read (1 ms) to a query at its 10 s cap and a long reach wait.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

_PARTIAL_FAILURE = pf_pb2.PartialFailure.DESCRIPTOR.full_name


def category_name(category: int) -> str:
    """``CATEGORY_TRANSIENT`` -> ``transient``; the unspecified value reads ``none``."""
    if category == 0:
        return NONE
    return pf_pb2.Category.Name(category).removeprefix("CATEGORY_").lower()


def split_method(path: str) -> tuple[str, str]:
    """``/reachstore.query.v1.QueryService/Query`` -> (service, method)."""
    service, _, method = path.strip("/").rpartition("/")
    return service, method


@functools.cache
def _failure_paths(descriptor: Descriptor) -> tuple[tuple[str, ...], ...]:
    """Where a reply of this type holds repeated PartialFailure entries: top-level fields
    and fields of its singular sub-messages (``meta.namespaces_failed``). Looked up once
    per reply type."""
    paths: list[tuple[str, ...]] = []
    for field in descriptor.fields:
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        repeated = field.is_repeated
        if field.message_type.full_name == _PARTIAL_FAILURE:
            if repeated:
                paths.append((field.name,))
            continue
        if repeated or field.message_type.GetOptions().map_entry:
            continue
        for inner in field.message_type.fields:
            if (
                inner.type == FieldDescriptor.TYPE_MESSAGE
                and inner.is_repeated
                and inner.message_type.full_name == _PARTIAL_FAILURE
            ):
                paths.append((field.name, inner.name))
    return tuple(paths)


def partial_category(reply: object) -> str:
    """The category of the first PartialFailure an OK reply carries, else ``none``."""
    if not isinstance(reply, Message):
        return NONE
    for path in _failure_paths(reply.DESCRIPTOR):
        holder: Message = reply
        if len(path) == 2:
            if not holder.HasField(path[0]):
                continue
            holder = getattr(holder, path[0])
        failures = getattr(holder, path[-1])
        if failures:
            return category_name(failures[0].category)
    return NONE


class RpcMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "reachstore_rpc_requests_total",
            "RPCs answered, by service, method, gRPC status code and failure category "
            "(none when the call succeeded completely).",
            ["service", "method", "code", "category"],
            registry=registry,
        )
        self.duration = Histogram(
            "reachstore_rpc_duration_seconds",
            "Time from the call reaching the server's wrapper to its answer.",
            ["service", "method"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )

        # (path, code, category) -> the two children: ``labels()`` checks and locks on every
        # call, a dict look-up does not. Bounded by methods x codes x categories.
        self._children: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def observe(self, path: str, code: str, category: str, seconds: float) -> None:
        key = (path, code, category)
        children = self._children.get(key)
        if children is None:
            service, method = split_method(path)
            children = (
                self.requests.labels(service, method, code, category),
                self.duration.labels(service, method),
            )
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

"""Where a c=1 query's time goes, measured piece by piece: the in-process stages, the
round trip of an RPC that does no work, and the bridge's JSON conversions.

Enough to read the gap between the in-process limit and the services from the report;
for more, profile the running services with py-spy or perf.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import grpc
import httpx
from _query_bench import TOP_K, InProcess
from _stats import p50_ms, timed_p50_ms
from grpc_health.v1 import health_pb2, health_pb2_grpc

from reachstore.query.v1 import query_service_pb2 as qpb
from reachstore.query.v1 import query_service_pb2_grpc as qgrpc
from reachstore_server.bridge import http_body, json_codec
from reachstore_server.bridge.backends import DEFAULT_SERVICES
from reachstore_server.bridge.error_responses import JsonResponse
from reachstore_server.bridge.request_builder import build_request
from reachstore_server.bridge.routes import RouteTable
from reachstore_server.query.index import merge_hits


def inprocess_stages(inproc: InProcess, queries: Sequence[str]) -> dict[str, float]:
    """p50 of each stage of one in-process query."""
    embed, search, merge = [], [], []
    for q in queries:
        t0 = time.perf_counter()
        vector = inproc.embed(q)
        t1 = time.perf_counter()
        per = inproc.search(vector, q)
        t2 = time.perf_counter()
        merge_hits(per, TOP_K)
        t3 = time.perf_counter()
        embed.append(t1 - t0)
        search.append(t2 - t1)
        merge.append(t3 - t2)
    return {
        "embed_p50_ms": p50_ms(embed),
        "search_p50_ms": p50_ms(search),
        "merge_p50_ms": p50_ms(merge),
    }


def rpc_floors(channel: grpc.Channel, http_url: str, n: int) -> dict[str, float]:
    """Round trips that do no work: gRPC Health.Check on the query service, and GET
    /healthz, which the bridge answers without calling a service."""
    health = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest()
    with httpx.Client(base_url=http_url, timeout=10.0) as client:
        return {
            "grpc_health_rtt_p50_ms": timed_p50_ms(lambda: health.Check(request, timeout=10), n),
            "rest_healthz_rtt_p50_ms": timed_p50_ms(
                lambda: client.get("/healthz").raise_for_status(), n
            ),
        }


def bridge_conversions(
    stub: qgrpc.QueryServiceStub, names: Sequence[str], query: str, n: int
) -> dict[str, float]:
    """The bridge's own work on one real query, with its own functions: JSON body ->
    QueryRequest, and QueryResponse -> JSON bytes."""
    route = RouteTable(DEFAULT_SERVICES).match("POST", "/api/v1/query").route
    assert route is not None
    body = json.dumps({"namespaces": list(names), "query": query, "top_k": TOP_K}).encode()
    reply = stub.Query(qpb.QueryRequest(namespaces=names, query=query, top_k=TOP_K), timeout=30)
    # render() does not touch the response object, so it runs without a constructed one.
    renderer = JsonResponse.__new__(JsonResponse)
    return {
        "bridge_request_decode_p50_ms": timed_p50_ms(
            lambda: build_request(route, http_body.parse_json_object(body), {}, []), n
        ),
        "bridge_response_encode_p50_ms": timed_p50_ms(
            lambda: renderer.render(json_codec.message_to_dict(reply)), n
        ),
        "query_response_bytes_proto": reply.ByteSize(),
        "query_response_bytes_json": len(renderer.render(json_codec.message_to_dict(reply))),
    }

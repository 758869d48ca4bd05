"""Address settings with several replicas, and the channel policy built for them."""

from __future__ import annotations

import collections
import json
import time
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from reachstore.ingest.v1 import ingest_service_pb2
from reachstore.query.v1 import query_service_pb2
from reachstore_server.common.channels import grpc_target, service_config, split_addresses
from reachstore_server.common.config import Settings
from reachstore_server.common.config_errors import ConfigError

QUERY = query_service_pb2.DESCRIPTOR.services_by_name["QueryService"]
INGEST = ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"]


def test_targets_for_one_address_a_name_and_several_replicas() -> None:
    assert grpc_target("127.0.0.1:50051") == "127.0.0.1:50051"
    assert grpc_target("query.internal:50051") == "dns:///query.internal:50051"
    assert grpc_target("10.0.0.1:50051, 10.0.0.2:50051") == "ipv4:10.0.0.1:50051,10.0.0.2:50051"


@pytest.mark.parametrize(
    "raw",
    ["", "nohost", "10.0.0.1:99999", "a.internal:1,b.internal:1", "10.0.0.1:1,:2"],
)
def test_bad_address_settings_are_refused(raw: str) -> None:
    with pytest.raises(ConfigError):
        split_addresses(raw, "REACHSTORE_QUERY_ADDR")


def test_settings_accept_replica_lists() -> None:
    settings = Settings.from_env({"REACHSTORE_QUERY_ADDR": "10.0.0.1:50051,10.0.0.2:50051"})
    assert settings.query_addr == "10.0.0.1:50051,10.0.0.2:50051"
    with pytest.raises(ConfigError, match="REACHSTORE_INGEST_ADDR"):
        Settings.from_env({"REACHSTORE_INGEST_ADDR": "a:1,b:2"})


def test_only_safe_methods_are_retried_and_calls_are_balanced() -> None:
    config = json.loads(service_config([QUERY, INGEST]))
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    retried = {
        (n["service"].rsplit(".", 1)[-1], n["method"]) for n in config["methodConfig"][0]["name"]
    }
    assert ("QueryService", "Query") in retried and ("IngestService", "GetTask") in retried
    assert ("IngestService", "DeleteNamespace") in retried  # IDEMPOTENT
    assert ("IngestService", "CreateDocument") not in retried
    assert ("IngestService", "CreateNamespace") not in retried
    policy = config["methodConfig"][0]["retryPolicy"]
    assert policy["retryableStatusCodes"] == ["UNAVAILABLE"]


def _replica(name: str) -> tuple[grpc.Server, health.HealthServicer, str]:
    """A gRPC server answering /test.Who/Name with its own name, with a health service."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.unary_unary_rpc_method_handler(
        lambda request, context: name.encode(),
        request_deserializer=lambda b: b,
        response_serializer=lambda b: b,
    )
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("test.Who", {"Name": handler})]
    )
    checks = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    checks.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, checks, f"127.0.0.1:{port}"


def test_a_replica_reporting_not_serving_gets_no_calls() -> None:
    (a, a_health, a_addr), (b, _, b_addr) = _replica("a"), _replica("b")
    options = [("grpc.service_config", service_config([]))]
    try:
        with grpc.insecure_channel(grpc_target(f"{a_addr},{b_addr}"), options=options) as channel:
            who = channel.unary_unary(
                "/test.Who/Name", request_serializer=lambda b: b, response_deserializer=bytes
            )

            def answers(n: int) -> collections.Counter[bytes]:
                return collections.Counter(
                    who(b"", timeout=5, wait_for_ready=True) for _ in range(n)
                )

            assert set(answers(20)) == {b"a", b"b"}
            # What a replica reports while it drains: the channel moves every call away.
            a_health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
            deadline = time.monotonic() + 5
            while answers(10) != {b"b": 10} and time.monotonic() < deadline:
                time.sleep(0.05)
            assert answers(40) == {b"b": 40}
            a_health.set("", health_pb2.HealthCheckResponse.SERVING)
            deadline = time.monotonic() + 5
            while set(answers(10)) != {b"a", b"b"} and time.monotonic() < deadline:
                time.sleep(0.05)
            assert set(answers(20)) == {b"a", b"b"}
    finally:
        a.stop(None)
        b.stop(None)

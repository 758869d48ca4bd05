"""Address settings with several replicas, and the channel policy built for them."""

from __future__ import annotations

import json

import pytest

from reachstore.ingest.v1 import ingest_service_pb2
from reachstore.query.v1 import query_service_pb2
from services.common.channels import grpc_target, service_config, split_addresses
from services.common.config import Settings
from services.common.config_errors import ConfigError

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

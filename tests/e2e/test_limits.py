"""Rate limits and size quotas, end to end, with limits set low enough to reach."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import reachstore
from tests.e2e.conftest import wait_task
from tests.e2e.system import RunningSystem
from tests.e2e.test_auth import make_key

LOW_LIMITS = {
    "REACHSTORE_REQUIRE_KEYS": "true",
    "REACHSTORE_LIMIT_KEY_QUERY_RATE": "1",
    "REACHSTORE_LIMIT_KEY_QUERY_BURST": "3",
    "REACHSTORE_LIMIT_NAMESPACE_QUERY_RATE": "1",
    "REACHSTORE_LIMIT_NAMESPACE_QUERY_BURST": "2",
    "REACHSTORE_LIMIT_MAX_NAMESPACES_PER_TENANT": "2",
    "REACHSTORE_LIMIT_MAX_DOCUMENTS_PER_NAMESPACE": "3",
    "REACHSTORE_LIMIT_MAX_BYTES_PER_TENANT": "100000",
}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    system = RunningSystem(tmp_path_factory.mktemp("limited"), LOW_LIMITS)
    system.start()
    yield system
    assert system.stop() == 0


def _client(system: RunningSystem, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=system.http_url, timeout=30, headers={"Authorization": f"Bearer {key}"}
    )


def test_a_key_over_its_call_rate_gets_429_with_the_wait(limited: RunningSystem) -> None:
    key = make_key(limited, "rates", "read")
    with _client(limited, key) as http:
        replies = [
            http.post("/api/v1/query", json={"namespaces": ["x"], "query": "y"}) for _ in range(5)
        ]
    statuses = [r.status_code for r in replies]
    assert statuses[:3] == [200, 200, 200] and 429 in statuses[3:]
    limited_reply = next(r for r in replies if r.status_code == 429)
    error = limited_reply.json()["error"]
    assert (error["code"], error["category"], error["retryable"]) == ("RATE_LIMITED", "quota", True)
    assert 0 < error["retry_after_ms"] <= 1000
    assert int(limited_reply.headers["retry-after"]) >= 1


def test_grpc_callers_get_the_same_quota_error(limited: RunningSystem) -> None:
    key = make_key(limited, "rates-grpc", "read")
    # Retries off: the point is the error a caller sees, not the SDK waiting it out.
    with reachstore.Client(
        limited.query_addr, limited.ingest_addr, api_key=key, retries=None
    ) as sdk:
        with pytest.raises(reachstore.QuotaError) as over:
            for _ in range(5):
                sdk.search(["x"], "y")
    assert over.value.code == "RATE_LIMITED" and over.value.retryable
    assert 0 < over.value.retry_after_ms <= 1000


def test_a_namespace_over_its_search_rate_fails_alone(limited: RunningSystem) -> None:
    writer = make_key(limited, "nsrate", "read,write")
    with _client(limited, writer) as http:
        for name in ("hot", "cool"):
            http.post("/api/v1/namespaces", json={"name": name})
    readers = [make_key(limited, "nsrate", "read") for _ in range(2)]
    metas = []
    for reader in readers:  # two keys, so the key's own call rate is not what stops them
        with _client(limited, reader) as http:
            for _ in range(2):
                namespaces = ["hot", "cool"] if not metas else ["hot"]
                metas.append(
                    http.post(
                        "/api/v1/query", json={"namespaces": namespaces, "query": "y"}
                    ).json()["meta"]
                )
    assert metas[0]["coverage_ratio"] == 1.0
    last = metas[-1]
    [failed] = last["namespaces_failed"]
    assert (failed["namespace"], failed["error_code"], failed["category"]) == (
        "hot",
        "NAMESPACE_RATE_LIMITED",
        "quota",
    )
    assert failed["retryable"] is True and failed["retry_after_ms"] > 0


def test_size_quotas_fail_only_what_is_over_them(limited: RunningSystem) -> None:
    key = make_key(limited, "sizes", "read,write")
    with _client(limited, key) as http:
        assert http.post("/api/v1/namespaces", json={"name": "one"}).status_code == 200
        assert http.post("/api/v1/namespaces", json={"name": "two"}).status_code == 200
        third = http.post("/api/v1/namespaces", json={"name": "three"})
        assert third.status_code == 400
        error = third.json()["error"]
        assert (error["code"], error["category"], error["retryable"]) == (
            "NAMESPACE_LIMIT_REACHED",
            "quota",
            False,
        )
        assert error["structured_data"]["limit"] == 2

        docs = [{"document_id": f"d{i}", "text": f"Document number {i}."} for i in range(5)]
        body = http.post(
            "/api/v1/namespaces/one/documents:batchCreate", json={"documents": docs}
        ).json()
        assert [r["outcome"] for r in body["results"]] == ["accepted"] * 3 + ["failed"] * 2
        assert {f["error_code"] for f in body["meta"]["failed"]} == {"DOCUMENT_LIMIT_REACHED"}
        assert [f["batch_index"] for f in body["meta"]["failed"]] == [3, 4]
        assert body["meta"]["coverage_ratio"] == 0.6
        for result in body["results"][:3]:
            assert wait_task(http, result["task_id"])["state"] == "completed"
        single = http.post("/api/v1/namespaces/one/documents", json={"document": {"text": "more"}})
        assert single.status_code == 400
        assert single.json()["error"]["code"] == "DOCUMENT_LIMIT_REACHED"
        big = http.post(
            "/api/v1/namespaces/two/documents:batchCreate",
            json={
                "documents": [
                    {"document_id": "huge", "text": "x" * 150_000},
                    {"document_id": "small", "text": "fits"},
                ]
            },
        ).json()
        assert [r["outcome"] for r in big["results"]] == ["failed", "accepted"]
        assert big["meta"]["failed"][0]["error_code"] == "STORAGE_LIMIT_REACHED"
        assert big["meta"]["failed"][0]["structured_data"]["limit_bytes"] == 100000

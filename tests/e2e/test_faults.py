"""Real processes, broken on purpose: slow namespaces, corrupt snapshots, killed services."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from reachstore_server.query.index import NamespaceIndex, read_snapshot_file
from tests.e2e.conftest import ingest, wait_task
from tests.e2e.system import RunningSystem

FILLER = "Text that needs embedding before it can be searched. " * 20


def test_a_slow_namespace_times_out_while_the_others_answer(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path, {"REACHSTORE_FAULT_NAMESPACE_DELAY_MS": "slow=8000"})
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            ingest(http, "fast", [{"document_id": "f", "text": "Rivers flow into the sea."}])
            ingest(http, "slow", [{"document_id": "s", "text": "Rivers flow into lakes too."}])
            started = time.monotonic()
            reply = http.post(
                "/api/v1/query",
                json={"namespaces": ["fast", "slow"], "query": "rivers", "timeout_ms": 300},
            )
            elapsed = time.monotonic() - started
            body = reply.json()
            assert reply.status_code == 200
            assert body["meta"]["coverage_ratio"] == 0.5
            assert [r["namespace"] for r in body["results"]] == ["fast"]
            [failed] = body["meta"]["namespaces_failed"]
            assert failed["namespace"] == "slow"
            assert (failed["category"], failed["error_code"]) == ("timeout", "NAMESPACE_TIMEOUT")
            assert failed["retryable"] is True and failed["retry_after_ms"] > 0
            assert failed["structured_data"]["timeout_ms"] == 300
            # The answer came at the budget, not after the injected 8 s delay, and the
            # search that ran out of time was told to stop.
            assert elapsed < 4.0
            strict = http.post(
                "/api/v1/query",
                json={
                    "namespaces": ["fast", "slow"],
                    "query": "rivers",
                    "timeout_ms": 300,
                    "allow_partial": False,
                },
            )
            assert strict.status_code == 503 and strict.headers["retry-after"] == "1"
            error = strict.json()["error"]
            assert (error["code"], error["category"], error["retryable"]) == (
                "INCOMPLETE_RESULT",
                "transient",
                True,
            )
            assert error["retry_after_ms"] == failed["retry_after_ms"]
            metrics = httpx.get(system.metrics_url, timeout=10).text
            assert "reachstore_query_searches_cancelled_total 2.0" in metrics
            assert 'category="timeout",error_code="NAMESPACE_TIMEOUT"} 2.0' in metrics
    finally:
        assert system.stop() == 0


def test_a_corrupt_snapshot_is_rebuilt_from_the_store(tmp_path: Path) -> None:
    first = RunningSystem(tmp_path)
    first.start()
    with httpx.Client(base_url=first.http_url, timeout=30) as http:
        ingest(
            http,
            "durable",
            [
                {"document_id": f"d{i}", "text": f"Lighthouse number {i} guides ships."}
                for i in range(20)
            ],
        )
        assert (
            http.post(
                "/api/v1/query", json={"namespaces": ["durable"], "query": "lighthouse"}
            ).json()["meta"]["coverage_ratio"]
            == 1.0
        )
    assert first.stop() == 0
    snapshots = sorted((tmp_path / "indexes").glob("*.snap"))
    assert snapshots, "the query service writes snapshots when it stops"
    for path in snapshots:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the payload
        path.write_bytes(bytes(data))

    second = RunningSystem(tmp_path, {"REACHSTORE_FAULT_REBUILD_DELAY_MS": "8000"})
    second.start()
    try:
        with httpx.Client(base_url=second.http_url, timeout=30) as http:
            query = {
                "namespaces": ["durable"],
                "query": "lighthouse",
                "top_k": 3,
                "timeout_ms": 200,
            }
            body = http.post("/api/v1/query", json=query).json()
            [failed] = body["meta"]["namespaces_failed"]
            assert (failed["category"], failed["error_code"]) == ("transient", "INDEX_REBUILDING")
            assert failed["retryable"] is True and failed["retry_after_ms"] > 0
            assert failed["structured_data"]["index_state"] == "rebuilding"
            deadline = time.monotonic() + 30
            while body["meta"]["coverage_ratio"] < 1.0:
                assert time.monotonic() < deadline, body
                time.sleep(failed["retry_after_ms"] / 1000)
                body = http.post("/api/v1/query", json=query).json()
            assert len(body["results"]) == 3
    finally:
        assert second.stop() == 0
    for path in sorted((tmp_path / "indexes").glob("*.snap")):
        index, _seq = NamespaceIndex.from_snapshot(read_snapshot_file(path))  # intact again
        assert index.chunk_count > 0


def test_killing_ingest_mid_task_loses_nothing_accepted(tmp_path: Path) -> None:
    first = RunningSystem(tmp_path)
    first.start()
    with httpx.Client(base_url=first.http_url, timeout=30) as http:
        http.post("/api/v1/namespaces", json={"name": "bulk"})
        docs = [{"document_id": f"b{i:03d}", "text": f"Item {i}. {FILLER}"} for i in range(100)]
        reply = http.post("/api/v1/namespaces/bulk/documents:batchCreate", json={"documents": docs})
        task_ids = [r["task_id"] for r in reply.json()["results"]]
        assert len(task_ids) == 100
        # Kill as soon as the worker is visibly in the middle of the batch.
        deadline = time.monotonic() + 60
        while http.get(f"/api/v1/tasks/{task_ids[0]}").json()["task"]["state"] == "queued":
            assert time.monotonic() < deadline
            time.sleep(0.02)
    first.kill_component("ingest")
    assert first.wait_exit() == 1, "up stops everything and fails when a service dies"

    second = RunningSystem(tmp_path)
    second.start()
    try:
        with httpx.Client(base_url=second.http_url, timeout=30) as http:
            states = [wait_task(http, t, timeout=120)["state"] for t in task_ids]
            assert states == ["completed"] * 100
            namespace = http.get("/api/v1/namespaces/bulk").json()["namespace"]
            assert namespace["document_count"] == 100
    finally:
        assert second.stop() == 0

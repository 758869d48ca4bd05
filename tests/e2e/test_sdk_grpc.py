"""The same scenarios over the SDK's gRPC path, against the real running system."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import reachstore
from tests.e2e.system import RunningSystem


@pytest.fixture(scope="module")
def client(system: RunningSystem) -> Iterator[reachstore.Client]:
    with reachstore.Client(system.query_addr, system.ingest_addr, timeout=30) as sdk:
        yield sdk


def test_partial_search_reads_like_the_readme(client: reachstore.Client) -> None:
    resp = client.search(["demo", "nope"], "语义存储把什么放在离 Agent 更近的地方？", top_k=2)
    assert resp.meta.coverage_ratio == 0.5
    [failed] = resp.meta.namespaces_failed
    assert (failed["namespace"], failed["retryable"], failed["category"]) == (
        "nope",
        False,
        "permanent",
    )
    assert failed["retry_after_ms"] is None and failed.error_code == "NAMESPACE_UNAVAILABLE"
    assert [r.document_id for r in resp.results] == ["semantic-storage-intro"]


def test_batch_with_failures_then_tasks_to_the_fetch_hint(client: reachstore.Client) -> None:
    client.create_namespace("sdk-batch")
    batch = client.add_documents(
        "sdk-batch",
        [
            {"document_id": "ok", "text": "Swallows migrate south in autumn."},
            {"document_id": "bad id", "text": "x"},
        ],
    )
    assert batch.meta.coverage_ratio == 0.5
    assert [f["batch_index"] for f in batch.meta.failed] == [1]
    [accepted] = [r for r in batch.results if r.task_id]
    task = client.wait_for_task(accepted.task_id)
    assert (task.state, task.agent_decision_hint) == ("completed", "done_fetch_doc")
    assert client.get_document("sdk-batch", "ok").text == "Swallows migrate south in autumn."
    assert client.search(["sdk-batch"], "birds flying south").results[0].document_id == "ok"


def test_whole_request_errors_raise_typed_exceptions(client: reachstore.Client) -> None:
    with pytest.raises(reachstore.NotFoundError) as missing:
        client.get_namespace("never-made")
    assert (missing.value.code, missing.value.category, missing.value.retryable) == (
        "NAMESPACE_UNAVAILABLE",
        "permanent",
        False,
    )
    with pytest.raises(reachstore.QuotaError) as too_many:
        client.search([f"n{i}" for i in range(33)], "x")
    assert too_many.value.structured_data == {"limit": 32, "actual": 33, "field": "namespaces"}
    with pytest.raises(reachstore.PermanentError) as incomplete:
        client.search(["demo", "nope"], "x", allow_partial=False)
    assert incomplete.value.code == "INCOMPLETE_RESULT_PERMANENT"
    assert not incomplete.value.retryable and incomplete.value.retry_after_ms is None
    assert [d.namespace for d in incomplete.value.details] == ["nope"]

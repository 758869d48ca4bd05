"""Namespaces, documents and ingest tasks over HTTP, and what bad input gets back."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import wait_task


def _error(reply: httpx.Response, status: int, code: str) -> dict:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code
    assert set(error) >= {
        "code",
        "message",
        "category",
        "retryable",
        "retry_after_ms",
        "structured_data",
        "request_id",
    }
    return error


def test_namespace_lifecycle_and_pagination(http: httpx.Client) -> None:
    for name in ["life-a", "life-b", "life-c"]:
        assert http.post("/api/v1/namespaces", json={"name": name}).status_code == 200
    _error(http.post("/api/v1/namespaces", json={"name": "life-a"}), 409, "NAMESPACE_EXISTS")
    got = http.get("/api/v1/namespaces/life-a").json()["namespace"]
    assert got["name"] == "life-a" and got["dimension"] == 512 and got["document_count"] == 0
    seen, token = [], ""
    while True:
        page = http.get("/api/v1/namespaces", params={"page_size": 2, "page_token": token}).json()
        assert len(page["namespaces"]) <= 2
        seen += [n["name"] for n in page["namespaces"]]
        token = page["next_page_token"]
        if not token:
            break
    assert {"life-a", "life-b", "life-c", "demo"} <= set(seen) and seen == sorted(seen)
    assert http.delete("/api/v1/namespaces/life-b").status_code == 200
    after_delete = http.get("/api/v1/namespaces/life-b")
    never_existed = http.get("/api/v1/namespaces/never-was")
    assert after_delete.status_code == never_existed.status_code == 404
    a, b = after_delete.json()["error"], never_existed.json()["error"]
    assert (
        (a["code"], a["category"])
        == (b["code"], b["category"])
        == ("NAMESPACE_UNAVAILABLE", "permanent")
    )


@pytest.mark.parametrize("name", ["", "UPPER", "-leading", "has space", "x" * 65, "*"])
def test_bad_namespace_names_are_refused_naming_the_rule(http: httpx.Client, name: str) -> None:
    error = _error(http.post("/api/v1/namespaces", json={"name": name}), 400, "INVALID_ARGUMENT")
    assert error["structured_data"]["field"] == "name"
    assert "lowercase" in error["structured_data"]["rule"]


def test_single_document_is_accepted_with_202_and_its_task_ends_in_fetch_the_doc(
    http: httpx.Client,
) -> None:
    http.post("/api/v1/namespaces", json={"name": "single"})
    reply = http.post(
        "/api/v1/namespaces/single/documents",
        json={
            "document": {
                "document_id": "note-1",
                "text": "Otters hold hands while sleeping.",
                "metadata": {"topic": "animals"},
            }
        },
    )
    assert reply.status_code == 202
    task = reply.json()["task"]
    assert task["state"] in {"queued", "processing", "completed"}
    done = wait_task(http, task["task_id"])
    assert (done["state"], done["agent_decision_hint"], done["percent"]) == (
        "completed",
        "done_fetch_doc",
        100,
    )
    assert done["document_id"] == "note-1" and done["error"] is None
    doc = http.get("/api/v1/namespaces/single/documents/note-1").json()["document"]
    assert doc["text"] == "Otters hold hands while sleeping." and doc["metadata"] == {
        "topic": "animals"
    }
    listed = http.get("/api/v1/namespaces/single/documents").json()["documents"]
    assert [d["document_id"] for d in listed] == ["note-1"]


def test_inline_upload_to_a_missing_namespace_is_accepted_then_fails_in_the_task(
    http: httpx.Client,
) -> None:
    reply = http.post("/api/v1/namespaces/missing-ns/documents", json={"document": {"text": "x"}})
    assert reply.status_code == 202
    done = wait_task(http, reply.json()["task"]["task_id"])
    assert done["state"] == "failed" and done["agent_decision_hint"] == "inspect_error_code"
    assert done["error"]["error_code"] == "NAMESPACE_UNAVAILABLE"
    assert done["error"]["retryable"] is False


def test_batch_with_some_bad_documents_stores_the_good_ones(http: httpx.Client) -> None:
    http.post("/api/v1/namespaces", json={"name": "batch"})
    docs = [
        {"document_id": "good-1", "text": "Bees communicate by dancing."},
        {"document_id": "bad id!", "text": "invalid id"},
        {"document_id": "good-2", "text": "Octopuses have three hearts."},
        {"document_id": "empty", "text": "   "},
        {"document_id": "huge", "text": "y" * (1024 * 1024 + 1)},
    ]
    reply = http.post("/api/v1/namespaces/batch/documents:batchCreate", json={"documents": docs})
    assert reply.status_code == 200
    body = reply.json()
    assert body["meta"]["coverage_ratio"] == pytest.approx(0.4)
    assert [r["outcome"] for r in body["results"]] == [
        "accepted",
        "failed",
        "accepted",
        "failed",
        "failed",
    ]
    failed = {f["batch_index"]: f for f in body["meta"]["failed"]}
    assert set(failed) == {1, 3, 4}
    assert failed[1]["structured_data"]["field"] == "documents[1].document_id"
    assert failed[4]["error_code"] == "DOCUMENT_TOO_LARGE"
    assert failed[4]["structured_data"]["limit_bytes"] == 1024 * 1024
    for f in failed.values():
        assert (f["category"], f["retryable"], f["retry_after_ms"]) == ("permanent", False, None)
    for result in body["results"]:
        if result["task_id"]:
            assert wait_task(http, result["task_id"])["state"] == "completed"
    listed = http.get("/api/v1/namespaces/batch/documents").json()["documents"]
    assert [d["document_id"] for d in listed] == ["good-1", "good-2"]


def test_on_duplicate_in_a_batch(http: httpx.Client) -> None:
    http.post("/api/v1/namespaces", json={"name": "dups"})
    first = http.post(
        "/api/v1/namespaces/dups/documents:batchCreate",
        json={"documents": [{"document_id": "d", "text": "original"}]},
    ).json()
    wait_task(http, first["results"][0]["task_id"])
    as_error = http.post(
        "/api/v1/namespaces/dups/documents:batchCreate",
        json={"documents": [{"document_id": "d", "text": "again"}]},
    ).json()
    assert as_error["meta"]["failed"][0]["error_code"] == "DOCUMENT_EXISTS"
    skipped = http.post(
        "/api/v1/namespaces/dups/documents:batchCreate",
        json={"documents": [{"document_id": "d", "text": "again"}], "on_duplicate": "skip"},
    ).json()
    assert (
        skipped["results"][0]["outcome"] == "skipped" and skipped["meta"]["coverage_ratio"] == 1.0
    )
    assert http.get("/api/v1/namespaces/dups/documents/d").json()["document"]["text"] == "original"


@pytest.mark.parametrize(
    ("docs", "code", "data"),
    [
        ([], "BATCH_EMPTY", {"limit": 100, "actual": 0}),
        ([{"text": f"t{i}"} for i in range(101)], "BATCH_TOO_LARGE", {"limit": 100, "actual": 101}),
        (
            [{"document_id": "a", "text": "1"}, {"document_id": "a", "text": "2"}],
            "DUPLICATE_DOCUMENT_IDS",
            {"duplicate_ids": ["a"]},
        ),
    ],
)
def test_batch_envelope_faults_are_whole_request_errors(
    http: httpx.Client, docs: list, code: str, data: dict
) -> None:
    http.post("/api/v1/namespaces", json={"name": "envelope"})
    error = _error(
        http.post("/api/v1/namespaces/envelope/documents:batchCreate", json={"documents": docs}),
        400,
        code,
    )
    for key, value in data.items():
        assert error["structured_data"][key] == value
    assert http.get("/api/v1/namespaces/envelope").json()["namespace"]["document_count"] == 0


def test_cancelling_a_queued_task_stops_it(http: httpx.Client) -> None:
    http.post("/api/v1/namespaces", json={"name": "cancels"})
    docs = [
        {"document_id": f"c{i}", "text": f"Document {i}. " + "Some filler text to embed. " * 60}
        for i in range(100)
    ]
    results = http.post(
        "/api/v1/namespaces/cancels/documents:batchCreate", json={"documents": docs}
    ).json()["results"]
    last = results[-1]["task_id"]
    cancelled = http.post(f"/api/v1/tasks/{last}:cancel", json={}).json()["task"]
    assert cancelled["state"] in {"cancelled", "cancelling"}
    final = wait_task(http, last)
    assert final["state"] == "cancelled" and final["agent_decision_hint"] == "stop"
    assert http.get("/api/v1/namespaces/cancels/documents/c99").status_code == 404
    again = http.post(f"/api/v1/tasks/{last}:cancel", json={}).json()["task"]
    assert again["state"] == "cancelled"


def test_unknown_task_is_404(http: httpx.Client) -> None:
    _error(http.get("/api/v1/tasks/no-such-task"), 404, "TASK_NOT_FOUND")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"namespaces": ["demo"], "query": "x", "top_k": "ten"}, "top_k"),
        ({"namespaces": "demo", "query": "x"}, "namespaces"),
        ({"namespaces": ["demo"], "query": 5}, "query"),
        ({"namespaces": ["demo"], "query": "x", "top_k": 1000}, "top_k"),
        ({"namespaces": ["demo"], "query": "x", "colour": "red"}, "colour"),
        ({"namespaces": ["demo"], "query": ""}, "query"),
        ({"namespaces": [], "query": "x"}, "namespaces"),
        ({"namespaces": ["Bad Name"], "query": "x"}, "namespaces[0]"),
    ],
)
def test_wrong_fields_get_a_400_naming_the_field(
    http: httpx.Client, body: dict, field: str
) -> None:
    reply = http.post("/api/v1/query", json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["category"] == "permanent" and error["retryable"] is False
    assert field in error["message"] or error["structured_data"].get("field") == field


def test_malformed_json_and_wrong_content_type_are_clear_4xx(http: httpx.Client) -> None:
    bad = http.post(
        "/api/v1/query",
        content=b'{"namespaces": ["demo"',
        headers={"content-type": "application/json"},
    )
    _error(bad, 400, "MALFORMED_JSON")
    not_object = http.post(
        "/api/v1/query", content=b"[1, 2]", headers={"content-type": "application/json"}
    )
    _error(not_object, 400, "MALFORMED_JSON")
    text = http.post(
        "/api/v1/query", content=b"namespaces=demo", headers={"content-type": "text/plain"}
    )
    _error(text, 415, "UNSUPPORTED_MEDIA_TYPE")


def test_an_oversize_body_is_refused_with_the_limit(http: httpx.Client) -> None:
    body = b'{"documents": [{"text": "' + b"z" * (21 * 1024 * 1024) + b'"}]}'
    reply = http.post(
        "/api/v1/namespaces/demo/documents:batchCreate",
        content=body,
        headers={"content-type": "application/json"},
    )
    error = _error(reply, 413, "PAYLOAD_TOO_LARGE")
    assert error["structured_data"]["limit_bytes"] == 20 * 1024 * 1024


def test_unknown_routes_and_methods(http: httpx.Client) -> None:
    _error(http.get("/api/v1/nothing-here"), 404, "ROUTE_NOT_FOUND")
    _error(http.get("/api/v1/query"), 405, "METHOD_NOT_ALLOWED")


def test_openapi_document_lists_every_route(http: httpx.Client) -> None:
    spec = http.get("/api/v1/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    for path in [
        "/api/v1/query",
        "/api/v1/namespaces",
        "/api/v1/tasks/{task_id}",
        "/api/v1/namespaces/{namespace}/documents:batchCreate",
    ]:
        assert path in spec["paths"]

"""The bridge over real HTTP (uvicorn) in front of real gRPC servers.

The servicers in conftest raise ``errors.ReachstoreError``, so every error here travelled
as a rich gRPC status exactly as it would from the real services.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from conftest import Backend

# An unexpected error is not said to pass with time: retrying it as sent is not advised.
NOT_RETRYABLE_INTERNAL = {"category": "permanent", "retryable": False, "retry_after_ms": None}


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {
        "code",
        "message",
        "category",
        "retryable",
        "retry_after_ms",
        "structured_data",
        "request_id",
        "details",
    }
    assert error["request_id"] == response.headers["x-request-id"]
    return error


# --- success --------------------------------------------------------------------------------


def test_query_with_partial_failure_renders_the_documented_shape(client: httpx.Client) -> None:
    response = client.post("/api/v1/query", json={"namespaces": ["demo", "nope"], "query": "q"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "results": [
            {
                "namespace": "demo",
                "document_id": "doc-1",
                "chunk_index": 0,
                "text": "hello",
                "score": 0.75,
                "metadata": {"lang": "en"},
            }
        ],
        "meta": {
            "coverage_ratio": 0.5,
            "namespaces_queried": ["demo", "nope"],
            "namespaces_succeeded": ["demo"],
            "namespaces_failed": [
                {
                    "namespace": "nope",
                    "document_id": "",
                    "batch_index": None,
                    "action_id": "",
                    "category": "permanent",
                    "error_code": "NAMESPACE_UNAVAILABLE",
                    "message": (
                        "The namespace does not exist or is not visible to the caller; the two "
                        "cases are deliberately indistinguishable."
                    ),
                    "retryable": False,
                    "retry_after_ms": None,
                    "structured_data": {"namespace": "nope"},
                }
            ],
        },
    }


def test_create_document_answers_202_with_the_task(client: httpx.Client, backend: Backend) -> None:
    response = client.post(
        "/api/v1/namespaces/demo/documents",
        json={
            "document": {"document_id": "d1", "text": "hello", "metadata": {"k": "v"}},
            "on_duplicate": "overwrite",
        },
    )
    assert response.status_code == 202
    task = response.json()["task"]
    assert (task["state"], task["agent_decision_hint"], task["poll_after_ms"]) == (
        "queued",
        "poll_again",
        500,
    )
    assert task["error"] is None
    request, _ = backend.recorder.last("CreateDocument")
    assert request.namespace == "demo"
    assert request.document.metadata == {"k": "v"}
    assert request.on_duplicate == 2  # ON_DUPLICATE_OVERWRITE


def test_get_task_prints_zero_values_and_absent_optionals(client: httpx.Client) -> None:
    response = client.get("/api/v1/tasks/t-9")
    assert response.status_code == 200
    assert response.json() == {
        "task": {
            "task_id": "t-9",
            "namespace": "demo",
            "document_id": "doc-1",
            "state": "completed",
            "phase": "unspecified",
            "percent": 100,
            "agent_decision_hint": "done_fetch_doc",
            "poll_after_ms": None,
            "error": None,
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "",
        },
        "partial_failures": [],
    }


def test_suffix_verb_route_reaches_its_rpc(client: httpx.Client) -> None:
    response = client.post("/api/v1/tasks/t-3:cancel", json={})
    assert response.status_code == 200
    assert response.json()["task"]["state"] == "cancelled"


def test_int64_is_a_json_number(client: httpx.Client) -> None:
    response = client.post("/api/v1/namespaces", json={"name": "fresh"})
    assert response.status_code == 200
    assert re.search(rb'"document_count":1099511627776\b', response.content)


def test_query_params_and_encoded_path_reach_the_service(
    client: httpx.Client, backend: Backend
) -> None:
    response = client.get("/api/v1/namespaces/a%2Fb/documents", params={"page_size": 5})
    assert response.status_code == 200
    request, _ = backend.recorder.last("ListDocuments")
    assert (request.namespace, request.page_size) == ("a/b", 5)


def test_empty_post_body_counts_as_empty_object(client: httpx.Client, backend: Backend) -> None:
    response = client.post("/api/v1/query", headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    request, _ = backend.recorder.last("Query")
    assert list(request.namespaces) == [] and request.query == ""
    # Without saying it is JSON, an empty POST is what any web page can send blind.
    assert client.post("/api/v1/query").status_code == 415


def test_request_id_is_sent_to_the_service_and_returned(
    client: httpx.Client, backend: Backend
) -> None:
    response = client.get("/api/v1/namespaces/demo/documents/doc-7")
    assert response.status_code == 200
    _, metadata = backend.recorder.last("GetDocument")
    assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-request-id"])
    assert metadata["x-request-id"] == response.headers["x-request-id"]


# --- errors from the services -----------------------------------------------------------------


def test_whole_request_error_maps_status_and_body(client: httpx.Client) -> None:
    response = client.get("/api/v1/tasks/missing")
    assert response.status_code == 404
    assert "retry-after" not in response.headers
    error = _error(response)
    assert error["code"] == "TASK_NOT_FOUND"
    assert (error["category"], error["retryable"], error["retry_after_ms"]) == (
        "permanent",
        False,
        None,
    )
    assert error["structured_data"] == {"task_id": "missing"}
    assert error["details"] == []


def test_conflict_error_maps_to_409(client: httpx.Client) -> None:
    response = client.post("/api/v1/namespaces", json={"name": "exists"})
    assert response.status_code == 409
    assert _error(response)["code"] == "NAMESPACE_EXISTS"


def test_retryable_error_sets_retry_after_rounded_up(client: httpx.Client) -> None:
    response = client.post("/api/v1/namespaces", json={"name": "busy"})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "3"  # 2500 ms, rounded up
    error = _error(response)
    assert (error["code"], error["category"], error["retryable"], error["retry_after_ms"]) == (
        "SERVICE_UNAVAILABLE",
        "transient",
        True,
        2500,
    )
    assert error["message"] == "store is busy"


def test_extra_partial_failures_travel_as_details(client: httpx.Client) -> None:
    response = client.post("/api/v1/query", json={"namespaces": ["slow"], "query": "fail-whole"})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    error = _error(response)
    assert error["code"] == "INCOMPLETE_RESULT"
    assert error["structured_data"] == {"namespaces_failed": 1}
    assert len(error["details"]) == 1
    detail = error["details"][0]
    assert (detail["namespace"], detail["error_code"], detail["category"]) == (
        "slow",
        "NAMESPACE_TIMEOUT",
        "timeout",
    )
    assert (detail["retryable"], detail["retry_after_ms"]) == (True, 1000)
    assert detail["structured_data"] == {"timeout_ms": 2000}


def test_grpc_error_without_details_maps_to_the_catalogue(client: httpx.Client) -> None:
    response = client.post("/api/v1/query", json={"query": "no-details"})
    assert response.status_code == 503
    error = _error(response)
    assert error["code"] == "SERVICE_UNAVAILABLE"
    assert error["structured_data"] == {
        "service": "reachstore.query.v1.QueryService",
        "grpc_code": "UNAVAILABLE",
    }
    assert "plain status" not in error["message"]  # transport text stays in the log


def test_servicer_crash_gives_internal_error_body_not_a_trace(client: httpx.Client) -> None:
    response = client.post("/api/v1/query", json={"query": "crash"})
    assert response.status_code == 500
    error = _error(response)
    assert error["code"] == "INTERNAL"
    assert {k: error[k] for k in NOT_RETRYABLE_INTERNAL} == NOT_RETRYABLE_INTERNAL
    assert "retry-after" not in response.headers
    assert "Traceback" not in response.text and "servicer bug" not in response.text


# --- the bridge's own request checks ----------------------------------------------------------


def _post(
    client: httpx.Client, path: str, content: bytes, content_type: str = "application/json"
) -> httpx.Response:
    return client.post(path, content=content, headers={"content-type": content_type})


def test_malformed_json_gives_400(client: httpx.Client) -> None:
    response = _post(client, "/api/v1/query", b'{"query": ')
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == "MALFORMED_JSON"
    assert error["structured_data"]["line"] == 1


def test_json_that_is_not_an_object_is_malformed(client: httpx.Client) -> None:
    response = _post(client, "/api/v1/query", b'["q"]')
    assert response.status_code == 400
    error = _error(response)
    assert (error["code"], error["message"]) == (
        "MALFORMED_JSON",
        "the body must be a JSON object, got array",
    )


def test_wrong_type_gives_400_naming_the_field(client: httpx.Client) -> None:
    response = client.post("/api/v1/query", json={"query": "q", "top_k": "ten"})
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == "INVALID_ARGUMENT"
    assert error["structured_data"] == {
        "field": "top_k",
        "rule": "expected integer, got string",
        "expected": "integer",
        "got": "string",
    }


def test_unknown_field_gives_400_naming_the_path(client: httpx.Client) -> None:
    response = client.post(
        "/api/v1/namespaces/demo/documents:batchCreate",
        json={"documents": [{"text": "a"}, {"text": "b"}, {"txt": "c"}]},
    )
    assert response.status_code == 400
    error = _error(response)
    assert error["structured_data"] == {"field": "documents[2].txt", "rule": "unknown field"}
    assert error["message"] == "documents[2].txt: unknown field"


def test_lower_camel_case_field_names_reach_the_service(
    client: httpx.Client, backend: Backend
) -> None:
    response = client.post(
        "/api/v1/query", json={"namespaces": ["demo"], "query": "q", "topK": 3, "timeoutMs": 50}
    )
    assert response.status_code == 200
    request, _ = backend.recorder.last("Query")
    assert (request.top_k, request.timeout_ms) == (3, 50)


def test_both_names_of_one_field_give_400_and_nothing_is_sent(
    client: httpx.Client, backend: Backend
) -> None:
    before = len(backend.recorder.calls)
    response = client.post(
        "/api/v1/namespaces/demo/documents:batchCreate",
        json={"documents": [{"text": "a"}], "on_duplicate": "error", "onDuplicate": "overwrite"},
    )
    assert response.status_code == 400
    error = _error(response)
    assert error["structured_data"]["field"] == "onDuplicate"
    assert error["structured_data"]["conflicts_with"] == "on_duplicate"
    assert "field on_duplicate given twice" in error["message"]
    assert len(backend.recorder.calls) == before


def test_bad_query_param_gives_400(client: httpx.Client) -> None:
    response = client.get("/api/v1/namespaces", params={"page_size": "x"})
    assert response.status_code == 400
    assert _error(response)["structured_data"]["field"] == "page_size"


def test_body_on_a_route_without_body_is_refused(client: httpx.Client) -> None:
    response = client.request("GET", "/api/v1/tasks/t", json={"task_id": "t"})
    assert response.status_code == 400
    assert _error(response)["structured_data"]["field"] == "body"


def test_non_json_content_type_gives_415(client: httpx.Client) -> None:
    response = _post(client, "/api/v1/query", b"query=q", "application/x-www-form-urlencoded")
    assert response.status_code == 415
    error = _error(response)
    assert error["code"] == "UNSUPPORTED_MEDIA_TYPE"
    assert error["structured_data"]["content_type"] == "application/x-www-form-urlencoded"


def test_missing_content_type_with_a_chunked_body_gives_415(client: httpx.Client) -> None:
    response = client.post("/api/v1/query", content=iter([b'{"query": "q"}']))
    assert response.status_code == 415


LIMIT = 20 * 1024 * 1024


def test_oversize_body_by_content_length_gives_413(client: httpx.Client) -> None:
    response = _post(client, "/api/v1/query", b" " * (LIMIT + 1))
    assert response.status_code == 413
    error = _error(response)
    assert error["code"] == "PAYLOAD_TOO_LARGE"
    assert error["structured_data"] == {"limit_bytes": LIMIT, "actual_bytes": LIMIT + 1}


def test_oversize_chunked_body_gives_413(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(21):
            yield b" " * (1024 * 1024)

    response = client.post(
        "/api/v1/query", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in response.request.headers  # really chunked
    assert response.status_code == 413
    error = _error(response)
    assert error["structured_data"]["limit_bytes"] == LIMIT
    assert error["structured_data"]["actual_bytes"] > LIMIT
    # The connection is still usable afterwards.
    assert client.get("/healthz").status_code == 200


def test_body_just_under_the_limit_is_read(client: httpx.Client) -> None:
    body = b'{"query": "q"}' + b" " * (LIMIT - 14)
    response = _post(client, "/api/v1/query", body)
    assert response.status_code == 200


def test_unknown_route_gives_404(client: httpx.Client) -> None:
    response = client.get("/api/v1/nothing-here")
    assert response.status_code == 404
    error = _error(response)
    assert error["code"] == "ROUTE_NOT_FOUND"
    assert error["structured_data"]["path"] == "/api/v1/nothing-here"


def test_wrong_method_gives_405_with_allowed_methods(client: httpx.Client) -> None:
    response = client.put("/api/v1/namespaces/demo")
    assert response.status_code == 405
    assert response.headers["allow"] == "DELETE, GET"
    error = _error(response)
    assert error["code"] == "METHOD_NOT_ALLOWED"
    assert error["structured_data"]["allowed"] == ["DELETE", "GET"]


def test_unusual_method_on_builtin_path_gives_405_in_error_shape(client: httpx.Client) -> None:
    response = client.request("PROPFIND", "/healthz")
    assert response.status_code == 405
    assert _error(response)["structured_data"]["allowed"] == ["GET"]


# --- documents and health ---------------------------------------------------------------------


def test_openapi_document_is_served(client: httpx.Client) -> None:
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    doc = response.json()
    assert doc["openapi"] == "3.1.0"
    assert "/api/v1/namespaces/{namespace}/documents:batchCreate" in doc["paths"]
    assert "reachstore.query.v1.QueryResponse" in doc["components"]["schemas"]


def test_healthz_answers_ok(client: httpx.Client) -> None:
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_reports_each_serving_service(client: httpx.Client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "services": {
            "reachstore.query.v1.QueryService": "serving",
            "reachstore.ingest.v1.IngestService": "serving",
        },
    }


def test_responses_are_compact_utf8_json(client: httpx.Client) -> None:
    response = client.get("/api/v1/tasks/missing")
    assert json.loads(response.content.decode("utf-8"))["error"]["code"] == "TASK_NOT_FOUND"
    assert b": " not in response.content

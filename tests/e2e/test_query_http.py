"""The partial-success query over HTTP, against a real running system."""

from __future__ import annotations

import httpx

from tests.e2e.conftest import ingest

POLICY_DOCS = [
    {
        "document_id": "refunds",
        "text": "Refunds are paid back to the original card within five "
        "working days after the returned parcel arrives.",
        "metadata": {"lang": "en", "kind": "policy"},
    },
    {
        "document_id": "shipping",
        "text": "Parcels ship from the Shanghai warehouse every weekday; "
        "express delivery takes two days.",
        "metadata": {"lang": "en", "kind": "logistics"},
    },
    {
        "document_id": "refunds-zh",
        "text": "退款会在退货包裹到达后的五个工作日内退回原支付卡。",
        "metadata": {"lang": "zh", "kind": "policy"},
    },
]


def _query(http: httpx.Client, **body: object) -> httpx.Response:
    return http.post("/api/v1/query", json=body)


def test_query_with_one_missing_namespace_returns_half_coverage(http: httpx.Client) -> None:
    ingest(http, "policy", POLICY_DOCS)
    reply = _query(http, namespaces=["policy", "nope"], query="how long do refunds take", top_k=2)
    assert reply.status_code == 200
    body = reply.json()
    meta = body["meta"]
    assert meta["coverage_ratio"] == 0.5
    assert meta["namespaces_queried"] == ["policy", "nope"]
    assert meta["namespaces_succeeded"] == ["policy"]
    [failed] = meta["namespaces_failed"]
    assert failed["namespace"] == "nope"
    assert failed["category"] == "permanent"
    assert failed["retryable"] is False
    assert failed["retry_after_ms"] is None
    assert failed["error_code"] == "NAMESPACE_UNAVAILABLE"
    assert failed["structured_data"] == {"namespace": "nope", "index_state": "unavailable"}
    assert len(body["results"]) == 2
    assert body["results"][0]["document_id"] in {"refunds", "refunds-zh"}
    first = body["results"][0]
    assert set(first) == {"namespace", "document_id", "chunk_index", "text", "score", "metadata"}
    assert first["namespace"] == "policy"


def test_query_where_every_namespace_fails_is_still_200_with_zero_coverage(
    http: httpx.Client,
) -> None:
    reply = _query(http, namespaces=["nope", "nope-2"], query="anything", top_k=2)
    assert reply.status_code == 200
    body = reply.json()
    assert body["results"] == []
    assert body["meta"]["coverage_ratio"] == 0.0
    assert [f["namespace"] for f in body["meta"]["namespaces_failed"]] == ["nope", "nope-2"]


def test_duplicate_namespaces_are_queried_once_in_order(http: httpx.Client) -> None:
    ingest(http, "policy", POLICY_DOCS)
    meta = _query(http, namespaces=["nope", "policy", "nope"], query="refund").json()["meta"]
    assert meta["namespaces_queried"] == ["nope", "policy"]
    assert meta["coverage_ratio"] == 0.5


def test_star_means_every_namespace_the_caller_may_read(http: httpx.Client) -> None:
    ingest(http, "policy", POLICY_DOCS)
    meta = _query(http, namespaces=["*"], query="refund").json()["meta"]
    assert {"demo", "policy"} <= set(meta["namespaces_queried"])
    assert meta["coverage_ratio"] == 1.0


def test_a_chinese_question_finds_the_chinese_passage(http: httpx.Client) -> None:
    ingest(http, "policy", POLICY_DOCS)
    results = _query(http, namespaces=["policy"], query="退款多久能到账？", top_k=1).json()[
        "results"
    ]
    assert results[0]["document_id"] == "refunds-zh"


def test_metadata_filter_keeps_only_matching_chunks(http: httpx.Client) -> None:
    ingest(http, "policy", POLICY_DOCS)
    results = _query(
        http,
        namespaces=["policy"],
        query="parcel",
        top_k=10,
        filter={"kind": "policy", "lang": "en"},
    ).json()["results"]
    assert [r["document_id"] for r in results] == ["refunds"]


def test_identical_text_in_two_namespaces_is_returned_once(http: httpx.Client) -> None:
    same = [{"document_id": "same", "text": "A sentence that lives in two namespaces at once."}]
    ingest(http, "copy-a", same)
    ingest(http, "copy-b", same)
    body = _query(http, namespaces=["copy-a", "copy-b"], query="two namespaces", top_k=5).json()
    assert len(body["results"]) == 1
    assert body["meta"]["coverage_ratio"] == 1.0


def test_allow_partial_false_turns_a_partial_answer_into_an_error(http: httpx.Client) -> None:
    ingest(http, "policy", POLICY_DOCS)
    reply = _query(http, namespaces=["policy", "nope"], query="refund", allow_partial=False)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["code"], error["retryable"]) == ("INCOMPLETE_RESULT_PERMANENT", False)
    assert error["structured_data"]["coverage_ratio"] == 0.5
    assert [d["namespace"] for d in error["details"]] == ["nope"]
    complete = _query(http, namespaces=["policy"], query="refund", allow_partial=False)
    assert complete.status_code == 200


def test_an_overwritten_document_is_searched_in_its_new_version(http: httpx.Client) -> None:
    ingest(http, "versions", [{"document_id": "v", "text": "The meeting is on Monday in room A."}])
    ingest(http, "versions", [{"document_id": "v", "text": "Giraffes sleep standing up."}])
    results = _query(http, namespaces=["versions"], query="giraffes", top_k=5).json()["results"]
    assert [r["text"] for r in results] == ["Giraffes sleep standing up."]


def test_a_deleted_document_leaves_answers_at_once(http: httpx.Client) -> None:
    ingest(
        http,
        "deletions",
        [
            {"document_id": "gone", "text": "Penguins cannot fly."},
            {"document_id": "kept", "text": "Eagles fly very high."},
        ],
    )
    assert http.delete("/api/v1/namespaces/deletions/documents/gone").status_code == 200
    results = _query(http, namespaces=["deletions"], query="penguins", top_k=5).json()["results"]
    assert [r["document_id"] for r in results] == ["kept"]
    assert http.get("/api/v1/namespaces/deletions/documents/gone").status_code == 404


def test_too_many_namespaces_is_a_whole_request_quota_error(http: httpx.Client) -> None:
    names = [f"ns-{i}" for i in range(40)]
    reply = _query(http, namespaces=names, query="x")
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["code"], error["category"], error["retryable"]) == (
        "TOO_MANY_NAMESPACES",
        "quota",
        False,
    )
    assert error["structured_data"]["limit"] == 32 and error["structured_data"]["actual"] == 40


def test_singular_namespace_is_rejected_with_the_replacement_named(http: httpx.Client) -> None:
    reply = _query(http, namespace="demo", query="x")
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "DEPRECATED_FIELD"
    assert error["structured_data"]["use_instead"] == "namespaces"
    assert error["structured_data"]["field"] == "namespace"


def test_monitoring_sees_partial_answers_by_category(http: httpx.Client, system) -> None:  # type: ignore[no-untyped-def]
    def scrape() -> dict[str, float]:
        values = {}
        for line in httpx.get(system.metrics_url, timeout=10).text.splitlines():
            if line.startswith("reachstore_") and " " in line:
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    key = (
        "reachstore_query_namespace_failures_total"
        '{category="permanent",error_code="NAMESPACE_UNAVAILABLE"}'
    )
    before = scrape()
    _query(http, namespaces=["demo", "nope"], query="x")
    after = scrape()
    assert (
        after["reachstore_query_partial_answers_total"]
        == before.get("reachstore_query_partial_answers_total", 0) + 1
    )
    assert after[key] == before.get(key, 0) + 1

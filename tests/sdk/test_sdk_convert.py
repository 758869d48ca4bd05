"""Protobuf -> SDK model conversions, and the argument checks done before any RPC."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from sdk_support import failure_pb

from reachstore import (
    Client,
    DocumentInput,
    Failure,
    QueryMeta,
    SearchResponse,
    SearchResult,
    _convert,
)
from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb2
from reachstore.query.v1 import query_service_pb2 as query_pb2

C = pf_pb2.Category


def _partial_query_response() -> query_pb2.QueryResponse:
    return query_pb2.QueryResponse(
        results=[
            query_pb2.QueryResult(
                namespace="policy",
                document_id="refunds",
                chunk_index=2,
                text="Refunds take 5 days.",
                score=0.83,
                metadata={"lang": "en"},
            )
        ],
        meta=query_pb2.QueryMeta(
            coverage_ratio=1 / 3,
            namespaces_queried=["policy", "orders", "nope"],
            namespaces_succeeded=["policy"],
            namespaces_failed=[
                failure_pb(
                    "NAMESPACE_TIMEOUT", C.CATEGORY_TIMEOUT, retry_after_ms=1500, namespace="orders"
                ),
                failure_pb(
                    "NAMESPACE_UNAVAILABLE",
                    C.CATEGORY_PERMANENT,
                    namespace="nope",
                    data={"namespace": "nope", "index_state": "unavailable"},
                ),
            ],
        ),
    )


def _run_usage_snippet(resp: SearchResponse) -> tuple[list[Any], list[Any], list[Any]]:
    """The SDK's documented partial-answer snippet, verbatim apart from the recording helpers."""
    retried: list[Any] = []
    missing: list[Any] = []
    answered: list[Any] = []

    def retry_later(namespace: str, wait_ms: int) -> None:
        retried.append((namespace, wait_ms))

    def note_missing(namespace: str, category: str) -> None:
        missing.append((namespace, category))

    if resp.meta.coverage_ratio < 1:
        for failed in resp.meta.namespaces_failed or []:
            if failed["retryable"]:
                retry_later(failed["namespace"], wait_ms=failed["retry_after_ms"] or 1000)
            else:
                note_missing(failed["namespace"], failed["category"])
    answered.extend(resp.results)
    return retried, missing, answered


def test_a_partial_query_response_works_with_the_documented_snippet() -> None:
    resp = _convert.search_response_from_pb(_partial_query_response())

    retried, missing, answered = _run_usage_snippet(resp)

    assert retried == [("orders", 1500)]
    assert missing == [("nope", "permanent")]
    assert answered == [
        SearchResult("policy", "refunds", 2, "Refunds take 5 days.", 0.83, {"lang": "en"})
    ]


def test_failures_read_the_same_as_attributes_and_as_keys() -> None:
    meta = _convert.search_response_from_pb(_partial_query_response()).meta
    assert isinstance(meta, QueryMeta) and not meta.complete
    assert meta.coverage_ratio == pytest.approx(1 / 3)
    assert meta.namespaces_queried == ["policy", "orders", "nope"]
    assert meta.namespaces_succeeded == ["policy"]
    timeout, unavailable = meta.namespaces_failed
    for failed in (timeout, unavailable):
        for key in failed:
            assert failed[key] == getattr(failed, key)
    assert (timeout.category, timeout.error_code, timeout.retryable) == (
        "timeout",
        "NAMESPACE_TIMEOUT",
        True,
    )
    assert unavailable["structured_data"] == {"namespace": "nope", "index_state": "unavailable"}
    assert type(unavailable["structured_data"]) is dict
    assert unavailable.error_code == "NAMESPACE_UNAVAILABLE"


def test_an_absent_retry_after_is_none_and_a_present_one_an_int() -> None:
    absent = _convert.failure_from_pb(failure_pb("NAMESPACE_UNAVAILABLE", C.CATEGORY_PERMANENT))
    present = _convert.failure_from_pb(
        failure_pb("INDEX_REBUILDING", C.CATEGORY_TRANSIENT, retry_after_ms=2000)
    )
    assert absent["retry_after_ms"] is None and absent.retryable is False
    assert present["retry_after_ms"] == 2000 and isinstance(present.retry_after_ms, int)
    # batch_index is optional in the proto too: unset is None, 0 is a real position.
    assert absent.batch_index is None
    at_zero = _convert.failure_from_pb(
        failure_pb("INVALID_ARGUMENT", C.CATEGORY_PERMANENT, batch_index=0)
    )
    assert at_zero.batch_index == 0


def test_failure_is_a_read_only_mapping_in_the_json_key_order() -> None:
    failure = _convert.failure_from_pb(
        failure_pb("NAMESPACE_TIMEOUT", C.CATEGORY_TIMEOUT, retry_after_ms=1000, namespace="a")
    )
    assert list(failure.keys()) == [
        "namespace",
        "document_id",
        "batch_index",
        "action_id",
        "category",
        "error_code",
        "message",
        "retryable",
        "retry_after_ms",
        "structured_data",
    ]
    assert len(failure) == 10 and "retryable" in failure and "nonsense" not in failure
    assert failure.get("nonsense", "fallback") == "fallback"
    assert dict(failure) == failure.to_dict()
    with pytest.raises(KeyError):
        failure["nonsense"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        failure.retryable = False  # type: ignore[misc]
    # Hashable despite the dict inside, so failures can be collected in sets.
    assert (
        len(
            {
                failure,
                _convert.failure_from_pb(
                    failure_pb(
                        "NAMESPACE_TIMEOUT", C.CATEGORY_TIMEOUT, retry_after_ms=1000, namespace="a"
                    )
                ),
            }
        )
        == 1
    )


def test_structured_data_becomes_plain_python_with_whole_numbers_as_ints() -> None:
    failure = _convert.failure_from_pb(
        failure_pb(
            "BATCH_TOO_LARGE",
            C.CATEGORY_QUOTA,
            data={
                "limit": 100,
                "actual": 130,
                "ratio": 1.3,
                "nested": {"ids": ["a", "b"], "ok": True},
                "none": None,
            },
        )
    )
    assert failure.structured_data == {
        "limit": 100,
        "actual": 130,
        "ratio": 1.3,
        "nested": {"ids": ["a", "b"], "ok": True},
        "none": None,
    }
    assert isinstance(failure.structured_data["limit"], int)
    assert isinstance(failure.structured_data["nested"], dict)


@pytest.mark.parametrize(
    ("number", "word"),
    [
        (C.CATEGORY_AUTH, "auth"),
        (C.CATEGORY_PERMANENT, "permanent"),
        (C.CATEGORY_TRANSIENT, "transient"),
        (C.CATEGORY_TIMEOUT, "timeout"),
        (C.CATEGORY_QUOTA, "quota"),
        (C.CATEGORY_UNSPECIFIED, "unspecified"),
    ],
)
def test_categories_become_lowercase_words(number: int, word: str) -> None:
    assert _convert.failure_from_pb(failure_pb("X", number)).category == word


def test_an_enum_number_this_sdk_does_not_know_is_kept_as_its_digits() -> None:
    assert _convert.enum_word(_convert.CATEGORY, 42) == "42"


def test_tasks_carry_words_and_optional_fields() -> None:
    running = _convert.task_from_pb(
        ingest_pb2.Task(
            task_id="t",
            namespace="n",
            document_id="d",
            state=ingest_pb2.TASK_STATE_PROCESSING,
            phase=ingest_pb2.TASK_PHASE_EMBEDDING,
            percent=40,
            agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_POLL_AGAIN,
            poll_after_ms=250,
        )
    )
    assert (running.state, running.phase, running.agent_decision_hint) == (
        "processing",
        "embedding",
        "poll_again",
    )
    assert running.poll_after_ms == 250 and running.error is None and not running.done

    done = _convert.task_from_pb(
        ingest_pb2.Task(
            state=ingest_pb2.TASK_STATE_COMPLETED,
            agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_DONE_FETCH_DOC,
            percent=100,
        )
    )
    assert (done.state, done.phase, done.agent_decision_hint) == (
        "completed",
        "unspecified",
        "done_fetch_doc",
    )
    assert done.poll_after_ms is None and done.done

    failed = _convert.task_from_pb(
        ingest_pb2.Task(
            state=ingest_pb2.TASK_STATE_FAILED,
            agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_INSPECT_ERROR_CODE,
            error=failure_pb("NAMESPACE_UNAVAILABLE", C.CATEGORY_PERMANENT, namespace="nope"),
        )
    )
    assert failed.agent_decision_hint == "inspect_error_code" and failed.done
    assert isinstance(failed.error, Failure)
    assert failed.error["error_code"] == "NAMESPACE_UNAVAILABLE"
    assert failed.error["category"] == "permanent"


def test_batch_results_are_joined_with_their_failures_by_index() -> None:
    resp = _convert.batch_response_from_pb(
        ingest_pb2.BatchCreateDocumentsResponse(
            results=[
                ingest_pb2.BatchDocumentResult(
                    batch_index=0,
                    document_id="a",
                    outcome=ingest_pb2.DOCUMENT_OUTCOME_ACCEPTED,
                    task_id="t0",
                ),
                ingest_pb2.BatchDocumentResult(
                    batch_index=1, document_id="b", outcome=ingest_pb2.DOCUMENT_OUTCOME_FAILED
                ),
                ingest_pb2.BatchDocumentResult(
                    batch_index=2, document_id="c", outcome=ingest_pb2.DOCUMENT_OUTCOME_SKIPPED
                ),
            ],
            meta=ingest_pb2.BatchMeta(
                coverage_ratio=2 / 3,
                failed=[
                    failure_pb(
                        "DOCUMENT_TOO_LARGE",
                        C.CATEGORY_PERMANENT,
                        batch_index=1,
                        document_id="b",
                        data={"limit": 1048576, "size": 2000000},
                    )
                ],
            ),
        )
    )
    assert [r.outcome for r in resp.results] == ["accepted", "failed", "skipped"]
    assert [r.task_id for r in resp.results] == ["t0", None, None]
    assert resp.results[0].failure is None
    assert resp.results[1].failure is resp.meta.failed[0]
    assert resp.meta.failed[0]["batch_index"] == 1
    assert resp.meta.coverage_ratio == pytest.approx(2 / 3)


def test_search_refuses_a_single_string_for_namespaces() -> None:
    # No server is needed: the check happens before any RPC.
    with Client("127.0.0.1:9", "127.0.0.1:9", timeout=1) as client:
        with pytest.raises(TypeError, match=r"list.*\['policy'\]"):
            client.search("policy", "refunds")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="must be str"):
            client.search(["policy", 3], "refunds")  # type: ignore[list-item]


def test_query_requests_leave_allow_partial_unset_unless_given() -> None:
    default = _convert.query_request(("a", "b"), "q", 3, None, None, None)
    strict = _convert.query_request(["a"], "q", 3, {"lang": "en"}, 250, False)
    assert list(default.namespaces) == ["a", "b"] and not default.HasField("allow_partial")
    assert strict.HasField("allow_partial") and strict.allow_partial is False
    assert dict(strict.filter) == {"lang": "en"} and strict.timeout_ms == 250
    assert not default.namespace and not strict.namespace


def test_document_inputs_accept_dataclasses_and_dicts_but_refuse_unknown_keys() -> None:
    from_dict = _convert.document_input_to_pb(
        {"text": "hello", "document_id": "d1", "metadata": {"k": "v"}}
    )
    from_model = _convert.document_input_to_pb(DocumentInput("hello", "d1", {"k": "v"}))
    assert from_dict == from_model
    assert _convert.document_input_to_pb({"text": "x"}).document_id == ""
    with pytest.raises(ValueError, match="metdata"):
        _convert.document_input_to_pb({"text": "x", "metdata": {}})
    with pytest.raises(ValueError, match="text"):
        _convert.document_input_to_pb({"document_id": "d"})
    with pytest.raises(TypeError):
        _convert.document_input_to_pb("just text")  # type: ignore[arg-type]


def test_on_duplicate_takes_the_three_words_only() -> None:
    assert _convert.on_duplicate_to_pb("skip") == ingest_pb2.ON_DUPLICATE_SKIP
    assert _convert.on_duplicate_to_pb("overwrite") == ingest_pb2.ON_DUPLICATE_OVERWRITE
    assert _convert.on_duplicate_to_pb("error") == ingest_pb2.ON_DUPLICATE_ERROR
    for bad in ("replace", "unspecified", "SKIP"):
        with pytest.raises(ValueError, match="overwrite"):
            _convert.on_duplicate_to_pb(bad)

"""The client end to end against a real gRPC server running the fake services, over gRPC
and over the real REST bridge in front of it (the ``transport`` parameter): the same
calls must send the same requests and give the same models and exceptions."""

from __future__ import annotations

import time

import grpc
import pytest
from sdk_support import Category, FakeIngestService, FakeQueryService, Served, failure_pb, serve

from reachstore import (
    AlreadyExistsError,
    Client,
    DeadlineError,
    Document,
    DocumentInput,
    InvalidArgumentError,
    Namespace,
    NotFoundError,
    SearchResponse,
    Task,
    TaskWaitTimeoutError,
    TransientError,
)
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb2
from reachstore.query.v1 import query_service_pb2 as query_pb2

# --- search --------------------------------------------------------------------------------


def test_a_partial_search_returns_what_worked_and_what_to_do_about_the_rest(
    client: Client, served: Served
) -> None:
    resp = client.search(
        ["policy", "slow-orders", "nope"], "refunds", top_k=5, filter={"lang": "en"}, timeout_ms=300
    )

    assert isinstance(resp, SearchResponse)
    assert [(r.namespace, r.document_id, r.metadata) for r in resp.results] == [
        ("policy", "policy-doc", {"source": "policy"})
    ]
    assert resp.meta.coverage_ratio == pytest.approx(1 / 3)
    assert resp.meta.namespaces_succeeded == ["policy"]
    retry = [
        (f["namespace"], f["retry_after_ms"]) for f in resp.meta.namespaces_failed if f["retryable"]
    ]
    missing = [
        (f.namespace, f.category, f.structured_data)
        for f in resp.meta.namespaces_failed
        if not f.retryable
    ]
    assert retry == [("slow-orders", 1000)]
    assert missing == [("nope", "permanent", {"namespace": "nope", "index_state": "unavailable"})]

    sent = served.query.requests[-1]
    assert isinstance(sent, query_pb2.QueryRequest)
    assert list(sent.namespaces) == ["policy", "slow-orders", "nope"]
    assert (sent.query, sent.top_k, dict(sent.filter), sent.timeout_ms) == (
        "refunds",
        5,
        {"lang": "en"},
        300,
    )
    assert not sent.HasField("allow_partial") and not sent.namespace


def test_a_strict_search_that_misses_a_namespace_raises_with_the_failures_as_details(
    client: Client, served: Served, transport: str
) -> None:
    with pytest.raises(TransientError) as caught:
        client.search(["policy", "slow-orders", "nope"], "refunds", allow_partial=False)

    error = caught.value
    assert (error.code, error.retryable, error.retry_after_ms) == ("INCOMPLETE_RESULT", True, 1000)
    assert error.grpc_code is grpc.StatusCode.UNAVAILABLE
    assert error.structured_data["field"] == "allow_partial"
    assert [(d["namespace"], d["category"]) for d in error.details] == [
        ("slow-orders", "timeout"),
        ("nope", "permanent"),
    ]
    if transport == "grpc":
        assert isinstance(error.__cause__, grpc.RpcError) and error.http_status is None
    else:
        assert error.http_status == 503
    assert served.query.requests[-1].allow_partial is False


def test_a_complete_search_has_full_coverage_and_no_failures(client: Client) -> None:
    resp = client.search(["a", "b"], "q", allow_partial=False)
    assert resp.meta.coverage_ratio == 1.0 and resp.meta.complete
    assert resp.meta.namespaces_failed == []
    assert [r.namespace for r in resp.results] == ["a", "b"]


def test_a_search_past_its_deadline_raises_a_deadline_error(client: Client) -> None:
    started = time.monotonic()
    with pytest.raises(DeadlineError) as caught:
        client.search(["hang"], "q", timeout=0.2)
    assert time.monotonic() - started < 3
    assert caught.value.code == "DEADLINE_EXCEEDED" and caught.value.retryable
    assert isinstance(caught.value, TimeoutError)


# --- namespaces ----------------------------------------------------------------------------


def test_namespaces_can_be_created_read_and_deleted(client: Client, served: Served) -> None:
    created = client.create_namespace("guide")
    assert created == Namespace("guide", "test-model", 8, 0, 0, "2026-01-02T03:04:05Z")
    assert client.get_namespace("guide") == created

    with pytest.raises(AlreadyExistsError) as exists:
        client.create_namespace("guide")
    assert exists.value.code == "NAMESPACE_EXISTS"
    assert exists.value.structured_data == {"namespace": "guide"}

    client.delete_namespace("guide")
    with pytest.raises(NotFoundError) as gone:
        client.get_namespace("guide")
    assert gone.value.code == "NAMESPACE_UNAVAILABLE" and not gone.value.retryable
    assert gone.value.structured_data == {"namespace": "guide", "index_state": "unavailable"}


def test_listing_namespaces_follows_every_page(client: Client, served: Served) -> None:
    names = ["ns-a", "ns-b", "ns-c", "ns-d", "ns-e"]
    for name in reversed(names):
        client.create_namespace(name)

    listed = client.list_namespaces(page_size=2)

    assert [n.name for n in listed] == names
    pages = [r for r in served.ingest.requests if isinstance(r, ingest_pb2.ListNamespacesRequest)]
    assert [(p.page_size, p.page_token) for p in pages] == [(2, ""), (2, "ns-b"), (2, "ns-d")]


# --- documents -------------------------------------------------------------------------------


def test_listing_documents_follows_every_page_without_texts(client: Client, served: Served) -> None:
    documents = list(client.list_documents("guide", page_size=2))

    assert [d.document_id for d in documents] == [f"doc-{i}" for i in range(5)]
    assert all(isinstance(d, Document) and d.text == "" for d in documents)
    pages = [r for r in served.query.requests if isinstance(r, query_pb2.ListDocumentsRequest)]
    assert len(pages) == 3 and {p.namespace for p in pages} == {"guide"}


def test_a_document_is_read_in_full_and_a_missing_one_is_not_found(client: Client) -> None:
    document = client.get_document("guide", "doc-3")
    assert (document.namespace, document.document_id, document.text) == (
        "guide",
        "doc-3",
        "text of doc-3",
    )
    assert document.metadata == {"id": "doc-3"} and document.chunk_count == 2

    with pytest.raises(NotFoundError) as caught:
        client.get_document("guide", "doc-99")
    assert caught.value.code == "DOCUMENT_NOT_FOUND"
    assert caught.value.structured_data == {"namespace": "guide", "document_id": "doc-99"}


def test_adding_a_document_returns_its_queued_task(client: Client, served: Served) -> None:
    task = client.add_document(
        "guide", "hello", document_id="d1", metadata={"k": "v"}, on_duplicate="overwrite"
    )

    assert isinstance(task, Task)
    assert (task.state, task.agent_decision_hint, task.poll_after_ms) == (
        "queued",
        "poll_again",
        500,
    )
    sent = served.ingest.requests[-1]
    assert isinstance(sent, ingest_pb2.CreateDocumentRequest)
    assert (sent.namespace, sent.document.document_id, sent.document.text) == (
        "guide",
        "d1",
        "hello",
    )
    assert dict(sent.document.metadata) == {"k": "v"}
    assert sent.on_duplicate == ingest_pb2.ON_DUPLICATE_OVERWRITE


def test_a_batch_with_a_bad_document_accepts_the_rest_and_says_why(
    client: Client, served: Served
) -> None:
    resp = client.add_documents(
        "guide",
        [
            {"text": "first", "document_id": "a"},
            DocumentInput(text="", document_id="b"),
            {"text": "third"},
        ],
        on_duplicate="skip",
    )

    assert [(r.document_id, r.outcome, r.task_id) for r in resp.results] == [
        ("a", "accepted", "task-0"),
        ("b", "failed", None),
        ("generated-2", "accepted", "task-2"),
    ]
    assert resp.meta.coverage_ratio == pytest.approx(2 / 3)
    (failed,) = resp.meta.failed
    assert (failed["batch_index"], failed["document_id"], failed["category"]) == (
        1,
        "b",
        "permanent",
    )
    assert failed["structured_data"] == {"field": "documents[1].text", "rule": "required"}
    assert resp.results[1].failure == failed
    assert served.ingest.requests[-1].on_duplicate == ingest_pb2.ON_DUPLICATE_SKIP


def test_deleting_a_document_sends_its_namespace_and_id(client: Client, served: Served) -> None:
    client.delete_document("guide", "d1")
    sent = served.ingest.requests[-1]
    assert isinstance(sent, ingest_pb2.DeleteDocumentRequest)
    assert (sent.namespace, sent.document_id) == ("guide", "d1")


# --- tasks -----------------------------------------------------------------------------------

_POLL = ingest_pb2.AGENT_DECISION_HINT_POLL_AGAIN


def _running(state: int, phase: int, percent: int, poll_ms: int) -> ingest_pb2.Task:
    return ingest_pb2.Task(
        state=state, phase=phase, percent=percent, agent_decision_hint=_POLL, poll_after_ms=poll_ms
    )


def test_waiting_for_a_task_follows_poll_after_ms_until_completed(
    client: Client, served: Served
) -> None:
    advised = [60, 150, 40]
    served.ingest.task_script = [
        _running(ingest_pb2.TASK_STATE_QUEUED, ingest_pb2.TASK_PHASE_UNSPECIFIED, 0, advised[0]),
        _running(ingest_pb2.TASK_STATE_PROCESSING, ingest_pb2.TASK_PHASE_CHUNKING, 30, advised[1]),
        _running(ingest_pb2.TASK_STATE_PROCESSING, ingest_pb2.TASK_PHASE_INDEXING, 80, advised[2]),
        ingest_pb2.Task(
            state=ingest_pb2.TASK_STATE_COMPLETED,
            percent=100,
            agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_DONE_FETCH_DOC,
        ),
    ]
    queued = client.add_document("guide", "hello")

    task = client.wait_for_task(queued, timeout=10)

    assert (task.task_id, task.state, task.agent_decision_hint, task.percent) == (
        "task-1",
        "completed",
        "done_fetch_doc",
        100,
    )
    polls = served.ingest.task_polls
    assert len(polls) == 4  # one GetTask per scripted step, none after completion
    gaps_ms = [(later - earlier) * 1000 for earlier, later in zip(polls, polls[1:], strict=False)]
    for gap, wait in zip(gaps_ms, advised, strict=False):
        assert gap >= wait * 0.9, (gaps_ms, advised)
    # The longest advice really was followed, not a fixed pace.
    assert gaps_ms[1] > gaps_ms[2]


def test_waiting_returns_a_failed_task_with_its_error(client: Client, served: Served) -> None:
    served.ingest.task_script = [
        ingest_pb2.Task(
            state=ingest_pb2.TASK_STATE_FAILED,
            agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_INSPECT_ERROR_CODE,
            error=failure_pb(
                "NAMESPACE_UNAVAILABLE", Category.CATEGORY_PERMANENT, namespace="nope"
            ),
        )
    ]

    task = client.wait_for_task("t-9", timeout=5)

    assert task.state == "failed" and task.error is not None
    assert (task.error["error_code"], task.error["category"]) == (
        "NAMESPACE_UNAVAILABLE",
        "permanent",
    )


def test_waiting_too_long_raises_a_timeout_error_with_the_last_state(
    client: Client, served: Served
) -> None:
    served.ingest.task_script = [
        _running(ingest_pb2.TASK_STATE_PROCESSING, ingest_pb2.TASK_PHASE_EMBEDDING, 50, 50)
    ]
    started = time.monotonic()

    with pytest.raises(TaskWaitTimeoutError) as caught:
        client.wait_for_task("t-slow", timeout=0.3)

    assert 0.25 <= time.monotonic() - started < 2
    error = caught.value
    assert isinstance(error, TimeoutError) and isinstance(error, DeadlineError)
    assert error.task is not None and error.task.phase == "embedding"
    assert (error.code, error.category, error.retryable, error.retry_after_ms) == (
        "DEADLINE_EXCEEDED",
        "timeout",
        True,
        50,
    )
    assert error.structured_data == {"task_id": "t-slow", "state": "processing", "waited_ms": 300}
    assert len(served.ingest.task_polls) >= 3


def test_a_poll_that_outlives_the_wait_ends_the_wait_on_time(client: Client) -> None:
    # The client's per-call deadline is 5 s; the wait must cut its poll short at 0.3 s.
    started = time.monotonic()
    with pytest.raises(TaskWaitTimeoutError) as caught:
        client.wait_for_task("t-hang", timeout=0.3)
    assert time.monotonic() - started < 2
    assert caught.value.task is None and caught.value.structured_data["state"] == "unknown"
    assert isinstance(caught.value.__cause__, DeadlineError)


def test_an_unknown_task_is_not_found(client: Client) -> None:
    with pytest.raises(NotFoundError) as caught:
        client.get_task("t-missing")
    assert caught.value.code == "TASK_NOT_FOUND"


def test_cancelling_a_task_returns_it_cancelling(client: Client, served: Served) -> None:
    task = client.cancel_task("t-3")
    assert (task.task_id, task.state, task.phase) == ("t-3", "cancelling", "embedding")
    assert served.ingest.requests[-1].task_id == "t-3"


# --- transport ---------------------------------------------------------------------------------


def test_the_deprecated_singular_field_would_be_rejected_with_its_replacement(
    served: Served,
) -> None:
    # The SDK never sends `namespace`; a raw stub shows what the server answers if one did,
    # and that the SDK's decoder reads it (a TypeError protects SDK callers first).
    from reachstore._errors import from_rpc_error
    from reachstore.query.v1 import query_service_pb2_grpc as query_grpc

    with grpc.insecure_channel(f"127.0.0.1:{served.port}") as channel:
        stub = query_grpc.QueryServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raw:
            stub.Query(query_pb2.QueryRequest(namespace="policy", query="q"), timeout=5)
    error = from_rpc_error(raw.value)
    assert isinstance(error, InvalidArgumentError)
    assert error.code == "DEPRECATED_FIELD"
    assert error.structured_data["use_instead"] == "namespaces"


def test_a_stopped_server_is_a_retryable_service_unavailable(served: Served) -> None:
    server, port = serve(FakeQueryService())
    assert port
    server.stop(None).wait()
    started = time.monotonic()

    with Client(f"127.0.0.1:{port}", f"127.0.0.1:{port}", timeout=2, retries=None) as client:
        with pytest.raises(TransientError) as caught:
            client.search(["a"], "q")

    assert time.monotonic() - started < 2  # failed fast, not at the deadline
    error = caught.value
    assert (error.code, error.category, error.retryable, error.retry_after_ms) == (
        "SERVICE_UNAVAILABLE",
        "transient",
        True,
        1000,
    )
    assert error.grpc_code is grpc.StatusCode.UNAVAILABLE


def test_the_local_client_finds_query_on_the_port_base_and_ingest_one_above() -> None:
    query, ingest = FakeQueryService(), FakeIngestService()
    # Two separate servers, so a swapped port would answer UNIMPLEMENTED.
    for _ in range(20):
        query_server, base = serve(query=query)
        ingest_server, ingest_port = serve(ingest=ingest, address=f"127.0.0.1:{base + 1}")
        if ingest_port:
            break
        query_server.stop(None)
    else:
        pytest.fail("found no two adjacent free ports")
    try:
        with Client.local(grpc_port_base=base, timeout=5) as client:
            assert client.search(["a"], "q").meta.namespaces_succeeded == ["a"]
            assert client.create_namespace("ns").name == "ns"
        assert len(query.requests) == 1 and len(ingest.requests) == 1
    finally:
        query_server.stop(None)
        ingest_server.stop(None)


# --- retrying the failed part of an answer ---------------------------------------------------


def test_retry_failed_asks_again_only_the_retryable_namespaces_after_their_wait(
    client: Client, served: Served
) -> None:
    first = client.search(["policy", "flaky-orders", "nope"], "refunds", top_k=5, timeout_ms=300)
    assert [f.namespace for f in first.meta.namespaces_failed] == ["flaky-orders", "nope"]
    assert first.request is not None and first.request.namespaces == [
        "policy",
        "flaky-orders",
        "nope",
    ]

    merged = client.retry_failed(first)

    again = served.query.requests[-1]
    assert list(again.namespaces) == ["flaky-orders"]
    assert (again.query, again.top_k, again.timeout_ms) == ("refunds", 5, 300)
    gap = served.query.times[-1] - served.query.times[-2]
    assert gap >= 0.1  # the advised retry_after_ms
    assert merged.meta.namespaces_succeeded == ["policy", "flaky-orders"]
    assert merged.meta.coverage_ratio == pytest.approx(2 / 3)
    assert [f.namespace for f in merged.meta.namespaces_failed] == ["nope"]
    assert [r.namespace for r in merged.results] == ["policy", "flaky-orders"]
    # Nothing retryable is left: no call is made and the answer comes back as it is.
    calls = len(served.query.requests)
    assert client.retry_failed(merged) is merged and len(served.query.requests) == calls


def test_retry_failed_needs_an_answer_that_knows_its_question(client: Client) -> None:
    resp = client.search(["flaky-x"], "q")
    bare = SearchResponse(results=resp.results, meta=resp.meta)
    with pytest.raises(ValueError, match="request"):
        client.retry_failed(bare)

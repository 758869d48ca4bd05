"""Retries: the rule for each RPC read from the protos, the waits, and the limits - first
as decisions, then against a real server (over gRPC and over the REST bridge) that fails
on purpose."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.message import Message
from sdk_support import Category, Served, failure_pb, rich_status

from reachstore import (
    ActionInput,
    Client,
    Failure,
    InvalidArgumentError,
    QuotaError,
    RetryPolicy,
    TransientError,
)
from reachstore._errors import error_from_failure
from reachstore._retry import retry_delay
from reachstore._rpc import RPCS
from reachstore.audit.v1 import audit_service_pb2 as audit_pb2
from reachstore.query.v1 import query_service_pb2 as query_pb2
from reachstore.reach.v1 import reach_service_pb2 as reach_pb2

S = grpc.StatusCode
Connect = Callable[..., Client]

# Every RPC whose proto says a repeat is harmless (NO_SIDE_EFFECTS or IDEMPOTENT).
REPEATABLE = {
    "QueryService.Query",
    "QueryService.GetDocument",
    "QueryService.ListDocuments",
    "IngestService.GetNamespace",
    "IngestService.ListNamespaces",
    "IngestService.DeleteNamespace",
    "IngestService.DeleteDocument",
    "IngestService.GetTask",
    "KeyService.ListKeys",
    "KeyService.RevokeKey",
    "KeyService.GetCurrentKey",
    "ReachService.GetTask",
    "ReachService.ListTasks",
    "ReachService.GetAction",
    "ReachService.CancelAction",
    "ReachService.ListChannels",
    "ReachService.ListActions",
    "ReachService.RecheckAction",
    "ReachService.GetChannelHealth",
    "ReachService.GetUnknownReview",
    "QueryService.ListNamespaceHealth",
    "AuditService.ListEvents",
    "AuditService.GetEvent",
    "AuditService.Verify",
    "AuditService.GetCheckpoint",
}
# Changes that are only safe to repeat when the request carries its idempotency key.
KEYED = {"ReachService.SubmitTask", "ReachService.Reach", "AuditService.AppendEvents"}


def _error(retry_after_ms: int | None = 300, retryable: bool = True) -> Failure:
    return Failure(
        category="transient" if retryable else "permanent",
        error_code="X",
        message="x",
        retryable=retryable,
        retry_after_ms=retry_after_ms,
    )


NO_JITTER = RetryPolicy(jitter=0.0)


def _empty_request(name: str) -> Message:
    return message_factory.GetMessageClass(RPCS[name].method.input_type)()


QUERY = RPCS["QueryService.Query"]


# --- decisions ----------------------------------------------------------------------------


def test_the_retry_rule_of_every_rpc_comes_from_its_idempotency_level() -> None:
    assert {name for name, rpc in RPCS.items() if rpc.idempotent} == REPEATABLE
    assert {name for name, rpc in RPCS.items() if rpc.keyed is not None} == KEYED
    for name, rpc in RPCS.items():
        request = _empty_request(name)
        assert rpc.repeatable(request) is (name in REPEATABLE), name


def test_a_submission_is_repeatable_only_with_its_idempotency_key() -> None:
    submit, reach = RPCS["ReachService.SubmitTask"], RPCS["ReachService.Reach"]
    assert not submit.repeatable(reach_pb2.SubmitTaskRequest(entity_id="e"))
    assert submit.repeatable(reach_pb2.SubmitTaskRequest(entity_id="e", idempotency_key="k"))
    assert reach.repeatable(reach_pb2.ReachRequest(idempotency_key="k"))
    append = RPCS["AuditService.AppendEvents"]
    events = [audit_pb2.AuditEvent(event_id="e1"), audit_pb2.AuditEvent(event_id="")]
    assert not append.repeatable(audit_pb2.AppendEventsRequest(events=events))
    assert append.repeatable(audit_pb2.AppendEventsRequest(events=events[:1]))


def test_the_servers_wait_is_honoured_and_never_shortened() -> None:
    policy = RetryPolicy(jitter=0.2)
    request = query_pb2.QueryRequest()
    for _ in range(50):
        wait = retry_delay(policy, QUERY, request, error_from_failure(_error(700)), 1, 30.0)
        assert wait is not None and 0.7 <= wait <= 0.7 * 1.2


def test_without_advice_the_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    request = query_pb2.QueryRequest()
    error = error_from_failure(_error(None))
    policy = RetryPolicy(max_attempts=10, initial_backoff=0.1, max_backoff=0.5, jitter=0.0)
    waits = [retry_delay(policy, QUERY, request, error, n, 30.0) for n in range(1, 6)]
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    jittered = RetryPolicy(initial_backoff=0.1, jitter=0.5)
    seen = {retry_delay(jittered, QUERY, request, error, 1, 30.0) for _ in range(50)}
    assert len(seen) > 1 and all(w is not None and 0.05 <= w <= 0.15 for w in seen)


def test_no_retry_when_not_retryable_not_repeatable_out_of_attempts_or_out_of_time() -> None:
    query = query_pb2.QueryRequest()
    retryable = error_from_failure(_error(100))
    permanent = error_from_failure(_error(None, False))
    assert retry_delay(NO_JITTER, QUERY, query, permanent, 1, 30) is None
    create = RPCS["IngestService.CreateNamespace"]
    assert retry_delay(NO_JITTER, create, _empty_request(create.name), retryable, 1, 30) is None
    assert retry_delay(NO_JITTER, QUERY, query, retryable, 3, 30) is None  # 3 of 3 attempts made
    assert retry_delay(NO_JITTER, QUERY, query, retryable, 2, 30) == pytest.approx(0.1)
    # The advised wait and a useful attempt must fit in what is left of the deadline.
    assert retry_delay(NO_JITTER, QUERY, query, retryable, 1, 0.12) is None
    assert retry_delay(None, QUERY, query, retryable, 1, 30) is None


def test_a_policy_refuses_settings_that_make_no_sense() -> None:
    for bad in (
        {"max_attempts": 0},
        {"initial_backoff": 2.0, "max_backoff": 1.0},
        {"multiplier": 0.5},
        {"jitter": 1.0},
        {"deadline": 0},
    ):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


# --- against a real server ----------------------------------------------------------------


def _rate_limited(wait_ms: int) -> object:
    return rich_status(
        S.RESOURCE_EXHAUSTED,
        failure_pb("RATE_LIMITED", Category.CATEGORY_QUOTA, retry_after_ms=wait_ms),
    )


def _unavailable() -> object:
    return rich_status(
        S.UNAVAILABLE,
        failure_pb("INTERNAL", Category.CATEGORY_TRANSIENT, retry_after_ms=50),
    )


@pytest.fixture
def connect(served: Served, transport: str, request: pytest.FixtureRequest) -> Iterator[Connect]:
    """Makes clients with a given retry policy over the test's transport."""
    made: list[Client] = []
    url = request.getfixturevalue("rest_url") if transport == "rest" else ""

    def make(retries: RetryPolicy | None, timeout: float = 5.0) -> Client:
        if transport == "rest":
            client = Client.rest(url, timeout=timeout, retries=retries)
        else:
            target = f"127.0.0.1:{served.port}"
            client = Client(target, target, reach_target=target, timeout=timeout, retries=retries)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_a_read_is_retried_after_the_advised_wait_until_it_succeeds(
    connect: Connect, served: Served
) -> None:
    served.query.fail_next = [_rate_limited(150), _rate_limited(150)]
    client = connect(RetryPolicy(max_attempts=3, jitter=0.0))

    resp = client.search(["a"], "q")

    assert resp.meta.namespaces_succeeded == ["a"]
    times = served.query.times
    assert len(times) == 3
    assert all(later - earlier >= 0.14 for earlier, later in zip(times, times[1:], strict=False))


def test_attempts_are_bounded_and_the_last_error_is_raised(
    connect: Connect, served: Served
) -> None:
    served.query.fail_next = [_unavailable() for _ in range(5)]
    client = connect(RetryPolicy(max_attempts=2))

    with pytest.raises(TransientError) as caught:
        client.search(["a"], "q")

    assert caught.value.code == "INTERNAL" and len(served.query.requests) == 2


def test_a_wait_longer_than_the_deadline_raises_at_once_with_the_advice(
    connect: Connect, served: Served
) -> None:
    served.query.fail_next = [_rate_limited(2000)]
    client = connect(RetryPolicy(), timeout=0.8)
    started = time.monotonic()

    with pytest.raises(QuotaError) as caught:
        client.search(["a"], "q")

    assert time.monotonic() - started < 0.5
    assert caught.value.retry_after_ms == 2000 and len(served.query.requests) == 1


def test_a_change_that_is_not_idempotent_is_never_repeated(
    connect: Connect, served: Served
) -> None:
    served.ingest.fail_next = [_unavailable()]
    client = connect(RetryPolicy())

    with pytest.raises(TransientError):
        client.create_namespace("guide")

    assert len(served.ingest.requests) == 1
    assert client.create_namespace("guide").name == "guide"  # the failure was passing


def test_a_submission_is_repeated_only_when_it_carries_an_idempotency_key(
    connect: Connect, served: Served
) -> None:
    client = connect(RetryPolicy())
    action = ActionInput("notify", "hook", "notify", {"ticket": "T-1"})

    served.reach.fail_next = [_unavailable()]
    with pytest.raises(TransientError):
        client.submit_task("T-1", [action])
    assert len(served.reach.requests) == 1

    served.reach.fail_next = [_unavailable()]
    task = client.submit_task("T-1", [action], idempotency_key="T-1/notify")
    assert len(served.reach.requests) == 3 and task.task_id == "rt-1"
    assert [r.idempotency_key for r in served.reach.requests[1:]] == ["T-1/notify"] * 2


def test_without_a_policy_nothing_is_retried(connect: Connect, served: Served) -> None:
    served.query.fail_next = [_rate_limited(10)]
    client = connect(None)
    with pytest.raises(QuotaError):
        client.search(["a"], "q")
    assert len(served.query.requests) == 1


def test_a_permanent_error_is_raised_at_once(connect: Connect, served: Served) -> None:
    served.query.fail_next = [
        rich_status(S.INVALID_ARGUMENT, failure_pb("INVALID_ARGUMENT", Category.CATEGORY_PERMANENT))
    ]
    client = connect(RetryPolicy())
    with pytest.raises(InvalidArgumentError):
        client.search(["a"], "q")
    assert len(served.query.requests) == 1

"""AsyncClient against the fake services, over grpc.aio and over the REST bridge: the same
operations as Client (they are the same code), awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
import pytest
from sdk_support import Category, Served, failure_pb, rich_status

from reachstore import (
    ActionInput,
    AsyncClient,
    DeadlineError,
    NotFoundError,
    RetryPolicy,
    TransientError,
)
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb2
from reachstore.reach.v1 import reach_service_pb2 as reach_pb2

_T = TypeVar("_T")
Scenario = Callable[[AsyncClient], Awaitable[_T]]


@pytest.fixture
def run(served: Served, transport: str, request: pytest.FixtureRequest) -> Callable[..., object]:
    """Runs a scenario with a fresh AsyncClient made inside the event loop."""
    url = request.getfixturevalue("rest_url") if transport == "rest" else ""
    target = f"127.0.0.1:{served.port}"

    def go(scenario: Scenario[_T], retries: RetryPolicy | None = None) -> _T:
        async def main() -> _T:
            if transport == "rest":
                client = AsyncClient.rest(url, timeout=5.0, retries=retries)
            else:
                client = AsyncClient(
                    target, target, reach_target=target, timeout=5.0, retries=retries
                )
            async with client:
                return await scenario(client)

        return asyncio.run(main())

    return go


def test_a_partial_search_and_a_strict_one(run: Callable[..., object]) -> None:
    async def scenario(client: AsyncClient) -> None:
        resp = await client.search(["policy", "slow-orders", "nope"], "refunds", timeout_ms=300)
        assert resp.meta.coverage_ratio == pytest.approx(1 / 3)
        assert [(f["namespace"], f["retryable"]) for f in resp.meta.namespaces_failed] == [
            ("slow-orders", True),
            ("nope", False),
        ]
        with pytest.raises(TransientError) as caught:
            await client.search(["policy", "slow-orders"], "refunds", allow_partial=False)
        assert caught.value.code == "INCOMPLETE_RESULT"
        assert [d.namespace for d in caught.value.details] == ["slow-orders"]

    run(scenario)


def test_listings_are_async_iterators_over_every_page(
    run: Callable[..., object], served: Served
) -> None:
    async def scenario(client: AsyncClient) -> list[str]:
        return [d.document_id async for d in client.list_documents("guide", page_size=2)]

    assert run(scenario) == [f"doc-{i}" for i in range(5)]
    assert len(served.query.requests) == 3


def test_calls_run_concurrently_on_one_client(run: Callable[..., object]) -> None:
    async def scenario(client: AsyncClient) -> None:
        answers = await asyncio.gather(*(client.search([f"ns-{i}"], "q") for i in range(8)))
        assert [a.meta.namespaces_succeeded for a in answers] == [[f"ns-{i}"] for i in range(8)]

    run(scenario)


def test_waiting_for_an_ingest_task_and_errors(run: Callable[..., object], served: Served) -> None:
    served.ingest.task_script = [
        ingest_pb2.Task(state=ingest_pb2.TASK_STATE_PROCESSING, poll_after_ms=20),
        ingest_pb2.Task(
            state=ingest_pb2.TASK_STATE_COMPLETED,
            agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_DONE_FETCH_DOC,
        ),
    ]

    async def scenario(client: AsyncClient) -> None:
        queued = await client.add_document("guide", "hello")
        done = await client.wait_for_task(queued, timeout=5)
        assert (done.state, done.agent_decision_hint) == ("completed", "done_fetch_doc")
        with pytest.raises(NotFoundError):
            await client.get_namespace("never-made")
        with pytest.raises(DeadlineError):
            await client.search(["hang"], "q", timeout=0.2)

    run(scenario)


def test_a_keyed_submission_is_retried_and_followed_to_its_end(
    run: Callable[..., object], served: Served
) -> None:
    served.reach.fail_next = [
        rich_status(
            grpc.StatusCode.UNAVAILABLE,
            failure_pb("INTERNAL", Category.CATEGORY_TRANSIENT, retry_after_ms=20),
        )
    ]
    served.reach.task_script = [
        reach_pb2.Task(version=1, state=reach_pb2.TASK_STATE_RUNNING),
        reach_pb2.Task(version=2, state=reach_pb2.TASK_STATE_SUCCEEDED),
    ]

    async def scenario(client: AsyncClient) -> str:
        task = await client.submit_task(
            "E-1", [ActionInput("a", "hook", "notify")], idempotency_key="E-1/a"
        )
        done = await client.wait_for_reach_task(task, timeout=10)
        return done.state

    assert run(scenario, RetryPolicy()) == "succeeded"
    kinds = [type(r).__name__ for r in served.reach.requests]
    assert kinds == ["SubmitTaskRequest", "SubmitTaskRequest", "GetTaskRequest", "GetTaskRequest"]

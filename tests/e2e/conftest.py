"""End-to-end fixtures: a real `reachstore up`, driven only through HTTP and gRPC."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.system import RunningSystem

TERMINAL = {"completed", "failed", "cancelled"}


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    running = RunningSystem(tmp_path_factory.mktemp("system"))
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def http(system: RunningSystem) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=system.http_url, timeout=30.0) as client:
        yield client


def wait_task(http: httpx.Client, task_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """Polls a task as an agent would, honouring poll_after_ms, until it finishes."""
    deadline = time.monotonic() + timeout
    while True:
        reply = http.get(f"/api/v1/tasks/{task_id}")
        if reply.status_code == 429:  # over a call-rate limit: wait as advised
            time.sleep(reply.json()["error"]["retry_after_ms"] / 1000)
            continue
        task = reply.json()["task"]
        if task["state"] in TERMINAL:
            return task
        assert task["agent_decision_hint"] == "poll_again"
        if time.monotonic() > deadline:
            raise AssertionError(f"task {task_id} still {task['state']} after {timeout}s")
        time.sleep(task["poll_after_ms"] / 1000)


def ingest(http: httpx.Client, namespace: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Creates the namespace if needed, submits a batch and waits for every task."""
    http.post("/api/v1/namespaces", json={"name": namespace})
    reply = http.post(
        f"/api/v1/namespaces/{namespace}/documents:batchCreate",
        json={"documents": docs, "on_duplicate": "overwrite"},
    )
    assert reply.status_code == 200, reply.text
    return [wait_task(http, r["task_id"]) for r in reply.json()["results"] if r["task_id"]]

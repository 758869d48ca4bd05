"""RPC metrics of several query processes sharing one port (`up --query-processes 2`):
the bridge spreads calls over both, and the one metrics port must count every call once,
whichever process answered it (reachstore_server/common/metrics_registry.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.metrics_scrape import scrape, value
from tests.e2e.system import RunningSystem

pytestmark = pytest.mark.e2e

CALLS = 24


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    running = RunningSystem(
        tmp_path_factory.mktemp("red-processes") / "data", extra_args=("--query-processes", "2")
    )
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


def test_every_query_process_calls_are_summed_once(system: RunningSystem) -> None:
    assert len(system.pids("query")) == 2
    labels = {"service": "reachstore.query.v1.QueryService", "method": "Query", "code": "OK"}
    before = value(scrape(system, "query"), "reachstore_rpc_requests_total", **labels)
    with httpx.Client(base_url=system.http_url, timeout=30) as http:
        for i in range(CALLS):
            reply = http.post("/api/v1/query", json={"namespaces": ["demo"], "query": f"q {i}"})
            assert reply.status_code == 200, reply.text
    families = scrape(system, "query")
    assert value(families, "reachstore_rpc_requests_total", **labels) - before == CALLS
    assert value(families, "reachstore_queries_total") >= CALLS
    # The process figures are the serving process's own, once.
    assert len([s for f in families for s in f.samples if s.name == "python_info"]) == 1


def test_the_query_processes_answer_alike(system: RunningSystem) -> None:
    # The bridge alternates between the two processes: every answer to one question,
    # whichever process embedded it, is the same.
    question = {"namespaces": ["demo"], "query": "语义存储把什么放在离 Agent 更近的地方？"}
    with httpx.Client(base_url=system.http_url, timeout=30) as http:
        answers = []
        for _ in range(6):
            reply = http.post("/api/v1/query", json=question)
            assert reply.status_code == 200, reply.text
            answers.append([(r["document_id"], r["score"]) for r in reply.json()["results"]])
    assert answers[0] and all(a == answers[0] for a in answers)

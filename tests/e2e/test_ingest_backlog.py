"""New ingest stops being accepted when the queue falls too far behind, while queries go on
(docs/OPERATIONS.md, "Load shedding"): a real `reachstore up` whose embedding processes are
paused with SIGSTOP, so queued work cannot move, then resumed.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ingest, wait_task
from tests.e2e.system import RunningSystem
from tests.e2e.test_ingest_embed_processes import children, documents

pytestmark = pytest.mark.e2e

MAX_QUEUE_S = 2


def _nice(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])  # field 19 of stat(5), counted after the command name


def test_a_queue_too_far_behind_refuses_new_documents_and_queries_go_on(tmp_path: Path) -> None:
    system = RunningSystem(
        tmp_path,
        {
            "REACHSTORE_INGEST_EMBED_PROCESSES": "2",
            "REACHSTORE_INGEST_MAX_QUEUE_S": str(MAX_QUEUE_S),
        },
    )
    system.start()
    copies = children(system.pid("ingest"))
    assert len(copies) == 2, copies
    try:
        # The embedding copies yield the processor to the services that answer.
        assert all(_nice(pid) > _nice(system.pid("query")) for pid in copies)
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            ingest(http, "kb", documents("first", 3))
            for pid in copies:
                os.kill(pid, signal.SIGSTOP)
            try:
                accepted = []
                for part in range(4):  # four batches of the largest size
                    batch = http.post(
                        "/api/v1/namespaces/kb/documents:batchCreate",
                        json={"documents": documents(f"late{part}", 100)},
                    )
                    assert batch.status_code == 200, batch.text
                    accepted += [r["task_id"] for r in batch.json()["results"] if r["task_id"]]
                assert len(accepted) == 400
                time.sleep(MAX_QUEUE_S + 1.5)

                one = {"document": {"document_id": "extra", "text": "One more report."}}
                refused = http.post("/api/v1/namespaces/kb/documents", json=one)
                assert refused.status_code == 503, refused.text
                error = refused.json()["error"]
                assert (error["code"], error["category"], error["retryable"]) == (
                    "INGEST_BACKLOG",
                    "transient",
                    True,
                )
                assert error["retry_after_ms"] >= 1000
                assert int(refused.headers["retry-after"]) >= 1
                # The bound, and nothing of a queue other tenants share.
                assert error["structured_data"] == {"max_queue_s": MAX_QUEUE_S}
                more = http.post(
                    "/api/v1/namespaces/kb/documents:batchCreate",
                    json={"documents": documents("more", 2)},
                )
                assert more.status_code == 503 and more.json()["error"]["code"] == "INGEST_BACKLOG"

                # Reads go on: the query is answered in full.
                answer = http.post("/api/v1/query", json={"namespaces": ["kb"], "query": "report"})
                assert answer.status_code == 200, answer.text
                assert answer.json()["meta"]["coverage_ratio"] == 1.0
            finally:
                for pid in copies:
                    os.kill(pid, signal.SIGCONT)

            # Nothing accepted was lost: every queued task completes once work moves again.
            for task_id in accepted:
                assert wait_task(http, task_id, timeout=180)["state"] == "completed"
            # And new documents are accepted again.
            again = http.post("/api/v1/namespaces/kb/documents", json=one)
            assert again.status_code == 202, again.text
    finally:
        assert system.stop() == 0

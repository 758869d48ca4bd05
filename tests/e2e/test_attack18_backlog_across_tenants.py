"""The ingest backlog check runs before anything about the caller is looked at, on the queue
of every tenant at once (reachstore_server/ingest/api/servicer.py, ``_check_backlog``).

A real `reachstore up --require-keys` whose embedding processes are paused (SIGSTOP), so
one tenant's documents pile up in the queue. Then another tenant, with a key granted only
its own namespace:

- asks to add a document to a namespace its key may not use. Without a backlog the answer
  is the permanent ``NAMESPACE_UNAVAILABLE`` (404), the same as for a namespace that does
  not exist. With the backlog it is ``INGEST_BACKLOG`` (503, transient, retryable): the
  caller is told to come back later for a request that can never succeed, and an agent
  obeying the advice retries it forever;
- is refused, in its own namespace, for the other tenant's backlog, and the refusal hands
  it that tenant's figures: how many documents are queued and how long the oldest has
  waited, across the tenant boundary.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.attack_support import cli_key, http_client
from tests.e2e.conftest import ingest, wait_task
from tests.e2e.system import RunningSystem
from tests.e2e.test_ingest_embed_processes import children, documents

pytestmark = pytest.mark.e2e

MAX_QUEUE_S = 2
FLOOD = 300


def test_another_tenants_backlog_neither_hides_grants_nor_shows_its_figures(
    tmp_path: Path,
) -> None:
    system = RunningSystem(
        tmp_path,
        {
            "REACHSTORE_INGEST_EMBED_PROCESSES": "2",
            "REACHSTORE_INGEST_MAX_QUEUE_S": str(MAX_QUEUE_S),
        },
        extra_args=("--require-keys",),
    )
    system.start()
    copies = children(system.pid("ingest"))
    assert len(copies) == 2, copies
    try:
        acme = cli_key(system, "acme", "read,write")["secret"]
        globex = cli_key(system, "globex", "read,write", "--namespaces", "own")["secret"]
        one = {"document": {"document_id": "extra", "text": "One more report."}}
        with http_client(system, acme) as noisy, http_client(system, globex) as quiet:
            ingest(noisy, "kb", documents("first", 2))
            ingest(quiet, "own", documents("mine", 2))
            # Without a backlog, a namespace outside the key's grants is simply unavailable.
            before = quiet.post("/api/v1/namespaces/secret/documents", json=one)
            assert before.status_code == 404, before.text
            assert before.json()["error"]["code"] == "NAMESPACE_UNAVAILABLE"

            for pid in copies:
                os.kill(pid, signal.SIGSTOP)
            accepted: list[str] = []
            try:
                for part in range(FLOOD // 100):
                    batch = noisy.post(
                        "/api/v1/namespaces/kb/documents:batchCreate",
                        json={"documents": documents(f"late{part}", 100)},
                    )
                    assert batch.status_code == 200, batch.text
                    accepted += [r["task_id"] for r in batch.json()["results"] if r["task_id"]]
                time.sleep(MAX_QUEUE_S + 1.5)
                # The noisy tenant itself is now refused: the bound works.
                own_refusal = noisy.post("/api/v1/namespaces/kb/documents", json=one)
                assert own_refusal.status_code == 503, own_refusal.text

                outside = quiet.post("/api/v1/namespaces/secret/documents", json=one)
                inside = quiet.post("/api/v1/namespaces/own/documents", json=one)
            finally:
                for pid in copies:
                    os.kill(pid, signal.SIGCONT)
            for task_id in accepted:
                assert wait_task(noisy, task_id, timeout=180)["state"] == "completed"

        seen = (
            f"outside the grants: {outside.status_code} {outside.text[:160]}; "
            f"own namespace: {inside.status_code} {inside.text[:300]}"
        )
        # A request the key can never make is refused as such, backlog or not.
        assert outside.status_code == 404, seen
        assert outside.json()["error"]["code"] == "NAMESPACE_UNAVAILABLE", seen
        # Whatever the quiet tenant is told, it learns nothing of the other tenant's queue.
        if inside.status_code != 202:
            figures = inside.json()["error"].get("structured_data", {})
            assert figures.get("queued", 0) < FLOOD, seen
    finally:
        assert system.stop() == 0

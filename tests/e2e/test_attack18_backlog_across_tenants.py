"""The ingest backlog check reads the queue of every tenant at once and hands its figures to
whoever is refused (reachstore_server/ingest/api/servicer.py, ``_check_backlog``).

A real `reachstore up --require-keys` whose embedding processes are paused (SIGSTOP), so
one tenant's documents pile up in the queue. Another tenant, with a key granted only its own
namespace and nothing queued, then adds one document there: it is refused
(``INGEST_BACKLOG``) for the other tenant's backlog, and the refusal's ``structured_data``
tells it how many documents are queued and how long the oldest has waited, across the
tenant boundary: one tenant can watch another's ingest volume by sending one document a
second, a read of another tenant's activity that no grant allows.
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

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

MAX_QUEUE_S = 2
FLOOD = 300


def test_a_refusal_for_the_backlog_shows_no_other_tenants_figures(tmp_path: Path) -> None:
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

                inside = quiet.post("/api/v1/namespaces/own/documents", json=one)
            finally:
                for pid in copies:
                    os.kill(pid, signal.SIGCONT)
            for task_id in accepted:
                assert wait_task(noisy, task_id, timeout=180)["state"] == "completed"

        seen = f"the quiet tenant, in its own namespace: {inside.status_code} {inside.text[:400]}"
        # Whatever the quiet tenant is told, it learns nothing of the other tenant's queue:
        # of its own documents, none is queued.
        if inside.status_code != 202:
            figures = inside.json()["error"].get("structured_data", {})
            assert figures.get("queued", 0) == 0, seen
    finally:
        assert system.stop() == 0

"""Cancels racing the commit, against a real ingest process (two embedding copies) on
SQLite and PostgreSQL: a task that ends ``cancelled`` has no document stored, one that ends
``completed`` has it, and nothing fails. On SQLite a cancel that read ``processing`` just
before a commit used to write ``cancelling`` over ``completed`` afterwards, so the task
ended ``cancelled`` with its document stored and searchable (5 of 150 in one run)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import grpc
import pytest
import sqlalchemy

from reachstore.ingest.v1 import ingest_service_pb2 as pb
from tests.e2e.test_ingest_leases import Database, IngestProcess

pytestmark = pytest.mark.e2e

FINAL = {"completed", "failed", "cancelled"}
ROUNDS = 25
PER_ROUND = 6


def test_a_cancel_racing_the_commit_never_leaves_a_cancelled_task_stored(
    tmp_path: Path, database_url: str
) -> None:
    database = Database(database_url)
    ingest = IngestProcess(tmp_path, database.url, "ingest-c")
    ingest._env["REACHSTORE_INGEST_EMBED_PROCESSES"] = "2"
    ingest.start()
    try:
        ingest.stub.CreateNamespace(pb.CreateNamespaceRequest(name="race"), timeout=10)
        rng = random.Random(7)
        document_of: dict[str, str] = {}
        for round_ in range(ROUNDS):
            ids = [f"c{round_}-{k}" for k in range(PER_ROUND)]
            reply = ingest.stub.BatchCreateDocuments(
                pb.BatchCreateDocumentsRequest(
                    namespace="race",
                    documents=[pb.DocumentInput(document_id=i, text=f"text of {i}.") for i in ids],
                ),
                timeout=30,
            )
            tasks = [r.task_id for r in reply.results]
            time.sleep(rng.uniform(0, 0.06))  # land the cancels before, during and after commits
            for task in tasks:
                try:
                    ingest.stub.CancelTask(pb.CancelTaskRequest(task_id=task), timeout=10)
                except grpc.RpcError:
                    pass
            document_of.update(zip(tasks, ids, strict=True))
        states = database.wait(list(document_of), FINAL, timeout=120)
        with database.engine.connect() as c:
            stored = {d for (d,) in c.execute(sqlalchemy.text("SELECT document_id FROM documents"))}
        ended = {state for state, _ in states.values()}
        wrong = [
            (document_of[task], state)
            for task, (state, _) in states.items()
            if state == "failed" or (state == "completed") != (document_of[task] in stored)
        ]
        assert not wrong, f"{len(wrong)} tasks disagree with what is stored: {wrong[:5]}"
        assert ended <= {"completed", "cancelled"}
    finally:
        ingest.stop()
        database.engine.dispose()

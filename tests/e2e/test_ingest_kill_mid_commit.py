"""The ingest process killed with SIGKILL again and again while it commits, on SQLite and
PostgreSQL: `python -m reachstore_server.ingest.main` with its forked embedders, restarted under the
same name after every kill, then left to finish.

What must hold however the kills land: every task ends ``completed`` (a task caught
before its commit is re-run), and every document is stored whole or not at all: its row,
exactly its chunks (the texts chunking gives, each with a vector), one change row per
commit and the namespace's change seq counting them. Documents submitted twice
(``overwrite``) end with their later text.

A kill is aimed at a commit: it follows the moment a claim reaches its ``indexing`` phase
(the task table's changes are recorded by a trigger, as in ``test_ingest_leases.py``).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy

from reachstore.ingest.v1 import ingest_service_pb2 as pb
from reachstore_server.ingest.domain.chunking import chunk_text
from tests.e2e.test_ingest_leases import Database, IngestProcess

pytestmark = pytest.mark.e2e

PG_MARKED = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
NAMESPACES = ("kill-a", "kill-b")
DOCUMENTS = 160  # per namespace
REWRITTEN = 40  # of them submitted a second time with another text
KILLS = 5
DIMENSION = 512
FINISHED = {"completed", "failed", "cancelled"}


def text_of(namespace: str, n: int, version: int) -> str:
    """One chunk, or (every other document) several, so that a commit writes enough rows
    to be caught in the middle, and a half-stored document would show."""
    sentence = f"Version {version} of note {n} in {namespace}: the ferry left pier {n % 11}."
    return " ".join([sentence] * (60 if n % 2 == 0 else 1))


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    yield db
    db.engine.dispose()


@pytest.fixture
def ingest(tmp_path: Path, database: Database) -> Iterator[IngestProcess]:
    process = IngestProcess(tmp_path, database.url, "ingest-k")
    process._env["REACHSTORE_INGEST_EMBED_PROCESSES"] = "2"
    yield process
    if process.process is not None and process.process.poll() is None:
        process.stop()


def submit(process: IngestProcess, version: int, count: int) -> dict[tuple[str, str], str]:
    """Submits documents 0..count-1 of each namespace; (namespace, id) -> the text sent."""
    sent = {}
    for namespace in NAMESPACES:
        sent.update(submit_some(process, namespace, version, range(count)))
    return sent


def submit_some(
    process: IngestProcess, namespace: str, version: int, numbers: range
) -> dict[tuple[str, str], str]:
    sent = {}
    for start in range(numbers.start, numbers.stop, 100):  # at most 100 in a batch
        docs = [
            pb.DocumentInput(document_id=f"n{n}", text=text_of(namespace, n, version))
            for n in range(start, min(start + 100, numbers.stop))
        ]
        reply = process.stub.BatchCreateDocuments(
            pb.BatchCreateDocumentsRequest(
                namespace=namespace, documents=docs, on_duplicate=pb.ON_DUPLICATE_OVERWRITE
            ),
            timeout=60,
        )
        assert all(r.task_id for r in reply.results), reply.meta
        sent.update({(namespace, d.document_id): d.text for d in docs})
    return sent


def indexing_since(database: Database, seq: int) -> bool:
    return any(c.seq > seq and c.phase == "indexing" for c in database.history())


@dataclasses.dataclass
class Stored:
    """What the database holds, read with plain SQL."""

    seq: dict[str, int]
    documents: dict[tuple[str, str], tuple[int, str, int]]  # -> row id, text, chunk_count
    chunks: dict[int, list[tuple[int, str, bytes]]]  # document row id -> index, text, vector
    changes: list[tuple[str, int, str]]  # namespace, seq, document id
    tasks: list[tuple[str, str]]  # state, error code
    completed: set[tuple[str, str]]  # namespace, document id of the completed tasks

    @classmethod
    def read(cls, database: Database) -> Stored:
        with database.engine.connect() as conn:

            def rows(sql: str) -> list[tuple[Any, ...]]:
                return [tuple(row) for row in conn.execute(sqlalchemy.text(sql))]

            # The tasks first: the reads below are separate snapshots (SQLite's driver
            # opens no transaction for a SELECT), so only once every task is seen
            # finished are they sure to show one state of a store nothing writes to.
            tasks = rows("SELECT state, error_code FROM ingest_tasks")
            completed = set(
                rows("SELECT namespace, document_id FROM ingest_tasks WHERE state = 'completed'")
            )
            names = dict(rows("SELECT id, name FROM namespaces"))
            chunks: dict[int, list[tuple[int, str, bytes]]] = {}
            for row_id, index, text, vector in rows(
                "SELECT document_row_id, chunk_index, text, embedding FROM chunks "
                "ORDER BY document_row_id, chunk_index"
            ):
                chunks.setdefault(row_id, []).append((index, text, bytes(vector)))
            return cls(
                {names[i]: s for i, s in rows("SELECT id, change_seq FROM namespaces")},
                {
                    (names[ns], d): (row_id, text, count)
                    for row_id, ns, d, text, count in rows(
                        "SELECT id, namespace_id, document_id, text, chunk_count FROM documents"
                    )
                },
                chunks,
                [
                    (names[ns], seq, d)
                    for ns, seq, d in rows(
                        "SELECT namespace_id, seq, document_id FROM namespace_changes"
                    )
                ],
                tasks,
                completed,
            )


def in_commit(database: Database) -> int:
    """Tasks between their claim's 'indexing' and its commit's end."""
    with database.engine.connect() as conn:
        return int(
            conn.execute(
                sqlalchemy.text(
                    "SELECT count(*) FROM ingest_tasks "
                    "WHERE state = 'processing' AND phase = 'indexing'"
                )
            ).scalar_one()
        )


def check_whole(seen: Stored, sent: dict[tuple[str, str], list[str]]) -> None:
    """Every stored document is one submitted text with exactly its chunks, each with a
    vector; every change row counted by its namespace's seq; no chunk without its
    document. Holds at any moment, a kill's included."""
    rows = {row_id for row_id, _, _ in seen.documents.values()}
    assert set(seen.chunks) <= rows, "chunks without their document"
    assert seen.completed <= set(seen.documents), "a task completed, its document not stored"
    for key, (row_id, text, count) in seen.documents.items():
        assert text in sent[key], f"{key}: a text never submitted"
        want = chunk_text(text)
        have = seen.chunks.get(row_id, [])
        assert count == len(want), f"{key}: chunk_count {count}, chunking gives {len(want)}"
        assert [(i, t) for i, t, _ in have] == list(enumerate(want)), f"{key}: chunks differ"
        for _, _, vector in have:
            unit = np.frombuffer(vector, dtype=np.float32)
            assert unit.shape == (DIMENSION,) and abs(float(np.linalg.norm(unit)) - 1) < 1e-3
    for namespace in NAMESPACES:
        seqs = sorted(s for ns, s, _ in seen.changes if ns == namespace)
        assert seqs == list(range(1, len(seqs) + 1)), f"{namespace}: change seqs {seqs[:20]}"
        assert seen.seq[namespace] == len(seqs), f"{namespace}: seq {seen.seq[namespace]}"
        committed = {d for ns, _, d in seen.changes if ns == namespace}
        assert committed == {d for ns, d in seen.documents if ns == namespace}


@pytest.mark.parametrize("database_url", PG_MARKED, indirect=True)
def test_kills_during_commits_leave_no_document_half_stored_and_every_task_done(
    database: Database, ingest: IngestProcess
) -> None:
    rng = random.Random(16)
    ingest.start()
    for namespace in NAMESPACES:
        ingest.stub.CreateNamespace(pb.CreateNamespaceRequest(name=namespace), timeout=10)
    first = submit(ingest, 1, DOCUMENTS)
    later = submit(ingest, 2, REWRITTEN)
    sent = {key: [text] + ([later[key]] if key in later else []) for key, text in first.items()}

    landed = []  # per kill: how many tasks were between 'indexing' and their commit's end
    for _ in range(KILLS):
        mark = database.mark("started")
        deadline = time.monotonic() + 60
        while not indexing_since(database, mark) and time.monotonic() < deadline:
            pass  # no pause: a commit lasts milliseconds
        time.sleep(rng.uniform(0, 0.005))
        ingest.kill()
        landed.append(in_commit(database))
        # Right after the kill, before any re-run could mend a half-written document.
        check_whole(Stored.read(database), sent)
        ingest.start()
    deadline = time.monotonic() + 240
    seen = Stored.read(database)
    while any(s not in FINISHED for s, _ in seen.tasks) and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = Stored.read(database)

    summary = (
        f"tasks caught in a commit by each kill: {landed}\n"
        f"task states: {sorted(set(seen.tasks))}; "
        f"documents stored: {len(seen.documents)} of {len(sent)}"
    )
    print(summary)
    assert any(landed), f"no kill landed in a commit, so this run shows nothing: {summary}"
    assert set(seen.tasks) == {("completed", "")}, summary
    assert set(seen.documents) == set(sent), summary
    check_whole(seen, sent)
    for key, (_, text, _) in seen.documents.items():
        assert text == sent[key][-1], f"{key}: not the text submitted last"

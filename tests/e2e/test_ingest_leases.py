"""Two ingest processes on one database (SQLite file and PostgreSQL), as docs/SCALE_OUT.md
allows: `python -m reachstore_server.ingest.main` twice, each with its own name, one restarted or
killed while the other works on a claim.

A claim is kept busy honestly: a handful of large documents, so embedding them takes
seconds. Every change of a task's state or phase is recorded by a trigger the test puts
on the task table, so a task that goes back to ``queued``, or is claimed a second time
(its phase starts over at ``chunking``), is seen however briefly it lasts.

Each test prints what it saw (run with ``-s``); the same summary is in every assertion.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy

from reachstore.ingest.v1 import ingest_service_pb2 as pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from reachstore_server.storage.engine import make_engine
from reachstore_server.storage.schema import migrate_to_head
from tests.e2e.processes import ServiceProcess

pytestmark = pytest.mark.e2e

SERVICE = pb.DESCRIPTOR.services_by_name["IngestService"].full_name
NAMESPACE = "leases"
PG_MARKED = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
# Short leases so that a dead process's tasks are taken back within a test's patience;
# renewals four times per lease. A claim below takes many leases' time to embed, so only
# renewals keep it with its process.
LEASE_ENV = {"REACHSTORE_INGEST_LEASE_S": "2", "REACHSTORE_INGEST_HEARTBEAT_S": "0.5"}
DOCUMENTS = 6
# About 150 chunks each: a claim of them embeds for 15 s or more on this kind of machine,
# far longer than a process takes to start.
DOCUMENT_CHARS = 100_000
FINISHED = {"completed", "failed", "cancelled"}

_WORDS = (
    "otters rivers tea lanterns harbours meadows glaciers orchards copper violins "
    "lighthouses sparrows canyons bakeries tides compasses ferns quarries kites"
).split()


def document_text(seed: int) -> str:
    """Varied English sentences (the embedder's cost is per chunk, so size is what counts)."""
    rng = random.Random(seed)
    sentences: list[str] = []
    size = 0
    while size < DOCUMENT_CHARS:
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 14)))
        sentence = f"Entry {len(sentences)} of record {seed} mentions {words}."
        sentences.append(sentence)
        size += len(sentence) + 1
    return " ".join(sentences)


class IngestProcess(ServiceProcess):
    def __init__(self, workdir: Path, database_url: str, name: str) -> None:
        super().__init__(
            "reachstore_server.ingest.main",
            SERVICE,
            workdir,
            name,
            {
                "REACHSTORE_DATABASE_URL": database_url,
                "REACHSTORE_DATA_DIR": str(workdir / f"data-{name}"),
                "REACHSTORE_PII_SECRET": "ingest-lease-tests-pii-secret",
                "REACHSTORE_WORKER_ID": name,
                **LEASE_ENV,
            },
        )

    @property
    def stub(self) -> pb_grpc.IngestServiceStub:
        assert self.channel is not None, f"{self.name} is not running"
        return pb_grpc.IngestServiceStub(self.channel)

    def pause(self) -> None:
        """SIGSTOP: the process is alive but does nothing until ``resume``."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)


_HISTORY_SQLITE = [
    "CREATE TABLE task_history (seq INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT, "
    "state TEXT, phase TEXT)",
    "CREATE TRIGGER task_history_insert AFTER INSERT ON ingest_tasks BEGIN "
    "INSERT INTO task_history (task_id, state, phase) VALUES (new.task_id, new.state, new.phase); "
    "END",
    "CREATE TRIGGER task_history_update AFTER UPDATE ON ingest_tasks "
    "WHEN old.state IS NOT new.state OR old.phase IS NOT new.phase BEGIN "
    "INSERT INTO task_history (task_id, state, phase) VALUES (new.task_id, new.state, new.phase); "
    "END",
]
_HISTORY_POSTGRESQL = [
    "CREATE TABLE task_history (seq BIGSERIAL PRIMARY KEY, task_id TEXT, state TEXT, phase TEXT)",
    "CREATE FUNCTION record_task_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO task_history (task_id, state, phase) VALUES (NEW.task_id, NEW.state, NEW.phase); "
    "RETURN NEW; END $$",
    "CREATE TRIGGER task_history_insert AFTER INSERT ON ingest_tasks FOR EACH ROW "
    "EXECUTE FUNCTION record_task_change()",
    "CREATE TRIGGER task_history_update AFTER UPDATE ON ingest_tasks FOR EACH ROW "
    "WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.phase IS DISTINCT FROM NEW.phase) "
    "EXECUTE FUNCTION record_task_change()",
]


@dataclasses.dataclass(frozen=True)
class Change:
    seq: int
    task_id: str
    state: str
    phase: str


class Database:
    """The shared database as the test sees it: the schema, the history trigger, reads."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        migrate_to_head(self.engine)
        ddl = _HISTORY_SQLITE if url.startswith("sqlite") else _HISTORY_POSTGRESQL
        with self.engine.begin() as conn:
            for statement in ddl:
                conn.execute(sqlalchemy.text(statement))

    def mark(self, note: str) -> int:
        """A line in the history (task id "-") that later changes come after."""
        with self.engine.begin() as conn:
            conn.execute(
                sqlalchemy.text(
                    "INSERT INTO task_history (task_id, state, phase) VALUES ('-', :n, '')"
                ),
                {"n": note},
            )
            return int(
                conn.execute(
                    sqlalchemy.text("SELECT max(seq) FROM task_history WHERE task_id = '-'")
                ).scalar_one()
            )

    def history(self) -> list[Change]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sqlalchemy.text(
                    "SELECT seq, task_id, state, phase FROM task_history "
                    "WHERE task_id <> '-' ORDER BY seq"
                )
            )
            return [Change(*row) for row in rows]

    def states(self, task_ids: list[str]) -> dict[str, tuple[str, str]]:
        """task id -> (state, phase)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sqlalchemy.text("SELECT task_id, state, phase FROM ingest_tasks"))
            return {t: (s, p) for t, s, p in rows if t in task_ids}

    def changes_per_document(self) -> dict[str, int]:
        """How many times each document was committed (one change row per commit)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sqlalchemy.text(
                    "SELECT document_id, count(*) FROM namespace_changes GROUP BY document_id"
                )
            )
            return dict(rows.all())

    def wait(
        self, task_ids: list[str], done: set[Any], timeout: float
    ) -> dict[str, tuple[str, str]]:
        """Waits until every task's (state, phase) or state is in ``done``; the states as
        last seen either way."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.states(task_ids)
            if all(s in done or (s, p) in done for s, p in states.values()):
                return states
            if time.monotonic() > deadline:
                return states
            time.sleep(0.1)


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    yield db
    db.engine.dispose()


@pytest.fixture
def processes(tmp_path: Path, database: Database) -> Iterator[dict[str, IngestProcess]]:
    made = {name: IngestProcess(tmp_path, database.url, name) for name in ("ingest-a", "ingest-b")}
    yield made
    for process in made.values():
        if process.process is not None and process.process.poll() is None:
            process.resume()  # a stopped process cannot act on SIGTERM
        process.stop()


def submit(a: IngestProcess) -> list[str]:
    """Creates the namespace and submits the large documents to ``a``; their task ids."""
    try:
        a.stub.CreateNamespace(pb.CreateNamespaceRequest(name=NAMESPACE), timeout=10)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.ALREADY_EXISTS, exc
    reply = a.stub.BatchCreateDocuments(
        pb.BatchCreateDocumentsRequest(
            namespace=NAMESPACE,
            documents=[
                pb.DocumentInput(document_id=f"doc-{i}", text=document_text(i))
                for i in range(DOCUMENTS)
            ],
            on_duplicate=pb.ON_DUPLICATE_OVERWRITE,
        ),
        timeout=60,
    )
    task_ids = [r.task_id for r in reply.results]
    assert len(task_ids) == DOCUMENTS and all(task_ids), reply
    return task_ids


def wait_embedding(database: Database, task_ids: list[str]) -> None:
    """Until one process holds every task in the middle of embedding it."""
    states = database.wait(task_ids, {("processing", "embedding")}, timeout=60)
    assert set(states.values()) == {("processing", "embedding")}, states


def claims_per_task(history: list[Change], task_ids: list[str]) -> dict[str, int]:
    """How many times each task was claimed: a claim starts it at phase ``chunking``."""
    return {
        t: sum(1 for c in history if c.task_id == t and c.phase == "chunking") for t in task_ids
    }


def after(history: list[Change], seq: int, task_ids: list[str]) -> dict[str, list[str]]:
    """task id -> the states/phases it went through after history line ``seq``."""
    seen: dict[str, list[str]] = {t: [] for t in task_ids}
    for change in history:
        if change.seq > seq and change.task_id in seen:
            seen[change.task_id].append(
                f"{change.state}/{change.phase}" if change.phase else change.state
            )
    return seen


def restart_b_while_a_works(
    database: Database, a: IngestProcess, b: IngestProcess, cancel: int
) -> tuple[list[str], list[str], int, dict[str, tuple[str, str]]]:
    """A and B run; B stops; A claims the documents (and ``cancel`` of them are cancelled
    while A embeds them); B starts again. Returns the task ids, the cancelled ones, the
    history line of B's restart and the task states two seconds after B was back."""
    a.start()
    b.start()
    b.stop()
    task_ids = submit(a)
    wait_embedding(database, task_ids)
    cancelled = task_ids[:cancel]
    for task_id in cancelled:
        reply = a.stub.CancelTask(pb.CancelTaskRequest(task_id=task_id), timeout=10)
        assert reply.task.state == pb.TASK_STATE_CANCELLING, reply
    restarted_at = database.mark("b restarting")
    b.start()
    time.sleep(2.0)  # B's start-up recovery and a few of its claims have run by now
    return task_ids, cancelled, restarted_at, database.states(task_ids)


# ------------------------------------------------------------------------------ the tests


@pytest.mark.parametrize("database_url", PG_MARKED, indirect=True)
def test_a_restart_of_one_process_leaves_the_tasks_of_a_live_one_alone(
    database: Database, processes: dict[str, IngestProcess]
) -> None:
    a, b = processes["ingest-a"], processes["ingest-b"]
    task_ids, _, restarted_at, at_restart = restart_b_while_a_works(database, a, b, cancel=0)
    assert all(s not in FINISHED for s, _ in at_restart.values()), (
        f"A finished before B was back, so this run shows nothing: {at_restart}"
    )
    final = database.wait(task_ids, FINISHED, timeout=240)
    history = database.history()
    claims = claims_per_task(history, task_ids)
    since = after(history, restarted_at, task_ids)
    requeued = {t: seen for t, seen in since.items() if "queued" in seen}
    commits = database.changes_per_document()
    summary = (
        f"states two seconds after B's restart: {sorted(at_restart.values())}\n"
        f"claims per task: {sorted(claims.values())}\n"
        f"tasks re-queued after B's restart: {len(requeued)} of {len(task_ids)}\n"
        f"what each task went through after B's restart: {since}\n"
        f"final states: {sorted(s for s, _ in final.values())}; commits per document: {commits}"
    )
    print(summary)
    assert not requeued, summary
    assert set(claims.values()) == {1}, summary
    assert {s for s, _ in final.values()} == {"completed"}, summary
    assert commits == {f"doc-{i}": 1 for i in range(DOCUMENTS)}, summary


@pytest.mark.parametrize("database_url", PG_MARKED, indirect=True)
def test_a_restart_of_one_process_leaves_the_cancels_of_a_live_one_to_it(
    database: Database, processes: dict[str, IngestProcess]
) -> None:
    a, b = processes["ingest-a"], processes["ingest-b"]
    task_ids, cancelled, _, at_restart = restart_b_while_a_works(database, a, b, cancel=2)
    working = [t for t in task_ids if t not in cancelled]
    assert all(at_restart[t][0] == "processing" for t in working), (
        f"A finished before B was back, so this run shows nothing: {at_restart}"
    )
    final = database.wait(task_ids, FINISHED, timeout=240)
    history = database.history()
    # A ends a cancelled task at its commit, after its batch reached ``indexing``.
    indexing = min(
        (c.seq for c in history if c.task_id in working and c.phase == "indexing"), default=None
    )
    ended = {c.task_id: c.seq for c in history if c.task_id in cancelled and c.state == "cancelled"}
    commits = database.changes_per_document()
    summary = (
        f"cancelled tasks two seconds after B's restart: {[at_restart[t] for t in cancelled]}\n"
        f"A's other tasks then: {[at_restart[t] for t in working]}\n"
        f"history line of A's 'indexing': {indexing}; of each cancel's end: {ended}\n"
        f"final: {[final[t][0] for t in cancelled]} (cancelled) / "
        f"{sorted(final[t][0] for t in working)} (others); commits per document: {commits}"
    )
    print(summary)
    assert all(at_restart[t][0] == "cancelling" for t in cancelled), summary
    assert all(final[t][0] == "cancelled" for t in cancelled), summary
    assert all(final[t][0] == "completed" for t in working), summary
    assert indexing is not None and all(seq > indexing for seq in ended.values()), summary
    assert set(commits) == {f"doc-{i}" for i in range(2, DOCUMENTS)}, summary


@pytest.mark.parametrize("database_url", PG_MARKED, indirect=True)
def test_the_tasks_of_a_process_killed_for_good_are_finished_by_a_live_one(
    database: Database, processes: dict[str, IngestProcess]
) -> None:
    a, b = processes["ingest-a"], processes["ingest-b"]
    a.start()
    b.start()
    b.pause()  # alive, but it must not claim the documents: A does
    task_ids = submit(a)
    wait_embedding(database, task_ids)
    cancelled = task_ids[0]
    reply = a.stub.CancelTask(pb.CancelTaskRequest(task_id=cancelled), timeout=10)
    assert reply.task.state == pb.TASK_STATE_CANCELLING, reply
    b.resume()
    time.sleep(1.0)
    killed_at = database.mark("a killed")
    a.kill()  # and never started again
    # Taken back: claimed anew (phase ``chunking``) or, if cancelled, ended.
    deadline = time.monotonic() + 30
    while True:
        since = after(database.history(), killed_at, task_ids)
        taken_back = {t for t, seen in since.items() if seen}
        if taken_back == set(task_ids) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    taken = database.states(task_ids)
    summary = (
        f"taken back within 30 s of A's kill: {len(taken_back)} of {len(task_ids)}; "
        f"states then: {sorted(taken.values())}\n"
        f"what each task went through after the kill: {since}"
    )
    print(summary)
    assert taken_back == set(task_ids), summary
    final = database.wait(task_ids, FINISHED, timeout=240)
    commits = database.changes_per_document()
    summary += (
        f"\nfinal: {final[cancelled][0]} (cancelled one) / "
        f"{sorted(final[t][0] for t in task_ids[1:])} (others); commits per document: {commits}"
    )
    print(summary)
    assert final[cancelled][0] == "cancelled", summary
    assert all(final[t][0] == "completed" for t in task_ids[1:]), summary
    assert commits == {f"doc-{i}": 1 for i in range(1, DOCUMENTS)}, summary

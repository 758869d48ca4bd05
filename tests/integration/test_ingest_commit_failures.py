"""A claim's documents are committed together; when the database refuses one of them, the
others must still be stored whole and the refused one not at all (SQLite and PostgreSQL).

The refusal is the database's own: a trigger the test puts on the chunks table raises for
one document id, as a constraint or a full disk would, inside the claim's transaction.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy

from reachstore_server.embedding import UsemEmbedder
from reachstore_server.ingest.domain.chunking import chunk_text
from reachstore_server.ingest.worker import IngestWorker
from reachstore_server.storage import tasks as states
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.repository import SemanticStore
from reachstore_server.storage.schema import migrate_to_head
from reachstore_server.storage.tasks import NewTask, TaskStore

TENANT = "t"
REFUSED = "d-refused"

_TRIGGER_SQLITE = [
    "CREATE TRIGGER refuse_one BEFORE INSERT ON chunks "
    f"WHEN NEW.document_id = '{REFUSED}' BEGIN SELECT RAISE(ABORT, 'refused by test'); END"
]
_TRIGGER_POSTGRESQL = [
    "CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"IF NEW.document_id = '{REFUSED}' THEN RAISE EXCEPTION 'refused by test'; END IF; "
    "RETURN NEW; END $$",
    "CREATE TRIGGER refuse_one BEFORE INSERT ON chunks FOR EACH ROW EXECUTE FUNCTION refuse_one()",
]


@pytest.fixture(scope="module")
def embedder() -> UsemEmbedder:
    return UsemEmbedder(threads=1)


@pytest.fixture
def parts(
    database_url: str, embedder: UsemEmbedder
) -> Iterator[tuple[sqlalchemy.Engine, SemanticStore, TaskStore, IngestWorker]]:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    with engine.begin() as conn:
        for statement in (
            _TRIGGER_SQLITE if database_url.startswith("sqlite") else _TRIGGER_POSTGRESQL
        ):
            conn.execute(sqlalchemy.text(statement))
    sessions = make_sessions(engine)
    store, tasks = SemanticStore(sessions), TaskStore(sessions, "ingest-test")
    for name in ("docs", "more"):
        store.create_namespace(TENANT, name, embedder.model_id, embedder.dimension)
    yield engine, store, tasks, IngestWorker(store, tasks, embedder, batch_chunks=16)
    engine.dispose()


def _text(n: int) -> str:
    return " ".join([f"Note {n} says the tide turns at {n} o'clock."] * (30 if n % 3 else 1))


def test_a_document_the_database_refuses_fails_alone_and_the_others_are_stored_whole(
    parts,  # type: ignore[no-untyped-def]
) -> None:
    engine, store, tasks, worker = parts
    # Two namespaces, an existing document overwritten, the refused one in the middle.
    tasks.enqueue(TENANT, [NewTask("docs", "d1", "an older text", {}, "overwrite")])
    assert worker.run_once() == 1
    submitted = [("docs", f"d{n}", _text(n)) for n in range(6)]
    submitted.insert(3, ("docs", REFUSED, _text(7)))
    submitted += [("more", f"m{n}", _text(n)) for n in range(3)]
    ids = {
        (ns, doc): task.task_id
        for (ns, doc, _), task in zip(
            submitted,
            [
                tasks.enqueue(TENANT, [NewTask(ns, doc, text, {"n": doc}, "overwrite")])[0]
                for ns, doc, text in submitted
            ],
            strict=True,
        )
    }
    assert worker.run_once() == len(submitted)

    refused = tasks.get(TENANT, ids[("docs", REFUSED)])
    assert (refused.state, refused.error_code) == (states.FAILED, "INTERNAL")
    assert store.get_document(TENANT, "docs", REFUSED) is None
    for ns, doc, text in submitted:
        if doc == REFUSED:
            continue
        assert tasks.get(TENANT, ids[(ns, doc)]).state == states.COMPLETED
        stored = store.get_document(TENANT, ns, doc)
        assert stored is not None and stored.text == text
        namespace = store.get_namespace(TENANT, ns)
        chunks = [c for c in store.chunks(TENANT, namespace.id, [doc])]
        assert [c.text for c in sorted(chunks, key=lambda c: c.chunk_index)] == chunk_text(text)
    with engine.connect() as conn:
        orphans = conn.execute(
            sqlalchemy.text(
                "SELECT count(*) FROM chunks c LEFT JOIN documents d "
                "ON d.id = c.document_row_id WHERE d.id IS NULL OR c.document_id = :refused"
            ),
            {"refused": REFUSED},
        ).scalar_one()
        changes = dict(
            conn.execute(
                sqlalchemy.text(
                    "SELECT n.name, count(c.id) FROM namespaces n "
                    "LEFT JOIN namespace_changes c ON c.namespace_id = n.id GROUP BY n.name"
                )
            ).all()
        )
    assert orphans == 0
    for name in ("docs", "more"):
        namespace = store.get_namespace(TENANT, name)
        # One change per commit: d1 twice (its older text, then the new one), each other once.
        assert namespace.change_seq == changes[name]
    assert changes == {"docs": 7, "more": 3}

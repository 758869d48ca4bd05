"""The store on SQLite and PostgreSQL: namespaces, document versions, changes, tenancy."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.repository import ChunkData, NamespaceExists, SemanticStore
from reachstore_server.storage.schema import migrate_to_head

MODEL = "test-model"


@pytest.fixture
def store(database_url: str) -> Iterator[SemanticStore]:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    yield SemanticStore(make_sessions(engine))
    engine.dispose()


def _chunks(*texts: str) -> list[ChunkData]:
    return [
        ChunkData(t, f"h-{t}", np.full(4, i, dtype=np.float32).tobytes())
        for i, t in enumerate(texts)
    ]


def _commit(store: SemanticStore, tenant: str, namespace_id: int, doc: str, *texts: str) -> None:
    with store.begin() as session:
        store.commit_document(
            session,
            tenant,
            namespace_id,
            doc,
            " ".join(texts),
            {"k": doc},
            f"sha-{doc}",
            _chunks(*texts),
        )


def test_namespace_names_are_unique_per_tenant_not_globally(store: SemanticStore) -> None:
    store.create_namespace("t1", "docs", MODEL, 4)
    store.create_namespace("t2", "docs", MODEL, 4)
    with pytest.raises(NamespaceExists):
        store.create_namespace("t1", "docs", MODEL, 4)
    assert store.namespace_names("t1") == ["docs"]
    assert store.namespace_names("t2") == ["docs"]


def test_list_namespaces_pages_in_name_order(store: SemanticStore) -> None:
    for name in ["c", "a", "b", "d"]:
        store.create_namespace("t", name, MODEL, 4)
    first = store.list_namespaces("t", 2, None)
    second = store.list_namespaces("t", 2, first[-1].name)
    assert [n.name for n in first] == ["a", "b"]
    assert [n.name for n in second] == ["c", "d"]


def test_committing_a_document_bumps_the_change_seq_and_stores_chunks(store: SemanticStore) -> None:
    ns = store.create_namespace("t", "docs", MODEL, 4)
    _commit(store, "t", ns.id, "d1", "one", "two")
    _commit(store, "t", ns.id, "d2", "three")
    head = store.namespace_heads("t", ["docs"])["docs"]
    assert head.change_seq == 2
    chunks = list(store.chunks("t", ns.id))
    assert [(c.document_id, c.chunk_index, c.text) for c in chunks] == [
        ("d1", 0, "one"),
        ("d1", 1, "two"),
        ("d2", 0, "three"),
    ]
    assert chunks[0].metadata == {"k": "d1"}
    info = store.get_namespace("t", "docs")
    assert info is not None and (info.document_count, info.chunk_count) == (2, 3)


def test_overwriting_replaces_the_chunks_and_records_one_change(store: SemanticStore) -> None:
    ns = store.create_namespace("t", "docs", MODEL, 4)
    _commit(store, "t", ns.id, "d1", "old-a", "old-b")
    _commit(store, "t", ns.id, "d1", "new")
    assert [c.text for c in store.chunks("t", ns.id)] == ["new"]
    assert store.changed_documents("t", ns.id, 1, 2) == {"d1"}
    doc = store.get_document("t", "docs", "d1")
    assert doc is not None and doc.text == "new" and doc.chunk_count == 1


def test_deleting_a_document_removes_its_chunks_and_is_replayable(store: SemanticStore) -> None:
    ns = store.create_namespace("t", "docs", MODEL, 4)
    _commit(store, "t", ns.id, "d1", "a")
    _commit(store, "t", ns.id, "d2", "b")
    assert store.delete_document("t", ns.id, "d1") is True
    assert store.delete_document("t", ns.id, "d1") is False
    assert store.changed_documents("t", ns.id, 2, 3) == {"d1"}
    assert [c.document_id for c in store.chunks("t", ns.id)] == ["d2"]


def test_another_tenant_sees_nothing_of_a_namespace(store: SemanticStore) -> None:
    ns = store.create_namespace("t1", "docs", MODEL, 4)
    _commit(store, "t1", ns.id, "d1", "secret")
    assert store.get_namespace("t2", "docs") is None
    assert store.get_document("t2", "docs", "d1") is None
    assert list(store.chunks("t2", ns.id)) == []
    assert store.namespace_heads("t2", ["docs"]) == {}
    assert store.delete_document("t2", ns.id, "d1") is False
    assert store.delete_namespace("t2", "docs") is False
    assert store.get_document("t1", "docs", "d1") is not None


def test_deleting_a_namespace_removes_everything_in_it(store: SemanticStore) -> None:
    ns = store.create_namespace("t", "docs", MODEL, 4)
    _commit(store, "t", ns.id, "d1", "a")
    assert store.delete_namespace("t", "docs") is True
    assert store.get_namespace("t", "docs") is None
    assert list(store.chunks("t", ns.id)) == []
    again = store.create_namespace("t", "docs", MODEL, 4)
    assert again.id != ns.id and again.change_seq == 0


def test_namespace_heads_see_every_commit_of_another_process(database_url: str) -> None:
    """The query side's cached view must never lag behind a completed write."""
    writer_engine, reader_engine = make_engine(database_url), make_engine(database_url)
    migrate_to_head(writer_engine)
    writer = SemanticStore(make_sessions(writer_engine))
    reader = SemanticStore(make_sessions(reader_engine))
    try:
        assert reader.namespace_heads("t", ["docs"]) == {}
        ns = writer.create_namespace("t", "docs", MODEL, 4)
        assert reader.namespace_heads("t", ["docs"])["docs"].change_seq == 0
        assert reader.namespace_heads("t", ["docs"])["docs"].change_seq == 0  # cached, same
        _commit(writer, "t", ns.id, "d1", "a")
        assert reader.namespace_heads("t", ["docs"])["docs"].change_seq == 1
        writer.delete_namespace("t", "docs")
        assert reader.namespace_heads("t", ["docs", "other"]) == {}
    finally:
        writer_engine.dispose()
        reader_engine.dispose()


def test_columns_added_since_a_database_was_made_are_added_in_place(database_url: str) -> None:
    """A data folder made by an earlier version keeps working: its key table gets the
    channel and group columns, existing keys read as 'no restriction'."""
    from sqlalchemy import text

    from reachstore_server.storage.keys import KeyStore

    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "CREATE TABLE api_keys (key_id VARCHAR(32) PRIMARY KEY, tenant VARCHAR(64), "
                    "name VARCHAR(128), secret_sha256 VARCHAR(64), scopes_json TEXT, "
                    "namespaces_json TEXT, created_at TIMESTAMP, expires_at TIMESTAMP, "
                    "revoked_at TIMESTAMP)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO api_keys VALUES ('k1', 't', 'old', 'x', '[\"read\"]', '[]', "
                    "'2026-01-01 00:00:00', NULL, NULL)"
                )
            )
        migrate_to_head(engine)
        migrate_to_head(engine)  # a second run finds the schema at head
        old = KeyStore(make_sessions(engine)).find("k1")
        assert old is not None and old.channels == () and old.groups == ()
    finally:
        engine.dispose()

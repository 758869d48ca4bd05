"""What stays on a member's disk of a namespace that was deleted, tried with real query
processes on PostgreSQL.

``DeleteNamespace`` "deletes a namespace with all its documents, chunks and tasks"
(protos/reachstore/ingest/v1/ingest_service.proto). A query process's index snapshot of
the namespace holds the text of every chunk (reachstore_server/query/index/snapshot.py);
a query process that holds the namespace deletes that file when the namespace is gone
(reachstore_server/query/indexes.py ``write_snapshots``, every few seconds), and rewrites it
without a deleted document once it has replayed the deletion (``follow``).

With shards, a member that stops owning a namespace drops its index and keeps its snapshot
file "for a later return" (``IndexManager.drop``; docs/SHARDS.md, three leases after the
move). Once the namespace is deleted, nothing holds a slot for it on that member any more,
so nothing there ever deletes the file: the deleted documents' text stays on that
member's disk. The same holds for a document deleted from a namespace the member dropped.
Here the first member starts alone (so it loads and snapshots every namespace), three
more join, and it drops the namespaces placed on the others.
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.processes import ServiceProcess
from tests.e2e.test_shards import ALL, LEASE_S, Tier, _text, tier  # noqa: F401 - reused

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

SNAPSHOT_EVERY_S = 5.0  # reachstore_server/query/main.py SNAPSHOT_INTERVAL_SECONDS


def _ready(member: ServiceProcess) -> set[str]:
    reply = pb_grpc.QueryServiceStub(member.channel).ListNamespaceHealth(
        pb.ListNamespaceHealthRequest(page_size=100), timeout=10
    )
    return {n.name for n in reply.namespaces if n.index_state == "ready"}


def _holding(data_dir: Path, text: str) -> list[str]:
    """Files under a member's data directory that contain ``text``."""
    return [
        str(p.relative_to(data_dir))
        for p in data_dir.rglob("*")
        if p.is_file() and text.encode() in p.read_bytes()
    ]


@pytest.mark.parametrize("deleted", ["namespace", "document"])
def test_a_deleted_namespace_leaves_no_snapshot_on_a_member_that_had_dropped_it(
    tier: Tier,  # noqa: F811
    deleted: str,
) -> None:
    """``document``: DeleteDocument of the namespace's one document instead (the holders
    replay the deletion into their index and rewrite their snapshot)."""
    first = tier.start_member()
    tier.wait_serving(1)
    time.sleep(SNAPSHOT_EVERY_S * 1.5)  # alone, it holds and snapshots every namespace
    first_dir = tier.tmp_path / first.name
    unwritten = [n for n in ALL if not _holding(first_dir, _text(n))]
    assert not unwritten, f"the snapshots were never written: harness {unwritten}"
    others = [tier.start_member() for _ in range(3)]
    tier.wait_serving(4)
    ids = {address: member_id for address, (member_id, _) in tier.rows().items()}
    owners = tier.owners(first)
    mine = {n for n, o in owners.items() if ids[first.address] in o}
    deadline = time.monotonic() + LEASE_S * 8
    while _ready(first) != mine:  # it has dropped the others' namespaces
        assert time.monotonic() < deadline, (_ready(first), mine)
        time.sleep(0.3)
    dropped = sorted(set(owners) - mine)[0]

    ingest = ServiceProcess(
        "reachstore_server.ingest.main",
        "reachstore.ingest.v1.IngestService",
        tier.tmp_path,
        "ingest-delete",
        {**tier.common, "REACHSTORE_DATA_DIR": str(tier.tmp_path / "ingest-delete")},
    ).start()
    try:
        stub = ingest_grpc.IngestServiceStub(ingest.channel)
        if deleted == "namespace":
            stub.DeleteNamespace(ingest_pb.DeleteNamespaceRequest(name=dropped), timeout=10)
        else:
            stub.DeleteDocument(
                ingest_pb.DeleteDocumentRequest(namespace=dropped, document_id="ledger"),
                timeout=10,
            )
    finally:
        ingest.stop()
    with psycopg.connect(tier.url) as conn:
        left = conn.execute(
            "SELECT count(*) FROM chunks WHERE text LIKE %s", (f"%{dropped} ledger%",)
        ).fetchone()
    assert left == (0,), left
    time.sleep(SNAPSHOT_EVERY_S * 3)

    remaining = {
        m.name: found
        for m in (first, *others)
        if (found := _holding(tier.tmp_path / m.name, _text(dropped)))
    }
    names = {ids[m.address]: m.name for m in (first, *others)}
    assert not remaining, (
        f"{deleted} deleted {SNAPSHOT_EVERY_S * 3:.0f} s ago (namespace {dropped}, held by "
        f"{[names[o] for o in owners[dropped]]}); its text is still on disk: {remaining}"
    )

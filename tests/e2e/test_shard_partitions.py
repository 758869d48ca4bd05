"""A namespace larger than one process should hold, split into partitions over the query
members (docs/SHARDS.md, "Partitions"), tried with real processes on PostgreSQL.

Four members and a namespace of 96 documents with a partition size of 16 chunks: no member
may hold the whole namespace, as its index files on disk show; every member still answers
for all of it. Killing both owners of a partition leaves its namespace a partial answer,
naming the partitions that are missing, with everything the other partitions found; the
small namespace beside it answers whole; and the answer is whole again once the missing
partitions are placed on the live members."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import psycopg
import pytest
from google.protobuf import json_format

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from reachstore_server.query.shards.partitions import Part, partition_of, unit_key
from reachstore_server.query.shards.placement import owners, shard_key
from tests.e2e.processes import ServiceProcess
from tests.e2e.test_shards import LEASE_S, Tier

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

BIG, SMALL = "atlas", "pamphlet"
DOCUMENTS = 96
PARTITION_CHUNKS = 16
WORDS = [
    "amber", "basalt", "cobalt", "dune", "ember", "fjord", "glacier", "harbor",
    "island", "jungle", "karst", "lagoon", "mesa", "nebula", "oasis", "prairie",
]  # fmt: skip


def _document_id(i: int) -> str:
    return f"entry-{i:03d}"


def _text(i: int) -> str:
    a, b, c = WORDS[i % 16], WORDS[(i // 16) % 16], WORDS[(i * 7 + 3) % 16]
    return f"Atlas entry {i}: the {a} {b} survey, sheet q{i:03d}x, notes on {c}."


class Writer:
    """The ingest service of the test, kept running beside the members."""

    def __init__(self, tier: Tier) -> None:
        self.process = tier.start_ingest()
        self.stub = ingest_grpc.IngestServiceStub(self.process.channel)

    def _wait(self, tasks: list[str]) -> None:
        deadline = time.monotonic() + 120
        for task_id in tasks:
            while (
                self.stub.GetTask(ingest_pb.GetTaskRequest(task_id=task_id), timeout=10).task.state
                != ingest_pb.TASK_STATE_COMPLETED
            ):
                assert time.monotonic() < deadline, "ingest did not finish"
                time.sleep(0.1)

    def put(self, name: str, ids: range, text: Callable[[int], str] = _text) -> None:
        tasks = []
        for start in range(ids.start, ids.stop, 48):
            reply = self.stub.BatchCreateDocuments(
                ingest_pb.BatchCreateDocumentsRequest(
                    namespace=name,
                    documents=[
                        ingest_pb.DocumentInput(document_id=_document_id(i), text=text(i))
                        for i in range(start, min(ids.stop, start + 48))
                    ],
                ),
                timeout=30,
            )
            tasks.extend(r.task_id for r in reply.results)
        self._wait(tasks)

    def delete(self, name: str, i: int) -> None:
        self.stub.DeleteDocument(
            ingest_pb.DeleteDocumentRequest(namespace=name, document_id=_document_id(i)),
            timeout=10,
        )


@pytest.fixture
def writer(tmp_path: Path, pg_database: str) -> Iterator[tuple[Tier, Writer]]:
    tier = Tier(tmp_path, pg_database)
    tier.common["REACHSTORE_QUERY_PARTITION_CHUNKS"] = str(PARTITION_CHUNKS)
    writer = Writer(tier)
    try:
        for name, count in ((BIG, DOCUMENTS), (SMALL, 1)):
            writer.stub.CreateNamespace(ingest_pb.CreateNamespaceRequest(name=name), timeout=10)
            writer.put(name, range(count))
        yield tier, writer
    finally:
        writer.process.stop()
        tier.stop_all()


@pytest.fixture
def tier(writer: tuple[Tier, Writer]) -> Tier:
    return writer[0]


def _namespace_id(tier: Tier) -> int:
    with psycopg.connect(tier.url) as conn:
        row = conn.execute("SELECT id FROM namespaces WHERE name = %s", (BIG,)).fetchone()
    assert row is not None
    return int(row[0])


def _index_files(member: ServiceProcess, namespace_id: int) -> set[str]:
    """The index snapshots of the big namespace in the member's data directory."""
    folder = Path(member._env["REACHSTORE_DATA_DIR"]) / "indexes"
    return {p.name for p in folder.glob(f"{namespace_id}.*")}


def _partitions(tier: Tier) -> tuple[int, int]:
    """The big namespace's (partitions, partitions_next), read with SQL."""
    with psycopg.connect(tier.url) as conn:
        row = conn.execute(
            "SELECT partitions, partitions_next FROM namespaces WHERE name = %s", (BIG,)
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _part_owners(tier: Tier, count: int) -> dict[int, set[str]]:
    """Partition -> the ids of the members it is placed on (the placement rule, over the
    members table; the tenant of keyless calls is "default")."""
    ids = [member_id for member_id, _ in tier.rows().values()]
    return {i: set(owners(unit_key("default", BIG, Part(i, count)), ids, 2)) for i in range(count)}


def _ask(member: ServiceProcess, text: str, **kwargs: object) -> pb.QueryResponse:
    return pb_grpc.QueryServiceStub(member.channel).Query(
        pb.QueryRequest(namespaces=[BIG, SMALL], query=text, top_k=5, timeout_ms=3000, **kwargs),
        timeout=10,
    )


def _split_everywhere(tier: Tier, members: list[ServiceProcess]) -> tuple[int, dict[str, set[str]]]:
    """Waits until the big namespace is split and every member holds, on disk, only its
    partitions placed on it; returns the partition count and each member's files."""
    namespace_id = _namespace_id(tier)
    deadline = time.monotonic() + 120
    while True:
        ids = {address: member_id for address, (member_id, _) in tier.rows().items()}
        count, loading = _partitions(tier)
        placed = _part_owners(tier, count)
        files = {m.name: _index_files(m, namespace_id) for m in members}
        wanted = {
            m.name: {
                f"{namespace_id}.p{i}of{count}.snap"
                for i, o in placed.items()
                if ids.get(m.address) in o
            }
            for m in members
        }
        if count > 1 and count == loading and files == wanted:
            return count, files
        assert time.monotonic() < deadline, (
            f"not split as placed ({count}, {loading} partitions): {files} != {wanted}"
        )
        time.sleep(0.5)


class Searches:
    """A client asking for one document after another through every member in turn while
    the namespace is split: every answer must be whole and find its document first."""

    def __init__(self, members: list[ServiceProcess]) -> None:
        self.members = members
        self.answers = 0
        self.wrong: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        turn = 0
        while not self._stop.is_set():
            turn += 1
            i = (turn * 13) % DOCUMENTS
            reply = _ask(self.members[turn % len(self.members)], _text(i))
            self.answers += 1
            top = [(r.namespace, r.document_id) for r in reply.results[:1]]
            if reply.meta.coverage_ratio != 1.0 or top != [(BIG, _document_id(i))]:
                self.wrong.append(f"{i}: {top} {json_format.MessageToJson(reply.meta)}")

    def __enter__(self) -> Searches:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_a_large_namespace_is_split_and_no_member_holds_all_of_it(
    writer: tuple[Tier, Writer],
) -> None:
    tier, ingest = writer
    members = [tier.start_member() for _ in range(4)]
    tier.wait_serving(4)
    with Searches(members) as searches:
        count, files = _split_everywhere(tier, members)
    # While it was split, every answer was whole and right.
    assert searches.answers > 20 and not searches.wrong, (searches.answers, searches.wrong[:3])
    # No partition holds more than the partition size; each member holds about 2/4 of
    # them, never all, and every partition is held twice.
    sizes = [0] * count
    for i in range(DOCUMENTS):
        sizes[partition_of(_document_id(i), count)] += 1
    assert count >= DOCUMENTS / PARTITION_CHUNKS and max(sizes) <= PARTITION_CHUNKS, sizes
    assert all(len(f) < count for f in files.values()), files
    assert sum(len(f) for f in files.values()) == 2 * count, files

    # Every member answers for the whole namespace: each document is found by its own
    # sheet number, whichever partition holds it, through whichever member is asked.
    for i in range(0, DOCUMENTS, 7):
        reply = _ask(members[i % 4], _text(i))
        assert reply.meta.coverage_ratio == 1.0, reply.meta
        top = [(r.namespace, r.document_id) for r in reply.results]
        assert (BIG, _document_id(i)) == top[0], (i, partition_of(_document_id(i), count), top)

    # Written after the split: a new document is found, a deleted one is not, everywhere.
    ingest.put(BIG, range(DOCUMENTS, DOCUMENTS + 1))
    ingest.delete(BIG, 5)
    for member in members:
        new = _ask(member, _text(DOCUMENTS))
        assert (new.results[0].namespace, new.results[0].document_id) == (
            BIG,
            _document_id(DOCUMENTS),
        ), member.name
        gone = _ask(member, _text(5))
        assert _document_id(5) not in [r.document_id for r in gone.results], member.name


def test_a_missing_partition_makes_its_namespace_a_partial_answer(tier: Tier) -> None:
    members = [tier.start_member() for _ in range(4)]
    tier.wait_serving(4)
    count, _ = _split_everywhere(tier, members)
    by_id = {member_id: address for address, (member_id, _) in tier.rows().items()}
    placed = _part_owners(tier, count)
    # Two members that own a partition together, and not the small namespace too.
    small = set(owners(shard_key("default", SMALL), list(by_id), 2))
    pair = next((o for o in placed.values() if o != small), None)
    assert pair is not None, (placed, small)
    missing = sorted(i for i, o in placed.items() if o == pair)
    victims = [m for m in members if m.address in {by_id[i] for i in pair}]
    survivor = next(m for m in members if m not in victims)
    for victim in victims:
        victim.kill()

    gone = next(i for i in range(DOCUMENTS) if partition_of(_document_id(i), count) in missing)
    there = next(i for i in range(DOCUMENTS) if partition_of(_document_id(i), count) not in missing)
    reply = _ask(survivor, _text(there))
    failed = {f.namespace: f for f in reply.meta.namespaces_failed}
    assert set(failed) == {BIG}, reply.meta
    failure = failed[BIG]
    data = json_format.MessageToDict(failure.structured_data)
    assert failure.error_code == "SHARD_UNAVAILABLE", failure
    assert failure.category == pf_pb2.CATEGORY_TRANSIENT
    assert failure.retryable and failure.retry_after_ms > 0
    assert data["partitions"] == count
    assert data["partitions_missing"] == missing, (data, missing)
    assert data["partitions_answered"] == count - len(missing)
    assert set(data["owners_tried"]) == pair
    # What the other partitions found is there; the small namespace answered whole.
    assert list(reply.meta.namespaces_succeeded) == [SMALL]
    expected = (1 + (count - len(missing)) / count) / 2
    assert reply.meta.coverage_ratio == pytest.approx(expected), reply.meta
    top = [(r.namespace, r.document_id) for r in reply.results]
    assert top[0] == (BIG, _document_id(there)), top
    lost = _ask(survivor, _text(gone))
    assert (BIG, _document_id(gone)) not in [(r.namespace, r.document_id) for r in lost.results]

    # Not allowed to be partial: refused as incomplete, retryable, naming the namespace.
    with pytest.raises(grpc.RpcError) as refused:
        _ask(survivor, _text(there), allow_partial=False)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value

    # The missing partitions move to the live members once the dead ones' leases run
    # out, and the namespace answers whole again, the lost document too.
    deadline = time.monotonic() + 60
    while True:
        reply = _ask(survivor, _text(gone))
        if reply.meta.coverage_ratio == 1.0:
            break
        assert time.monotonic() < deadline, reply.meta
        time.sleep(LEASE_S / 5)
    assert (BIG, _document_id(gone)) == (reply.results[0].namespace, reply.results[0].document_id)

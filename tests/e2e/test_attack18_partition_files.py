"""The life of a split namespace's indexes on disk and across a re-creation, with real
members on PostgreSQL (the harness of test_shard_partitions.py).

- A member restarted (SIGTERM, as a rolling restart does) just after a split was routed
  came back with the unsplit snapshot on disk, which no slot would ever rewrite or delete:
  the text of a document deleted afterwards stayed in it for good.
- The namespace deleted and created again under the same name while it splits: the old
  documents never come back, the new ones are found whole, no file of the old one stays.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from tests.e2e import test_shard_partitions as split
from tests.e2e.test_shard_partitions import (
    BIG,
    DOCUMENTS,
    Writer,
    _ask,
    _document_id,
    _namespace_id,
    _partitions,
    _text,
)
from tests.e2e.test_shards import LEASE_S, Tier

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

# The fixtures of the split namespace's tier, under their own names here.
writer = split.writer


def _folder(member) -> Path:  # type: ignore[no-untyped-def]
    return Path(member._env["REACHSTORE_DATA_DIR"]) / "indexes"


def test_a_restart_just_after_a_split_leaves_no_unsplit_index_on_disk(
    writer: tuple[Tier, Writer],
) -> None:
    tier, ingest = writer
    members = [tier.start_member() for _ in range(3)]
    tier.wait_serving(3)
    whole = f"{_namespace_id(tier)}.snap"
    deadline = time.monotonic() + 120
    while True:  # routed, and the unsplit index still on disk (it goes three leases on)
        count, loading = _partitions(tier)
        holders = [m for m in members if (_folder(m) / whole).exists()]
        if count > 1 and count == loading and holders:
            break
        assert time.monotonic() < deadline, (count, loading, holders)
        time.sleep(0.1)
    for member in holders:  # a rolling restart of the members holding it
        member.stop()
        member.start()
    tier.wait_serving(3)
    victim = 40
    ingest.delete(BIG, victim)
    time.sleep(6 * LEASE_S + 6)  # three leases to drop what is not held; snapshots every 5 s
    token = f"q{victim:03d}x".encode()
    problems = []
    for member in members:
        files = sorted(p.name for p in _folder(member).glob("*.snap"))
        if whole in files:
            problems.append(f"{member.name} keeps {whole} after the split: {files}")
        for path in _folder(member).glob("*.snap"):
            if token in path.read_bytes():
                problems.append(f"{member.name}: the deleted document's text in {path.name}")
    assert not problems, "\n".join(problems)


def _fresh(i: int) -> str:
    return f"Fresh leaflet {i}: the topaz orchard, card z{i:03d}w."


def test_a_namespace_deleted_and_created_again_while_it_splits(
    writer: tuple[Tier, Writer],
) -> None:
    tier, ingest = writer
    members = [tier.start_member() for _ in range(3)]
    tier.wait_serving(3)
    deadline = time.monotonic() + 60
    while _partitions(tier)[1] == 1:
        assert time.monotonic() < deadline, "never began to split"
        time.sleep(0.1)
    old_id = _namespace_id(tier)
    ingest.stub.DeleteNamespace(ingest_pb.DeleteNamespaceRequest(name=BIG), timeout=30)
    ingest.stub.CreateNamespace(ingest_pb.CreateNamespaceRequest(name=BIG), timeout=10)
    ingest.put(BIG, range(5), _fresh)
    assert _namespace_id(tier) != old_id

    problems: list[str] = []
    until = time.monotonic() + 4 * LEASE_S
    n = 0
    while time.monotonic() < until:
        n += 1
        member = members[n % 3]
        old = _ask(member, _text(n % DOCUMENTS))
        back = [
            r.document_id
            for r in old.results
            if r.namespace == BIG and r.text.startswith("Atlas entry")
        ]
        if back:
            problems.append(f"old documents back through {member.name}: {back[:3]}")
        reply = _ask(member, _fresh(n % 5))
        if reply.meta.coverage_ratio == 1.0 and (
            not reply.results or reply.results[0].document_id != _document_id(n % 5)
        ):
            problems.append(f"whole answer through {member.name} without {_document_id(n % 5)}")
    time.sleep(2 * LEASE_S)  # settled: whole answers everywhere, no file of the old one
    for i, member in enumerate(members):
        reply = _ask(member, _fresh(i))
        if reply.meta.coverage_ratio != 1.0 or reply.results[0].document_id != _document_id(i):
            problems.append(f"settled: {member.name} {reply.meta} {list(reply.results)[:1]}")
        left = sorted(p.name for p in _folder(member).glob(f"{old_id}.*"))
        if left:
            problems.append(f"{member.name} still has the old namespace's files {left}")
    assert not problems, "\n".join(problems[:20])

"""The hop headers of a split namespace sent by a caller, to real members on PostgreSQL
(the harness of test_shard_partitions.py: 96 documents, partitions of 16 chunks).

A hop header that does not verify is ignored and the call is routed, charged and audited
like any other (docs/SHARDS.md); x-reachstore-parts, -stage and -lexical-stats are signed
with the request, so a caller cannot make a member search (or load) a partition not placed
on it, skip the first round or change scores, and a stamp of thousands of digits (which
``int()`` refuses) made every such call end INTERNAL."""

from __future__ import annotations

import time

import grpc
import pytest

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from reachstore_server.query.shards.membership import HOP_HEADER, Membership
from reachstore_server.query.shards.partitions import PARTS_HEADER, partition_of
from reachstore_server.query.shards.router import (
    LEXICAL_STATS_HEADER,
    STAGE_HEADER,
    _signed_body,
)
from tests.e2e import test_shard_partitions as split
from tests.e2e.test_shard_partitions import (
    BIG,
    DOCUMENTS,
    _document_id,
    _index_files,
    _namespace_id,
    _part_owners,
    _split_everywhere,
    _text,
)
from tests.e2e.test_shards import Tier

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

# The fixtures of the split namespace's tier, under their own names here.
tier = split.tier
writer = split.writer


def _request(i: int) -> pb.QueryRequest:
    return pb.QueryRequest(
        namespaces=[BIG], query=_text(i), top_k=5, timeout_ms=3000, allow_partial=True
    )


def _call(member, request: pb.QueryRequest, metadata) -> pb.QueryResponse:  # type: ignore[no-untyped-def]
    return pb_grpc.QueryServiceStub(member.channel).Query(request, timeout=10, metadata=metadata)


def test_forged_altered_and_garbage_hop_headers_on_a_split_namespace(tier: Tier) -> None:
    members = [tier.start_member() for _ in range(3)]
    tier.wait_serving(3)
    count, files_before = _split_everywhere(tier, members)
    ns_id = _namespace_id(tier)
    ids = {address: member_id for address, (member_id, _) in tier.rows().items()}
    placed = _part_owners(tier, count)
    # A member, and a partition not placed on it, and a document of that partition.
    target = next(m for m in members if any(ids[m.address] not in o for o in placed.values()))
    foreign = next(i for i, o in placed.items() if ids[target.address] not in o)
    doc = next(i for i in range(DOCUMENTS) if partition_of(_document_id(i), count) == foreign)
    request = _request(doc)
    baseline = _call(target, request, None)
    assert baseline.meta.coverage_ratio == 1.0, baseline.meta
    expected_top = (baseline.results[0].namespace, baseline.results[0].document_id)
    assert expected_top == (BIG, _document_id(doc))

    problems: list[str] = []

    def expect_routed(what: str, metadata) -> None:  # type: ignore[no-untyped-def]
        """The call must be answered as any caller's: whole coverage, same results."""
        try:
            reply = _call(target, request, metadata)
        except grpc.RpcError as exc:
            problems.append(f"{what}: {exc.code().name} {exc.details()[:160]}")
            return
        got = [(r.namespace, r.document_id, round(r.score, 9)) for r in reply.results]
        want = [(r.namespace, r.document_id, round(r.score, 9)) for r in baseline.results]
        if reply.meta.coverage_ratio != 1.0 or got != want:
            problems.append(f"{what}: coverage {reply.meta.coverage_ratio}, {got} != {want}")

    now = int(time.time())
    zero_mac = "0" * 64
    forged_hops = {
        "no hop": None,
        "zero mac": f"{ids[target.address]}.{now}.{zero_mac}",
        "garbage": "x",
        "huge stamp": f"{ids[target.address]}.{'9' * 5000}.{zero_mac}",
    }
    bogus_stats = f'{{"{BIG}":[1000000,1,{{"atlas":999999,"entry":999999}}]}}'
    for name, hop in forged_hops.items():
        base = [] if hop is None else [(HOP_HEADER, hop)]
        expect_routed(f"{name}", base or None)
        expect_routed(f"{name} + parts", [*base, (PARTS_HEADER, f"{BIG}={foreign}/{count}")])
        expect_routed(f"{name} + stage", [*base, (STAGE_HEADER, "term-stats")])
        expect_routed(f"{name} + stats", [*base, (LEXICAL_STATS_HEADER, bogus_stats)])
        expect_routed(f"{name} + garbage parts", [*base, (PARTS_HEADER, "=,/" * 600)])

    # An insider's valid signature (the test knows the secret), for partition `foreign`,
    # replayed with altered headers: must be routed as any call.
    secret = tier.common["REACHSTORE_QUERY_HOP_SECRET"]
    signer = Membership(None, "127.0.0.1:1", 2, 5.0, secret, "x")  # type: ignore[arg-type]
    signed_parts = {PARTS_HEADER: f"{BIG}={foreign}/{count}"}
    hop = signer.sign(_signed_body(request, signed_parts), now=time.time())
    signed = [(HOP_HEADER, hop), *signed_parts.items()]
    other = (foreign + 1) % count
    expect_routed(
        "replayed, other partition", [(HOP_HEADER, hop), (PARTS_HEADER, f"{BIG}={other}/{count}")]
    )
    expect_routed("replayed, stage added", [*signed, (STAGE_HEADER, "term-stats")])
    expect_routed("replayed, stats added", [*signed, (LEXICAL_STATS_HEADER, bogus_stats)])
    # The valid one itself (what a member sends): the partition is not held here, so it
    # must be refused INDEX_REBUILDING at once and NOT loaded.
    reply = _call(target, request, signed)
    codes = [f.error_code for f in reply.meta.namespaces_failed]
    if codes != ["INDEX_REBUILDING"]:
        problems.append(f"valid signed hop for a foreign partition answered {reply.meta}")

    time.sleep(3)  # snapshots are written in the background
    files_after = _index_files(target, ns_id)
    if files_after != files_before[target.name]:
        problems.append(f"target loaded indexes not placed on it: {files_after} vs {files_before}")
    assert not problems, "\n".join(problems)

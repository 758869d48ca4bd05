"""A forwarded search whose answer is large, tried with real query processes on PostgreSQL.

A query process answers messages up to 32 MiB (``MAX_MESSAGE_BYTES``,
reachstore_server/common/grpc_server.py). Sharded (docs/SHARDS.md), the member a query
reaches forwards the namespaces it does not hold to their owners over a channel of its own
(reachstore_server/query/shards/router.py ``_stub``) and relays their hits. An answer the
owner gives in full when asked directly should arrive in full through any member: the
caller asked the same tier the same question.

The namespace here holds one document of about sixty chunks whose metadata is at the
documented caps (32 keys, 1024 characters each, ``names.py``); every hit carries it, so
``top_k=100`` asks for several MiB, well under 32 MiB.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.test_shards import Tier

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

NAMESPACE = "bulky"
# What a caller of a large answer sets on its own channel (the server allows 32 MiB).
BIG = [
    ("grpc.max_receive_message_length", 32 * 1024 * 1024),
    ("grpc.max_send_message_length", 32 * 1024 * 1024),
]


def _text() -> str:
    return " ".join(f"Ledger entry {i}: item {i * 7} sold at price {i * 13}." for i in range(1100))


def _metadata() -> dict[str, str]:
    # 1024 characters of four UTF-8 bytes each: at the cap in characters.
    return {f"field_{k:02d}": "\U0001d11e" * 1024 for k in range(32)}


@pytest.fixture
def tier(tmp_path: Path, pg_database: str) -> Iterator[Tier]:
    tier = Tier(tmp_path, pg_database)
    ingest = tier.start_ingest()
    try:
        stub = ingest_grpc.IngestServiceStub(grpc.insecure_channel(ingest.address, options=BIG))
        stub.CreateNamespace(ingest_pb.CreateNamespaceRequest(name=NAMESPACE), timeout=10)
        task_id = stub.CreateDocument(
            ingest_pb.CreateDocumentRequest(
                namespace=NAMESPACE,
                document=ingest_pb.DocumentInput(
                    document_id="ledger", text=_text(), metadata=_metadata()
                ),
            ),
            timeout=30,
        ).task.task_id
        deadline = time.monotonic() + 120
        while (
            stub.GetTask(ingest_pb.GetTaskRequest(task_id=task_id), timeout=10).task.state
            != ingest_pb.TASK_STATE_COMPLETED
        ):
            assert time.monotonic() < deadline, "ingest did not finish"
            time.sleep(0.2)
    finally:
        ingest.stop()
    try:
        yield tier
    finally:
        tier.stop_all()


def _query(address: str) -> pb.QueryResponse:
    with grpc.insecure_channel(address, options=BIG) as channel:
        return pb_grpc.QueryServiceStub(channel).Query(
            pb.QueryRequest(
                namespaces=[NAMESPACE], query="ledger item price", top_k=100, timeout_ms=8000
            ),
            timeout=20,
        )


def test_a_large_answer_arrives_through_a_member_that_does_not_hold_it(tier: Tier) -> None:
    members = [tier.start_member() for _ in range(3)]
    tier.wait_serving(3)
    by_id = {member_id: address for address, (member_id, _) in tier.rows().items()}
    # Three members, two copies: exactly one member does not hold the namespace.
    deadline = time.monotonic() + 30
    while len(owners := tier.owners(members[0]).get(NAMESPACE, [])) != 2:
        assert time.monotonic() < deadline, owners
        time.sleep(0.3)
    holder = next(m for m in members if m.address == by_id[owners[0]])
    router = next(m for m in members if m.address not in {by_id[o] for o in owners})

    direct = _query(holder.address)
    assert direct.meta.coverage_ratio == 1.0, direct.meta
    assert len(direct.results) > 40, len(direct.results)
    size = direct.ByteSize()
    assert size < 32 * 1024 * 1024, size

    routed = _query(router.address)
    summary = (
        f"direct from an owner: {len(direct.results)} hits, {size} bytes; through "
        f"{router.name}: {len(routed.results)} hits, "
        f"{json_format.MessageToJson(routed.meta)[:1500]}"
    )
    assert routed.meta.coverage_ratio == 1.0, summary
    assert len(routed.results) == len(direct.results), summary
    assert [(r.document_id, r.chunk_index) for r in routed.results] == [
        (r.document_id, r.chunk_index) for r in direct.results
    ], summary

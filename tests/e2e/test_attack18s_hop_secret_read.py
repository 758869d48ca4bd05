"""The hop secret read from the members table, tried with real query processes on
PostgreSQL, API keys required and a key call rate.

docs/SHARDS.md: a member that verifies ``x-reachstore-hop`` "does not charge the caller's
call rate or audit the call a second time"; "only processes that can read the database
can sign". Each member's signing secret is a plain column of ``query_members``
(reachstore_server/storage/models.py ``hop_secret``), and the signature covers the
timestamp and the request's bytes only, not the caller's key
(reachstore_server/query/shards/membership.py ``sign``).

So anyone who can read that one table (a read-only reporting login, a replica, a backup)
and holds any API key can send calls that no member charges to the key's rate and none
audits: the key's call rate, which tests/e2e/test_fleet_limits.py holds "for the whole
deployment", does not hold for them. Here a key allowed one call now (burst 1) makes
five.
"""

from __future__ import annotations

import hashlib
import hmac
import time

import grpc
import psycopg
import pytest

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.test_attack18s_hop_clock import _key
from tests.e2e.test_shards import ALL, Tier, tier  # noqa: F401 - the fixture, reused

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _signatures(member_id: str, secret: str, body: bytes) -> list[str]:
    """Hop headers made with ``secret`` in each way a member has signed: over the stamp and
    the body, and over the member id, the stamp and the body."""
    stamp = str(int(time.time()))
    heads = [f"{stamp}\n".encode(), f"{member_id}.{stamp}\n".encode()]
    return [
        f"{member_id}.{stamp}.{hmac.new(secret.encode(), head + body, hashlib.sha256).hexdigest()}"
        for head in heads
    ]


def test_a_reader_of_the_members_table_cannot_lift_a_keys_call_rate(
    tier: Tier,  # noqa: F811
) -> None:
    tier.common.update(
        REACHSTORE_REQUIRE_KEYS="true",
        REACHSTORE_LIMIT_KEY_QUERY_RATE="0.02",
        REACHSTORE_LIMIT_KEY_QUERY_BURST="1",
    )
    control, caller = _key(tier, "read"), _key(tier, "read")
    target, other = tier.start_member(), tier.start_member()
    tier.wait_serving(2)
    stub = pb_grpc.QueryServiceStub(target.channel)
    request = pb.QueryRequest(namespaces=ALL, query="ledger item price", top_k=5)

    def call(key: str, hop: str | None) -> str:
        metadata = [("authorization", f"Bearer {key}")]
        if hop is not None:
            metadata.append(("x-reachstore-hop", hop))
        try:
            reply = stub.Query(request, timeout=15, metadata=metadata)
        except grpc.RpcError as exc:
            return str(exc.code().name)
        return f"answered {reply.meta.coverage_ratio}"

    # The limit is on: a key's second call now is refused.
    plain = [call(control, None) for _ in range(2)]
    assert plain == ["answered 1.0", "RESOURCE_EXHAUSTED"], plain

    # What a SELECT on the members table gives: every value of the member's row is tried
    # as the signing secret.
    with psycopg.connect(tier.url) as conn:
        cursor = conn.execute("SELECT * FROM query_members WHERE address = %s", (other.address,))
        row = cursor.fetchone()
        columns = [d.name for d in cursor.description or ()]
    assert row is not None
    values = dict(zip(columns, row, strict=True))
    body = request.SerializeToString(deterministic=True)
    hops = [
        hop
        for value in values.values()
        for hop in _signatures(str(values["member_id"]), str(value), body)
    ]
    signed = [call(caller, hop) for hop in hops]
    assert signed.count("answered 1.0") <= 1, (
        f"a key allowed one call now, with hops signed by a reader of query_members: {signed}"
    )

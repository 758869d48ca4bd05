"""The first searches a member forwards after it joins, tried with real query processes on
PostgreSQL, API keys required and a key call rate.

docs/SHARDS.md: a member starts ``warming`` and routes at once ("serves (routing to the
owners) while it loads", reachstore_server/query/main.py); an owner that verifies the hop
header "does not charge the caller's call rate or audit the call a second time (the first
member did both)". An owner verifies a hop against its own view of the members
(reachstore_server/query/shards/membership.py ``verify``), and that view is what its last
heartbeat read, renewed every lease/5. A member that has just joined is in no other
member's view until their next heartbeat, so its forwards are taken for callers' calls:
charged (and audited) a second time. Every rolling restart starts such members.

Here the owners renew their view every 30 s (lease 150 s); the newcomer is started right
after one owner's heartbeat, so that both owners' next heartbeats are 15 s or more away
(time for the newcomer to start and make its call on a loaded machine), and
the caller's key, allowed one query call now (burst 1), makes exactly one, through the
newcomer, of namespaces the two owners hold.
"""

from __future__ import annotations

import time

import grpc
import psycopg
import pytest
from google.protobuf import json_format

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.processes import ServiceProcess
from tests.e2e.test_attack18s_hop_clock import _key
from tests.e2e.test_shards import ALL, Tier, tier  # noqa: F401 - the fixture, reused

# Alone: the newcomer's process must start and make its call before either owner's next
# heartbeat, and beside the parallel pass that took more than 15 s.
pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.alone]

LEASE_S = 150
BEAT_S = LEASE_S / 5


def _beats(shards: Tier, ids: list[str], seconds: float) -> dict[str, float]:
    """When (time.monotonic) each member last renewed its row, watched for ``seconds``."""
    seen: dict[str, float] = {}
    last: dict[str, float] = {}
    until = time.monotonic() + seconds
    with psycopg.connect(shards.url) as conn:
        while time.monotonic() < until:
            rows = dict(
                conn.execute(
                    "SELECT member_id, heartbeat_at FROM query_members WHERE member_id = ANY(%s)",
                    (ids,),
                ).fetchall()
            )
            conn.commit()
            for member_id, beat in rows.items():
                if member_id in last and beat != last[member_id]:
                    seen[member_id] = time.monotonic()
                last[member_id] = beat
            time.sleep(0.02)
    return seen


def _start_migrated(shards: Tier) -> ServiceProcess:
    """Tier.start_member without the migrate step (done already by the first members),
    so the newcomer registers as soon as its process is up."""
    name = f"query-{next(shards._count)}"
    member = ServiceProcess(
        "reachstore_server.query.main",
        "reachstore.query.v1.QueryService",
        shards.tmp_path,
        name,
        {**shards.common, "REACHSTORE_DATA_DIR": str(shards.tmp_path / name)},
    )
    member._env["REACHSTORE_QUERY_ADVERTISE"] = member.address
    shards.members[name] = member
    member.start(migrate=False)
    return member


def test_one_call_within_the_key_rate_through_a_member_that_just_joined(
    tier: Tier,  # noqa: F811
) -> None:
    tier.common.update(
        REACHSTORE_QUERY_MEMBER_LEASE_S=str(LEASE_S),
        REACHSTORE_REQUIRE_KEYS="true",
        REACHSTORE_LIMIT_KEY_QUERY_RATE="0.02",
        REACHSTORE_LIMIT_KEY_QUERY_BURST="1",
    )
    looker = _key(tier, "read,operator")
    caller = _key(tier, "read")
    owners = [tier.start_member(), tier.start_member()]
    tier.wait_serving(2)
    ids = {m.address: tier.rows()[m.address][0] for m in owners}
    deadline = time.monotonic() + BEAT_S * 3
    while True:  # both see both serving: every namespace on both
        views = [tier.owners(m, looker) for m in owners]
        if all(len(o) == 2 for v in views for o in v.values()) and len(views[0]) == len(ALL):
            break
        assert time.monotonic() < deadline, views
        time.sleep(0.3)

    # Each owner's beat times; pick the next beat after which the other owner's next
    # beat is at least BEAT_S / 2 away, and start the newcomer right then.
    beats = _beats(tier, list(ids.values()), BEAT_S + 1)
    assert len(beats) == 2, beats
    (a, ta), (b, tb) = beats.items()
    offset = (tb - ta) % BEAT_S  # b beats this long after a
    # Started just after a's beat, the newcomer has until b's, ``offset`` later; just after
    # b's, until a's, ``BEAT_S - offset`` later: take the longer.
    start_at = ta if offset >= BEAT_S / 2 else tb
    while start_at < time.monotonic():
        start_at += BEAT_S
    time.sleep(start_at - time.monotonic() + 0.05)
    newcomer = _start_migrated(tier)
    newcomer_id = tier.rows()[newcomer.address][0]

    try:
        reply = pb_grpc.QueryServiceStub(newcomer.channel).Query(
            pb.QueryRequest(namespaces=ALL, query="ledger item price", top_k=20),
            timeout=15,
            metadata=[("authorization", f"Bearer {caller}")],
        )
    except grpc.RpcError as exc:
        pytest.fail(f"the key's one call was refused: {exc.code()} {exc.details()}")
    after = time.monotonic() - start_at
    # The window this test is about: neither owner's view had the newcomer yet.
    for member in owners:
        view = pb_grpc.QueryServiceStub(member.channel).ListNamespaceHealth(
            pb.ListNamespaceHealthRequest(page_size=100),
            timeout=10,
            metadata=[("authorization", f"Bearer {looker}")],
        )
        named = {i for n in view.namespaces for i in (*n.owners, *n.warming_owners)}
        assert newcomer_id not in named, (
            f"{member.name} already saw the newcomer, {after:.1f} s after it started: harness"
        )

    summary = (
        f"one call of a key allowed one, through a member {after:.1f} s after it joined: "
        f"{json_format.MessageToJson(reply.meta)[:1500]}"
    )
    assert reply.meta.coverage_ratio == 1.0, summary
    assert {r.namespace for r in reply.results} == set(ALL), summary

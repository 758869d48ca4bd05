"""Member lease values the configuration accepts, tried with real query processes on
PostgreSQL.

reachstore_server/common/config.py takes ``REACHSTORE_QUERY_MEMBER_LEASE_S`` as any number
of seconds above 0. docs/SHARDS.md: a member renews its row five times per lease, and "a
row older than the lease is a member that died, and the next heartbeat of any member
deletes it". With a lease shorter than a heartbeat's own round trip to the database, every
member's heartbeat deletes the rows of the others, which are alive: the placement every
member computes flaps between "I am alone" and the real tier. A value that cannot work
should be refused at start with an error naming the variable, as 0 is.
"""

from __future__ import annotations

import time

import pytest

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.processes import ServiceProcess
from tests.e2e.test_shards import ALL, Tier, tier  # noqa: F401 - the fixture, reused

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


@pytest.mark.parametrize("lease", ["0.001", "0.01"])
def test_a_lease_shorter_than_a_heartbeat_is_refused_or_keeps_the_tier_whole(
    tier: Tier,  # noqa: F811
    lease: str,
) -> None:
    tier.common["REACHSTORE_QUERY_MEMBER_LEASE_S"] = lease
    members: list[ServiceProcess] = []
    try:
        for _ in range(3):
            members.append(tier.start_member())
    except RuntimeError as exc:
        # Refused at start: fine if it says which setting is wrong.
        assert "REACHSTORE_QUERY_MEMBER_LEASE_S" in str(exc), exc
        return
    time.sleep(3)
    samples = []
    for _ in range(40):
        for member in members:
            reply = pb_grpc.QueryServiceStub(member.channel).ListNamespaceHealth(
                pb.ListNamespaceHealthRequest(page_size=100), timeout=10
            )
            samples.append((member.name, sorted(len(n.owners) for n in reply.namespaces)))
        time.sleep(0.2)
    # Three live members, two copies: every view places every namespace on two members.
    bad = [s for s in samples if s[1] != [2] * len(ALL)]
    assert not bad, (
        f"lease {lease} s accepted; views of three live members, owners per namespace: "
        f"{bad[:6]} ({len(bad)} of {len(samples)} samples wrong)"
    )

"""Whether ListNamespaceHealth shows namespaces missing because their shard is down, tried
with real query processes on PostgreSQL (the Tier of tests/e2e/test_shards.py).

ListNamespaceHealth reports, per namespace, "how often they were missing from this
replica's recent answers" (reachstore_server/query/api/namespace_health.py; ``queries``,
``missing``, ``missing_by`` in protos/reachstore/query/v1/query_service.proto), and
docs/SHARDS.md lists it first under "Seeing it". With shards, the member a caller reaches
answers for namespaces other members searched: when their owners are all down, those
answers miss them with ``SHARD_UNAVAILABLE``. That is exactly what the health view is for.
"""

from __future__ import annotations

import pytest

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.test_shards import ALL, Tier, query, tier  # noqa: F401 - the fixture, reused

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ROUNDS = 5


def test_namespaces_missing_for_a_downed_shard_show_in_the_health_view(
    tier: Tier,  # noqa: F811
) -> None:
    members = [tier.start_member() for _ in range(4)]
    tier.wait_serving(4)
    by_id = {member_id: address for address, (member_id, _) in tier.rows().items()}
    owners = tier.owners(members[0])
    pair = owners[ALL[0]]
    doomed = sorted(n for n, o in owners.items() if set(o) == set(pair))
    victims = [m for m in members if m.address in {by_id[i] for i in pair}]
    survivor = next(m for m in members if m not in victims)
    for victim in victims:
        victim.kill()

    missed = 0
    for _ in range(ROUNDS):
        reply = query(survivor)
        failed = {f.namespace: f.error_code for f in reply.meta.namespaces_failed}
        assert set(failed) == set(doomed), failed
        assert set(failed.values()) == {"SHARD_UNAVAILABLE"}, failed
        missed += 1

    health = pb_grpc.QueryServiceStub(survivor.channel).ListNamespaceHealth(
        pb.ListNamespaceHealthRequest(page_size=100), timeout=10
    )
    seen = {
        n.name: (n.queries, n.missing, [(m.error_code, m.count) for m in n.missing_by])
        for n in health.namespaces
    }
    summary = f"{missed} answers of {survivor.name} missed {doomed}; its health view: " + str(
        {n: seen[n] for n in doomed}
    )
    for name in doomed:
        queries, missing, by = seen[name]
        assert queries >= missed and missing >= missed, summary
        assert ("SHARD_UNAVAILABLE", missing) in by, summary

"""One slow namespace among the namespaces a member forwards to the same owner, tried with
real query processes on PostgreSQL.

reachstore_server/query/api/servicer.py: "A query searches each namespace under its own
time budget ... A namespace that fails becomes one PartialFailure; the rest are
returned." docs/SHARDS.md: the router sends "one call per owner for all the namespaces
that owner is asked", "the deadline of the forwarded call is what is left of the
caller's budget; an owner too slow gives the usual NAMESPACE_TIMEOUT", and merges what
comes back "as a single-process query merges namespaces".

The owner's answer to that one call waits for its slowest namespace to use up its budget,
which starts after the owner's own preparation (the question's embedding): later than the
router's deadline for the call. The namespaces that answered at once on the owner are then
lost with the slow one. The slowness comes from the fault knob
``REACHSTORE_FAULT_NAMESPACE_DELAY_MS`` (every search of that namespace waits first), set
on every process alike; an unsharded query process on the same database is the reference.
"""

from __future__ import annotations

import pytest

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.processes import ServiceProcess
from tests.e2e.test_shards import ALL, Tier, tier  # noqa: F401 - the fixture, reused

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

SLOW = ALL[0]
BUDGET_MS = 1500


def _ask(member: ServiceProcess) -> pb.QueryResponse:
    return pb_grpc.QueryServiceStub(member.channel).Query(
        pb.QueryRequest(namespaces=ALL, query="ledger item price", top_k=20, timeout_ms=BUDGET_MS),
        timeout=15,
    )


def test_a_slow_namespace_fails_alone_through_a_member_that_does_not_hold_it(
    tier: Tier,  # noqa: F811
) -> None:
    tier.common["REACHSTORE_FAULT_NAMESPACE_DELAY_MS"] = f"{SLOW}=20000"
    members = [tier.start_member() for _ in range(2)]
    # The test needs a neighbour: another namespace owned by the slow one's two owners
    # (none, about once in 90 placements).
    members.append(
        tier.start_placed(
            lambda _, owners: any(
                set(o) == set(owners[SLOW]) for n, o in owners.items() if n != SLOW
            )
        )[0]
    )
    reference = ServiceProcess(
        "reachstore_server.query.main",
        "reachstore.query.v1.QueryService",
        tier.tmp_path,
        "unsharded",
        {**tier.common, "REACHSTORE_DATA_DIR": str(tier.tmp_path / "unsharded")},
    ).start()
    tier.members["unsharded"] = reference
    ids = {address: member_id for address, (member_id, _) in tier.rows().items()}
    owners = tier.owners(members[0])
    router = next(m for m in members if ids[m.address] not in owners[SLOW])
    # Its neighbours: the namespaces the router does not hold and the slow one's owners do.
    neighbours = sorted(n for n, o in owners.items() if n != SLOW and set(o) == set(owners[SLOW]))
    assert neighbours, owners

    _ask(reference)  # every index loaded
    expected = _ask(reference)
    assert [f.namespace for f in expected.meta.namespaces_failed] == [SLOW], expected.meta
    assert set(expected.meta.namespaces_succeeded) == set(ALL) - {SLOW}

    for _ in range(3):
        reply = _ask(router)
        failed = sorted(f.namespace for f in reply.meta.namespaces_failed)
        codes = sorted({f.error_code for f in reply.meta.namespaces_failed})
        assert failed == [SLOW], (
            f"through {router.name} (not an owner of {SLOW}), neighbours {neighbours}: "
            f"failed {failed} {codes}; the unsharded process failed only {SLOW}"
        )

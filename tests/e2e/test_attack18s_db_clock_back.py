"""Members that died just before the database's clock stepped back, tried with real query
processes on a PostgreSQL server of the test's own.

docs/SHARDS.md: membership is judged on the database's clock ("it gives 'is it alive' by
the same clock for everyone"); "a row older than the lease is a member that died, and the
next heartbeat of any member deletes it"; a namespace whose owners are all down fails as
SHARD_UNAVAILABLE with a retry hint, and "a member whose lease runs out leaves the
placement, the namespace is placed on live members, and they load it; the retry advised
covers that (one lease, 5 s by default, plus the load)".

``heartbeat_at`` is wall-clock seconds of the database host
(reachstore_server/storage/clock.py ``pg_clock``: ``clock_timestamp()``). When that clock
steps back (an NTP step after it ran fast, a VM restored), the last heartbeat of a member
that has just died lies in the database's future, and it is judged alive until the clock
catches up again. The server here runs under libfaketime with an offset read from a file,
as tests/e2e/test_redteam_db_clock_step.py does; the step is ten minutes back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.test_redteam_db_clock_step import SteppedPostgres
from tests.e2e.test_shards import ALL, LEASE_S, Tier, query, tier  # noqa: F401 - reused

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


@pytest.fixture
def stepped() -> Iterator[SteppedPostgres]:
    server = SteppedPostgres()
    server.init()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def pg_database(stepped: SteppedPostgres) -> str:
    """The database the Tier fixture of tests/e2e/test_shards.py runs on: on the server
    whose clock this test moves."""
    return stepped.create_database("shards")


@pytest.mark.parametrize("step", ["+0", "-600s"], ids=["clock-steady", "clock-10-min-back"])
def test_owners_that_died_before_a_clock_step_back_leave_the_placement(
    tier: Tier,  # noqa: F811
    stepped: SteppedPostgres,
    step: str,
) -> None:
    """``+0`` is the control: the same deaths with the database's clock left alone."""
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
    stepped.step(step)  # the database host's clock is corrected (ten minutes back)

    # Within a few leases the dead owners leave, the namespaces are placed on the two
    # live members, which load them, and answers are whole again.
    started = time.monotonic()
    limit = LEASE_S * 6
    while True:
        reply = query(survivor)
        failed = sorted(f.namespace for f in reply.meta.namespaces_failed)
        if reply.meta.coverage_ratio == 1.0:
            break
        if time.monotonic() - started > limit:
            listed = {member_id for member_id, _ in tier.rows().values()}
            pytest.fail(
                f"{time.monotonic() - started:.0f} s after both owners of {doomed} died "
                f"(lease {LEASE_S} s), answers still miss {failed} "
                f"({[f.error_code for f in reply.meta.namespaces_failed][:1]}); members "
                f"table still lists the dead: "
                f"{sorted(set(pair) & listed)}"
            )
        time.sleep(0.5)

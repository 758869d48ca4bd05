"""The signed hop of a forwarded search against a member whose wall clock is off, tried
with real query processes on PostgreSQL, API keys required and a key call rate.

docs/SHARDS.md: membership is judged by the database's clock, "the same clock for
everyone", so a member whose host clock is off is still a live member and is still
placed. Its forwarded searches are signed with a timestamp of its own wall clock
(reachstore_server/query/shards/membership.py ``sign``), and an owner refuses a stamp more
than 60 s from its own clock (``HOP_SKEW_S``): the owner then takes the forward for a
caller's call, "routed, charged and audited like any other". The caller's one call is
charged twice, and the second charge can fail.

Here the member the caller reaches runs 90 s ahead (libfaketime, as tests/faults/cluster.py
runs a skewed worker); the caller's key may make one query call now (burst 1) and makes
exactly one. Every guarantee says that one call is answered: it is within the key's rate,
and all owners of its namespaces are up.
"""

from __future__ import annotations

import glob
import subprocess
import sys

import grpc
import pytest
from google.protobuf import json_format

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.processes import ROOT, ServiceProcess
from tests.e2e.test_shards import Tier, tier  # noqa: F401 - the fixture, reused

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

SKEW_S = 90
LIBFAKETIME = "/usr/$LIB/faketime/libfaketimeMT.so.1"


def _key(shards: Tier, scopes: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "reachstore_server.cli", "keys", "create"]
        + ["--data-dir", str(shards.tmp_path / "cli"), "--tenant", "default", "--scopes", scopes],
        cwd=ROOT,
        env={**ServiceProcess.base_env(), **shards.common},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1].rsplit(" ", 1)[-1]


@pytest.mark.parametrize("skew_s", [0, SKEW_S], ids=["clocks-agree", "clock-90s-ahead"])
def test_one_call_within_the_key_rate_through_a_member_whose_clock_is_off(
    tier: Tier,  # noqa: F811
    skew_s: int,
) -> None:
    """With ``skew_s`` 0 the same call is the control: the owners verify the hop and do
    not charge the key a second time."""
    if skew_s and not glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"):
        pytest.fail("libfaketime is required (`make faults-install` installs it)")
    tier.common.update(
        REACHSTORE_REQUIRE_KEYS="true",
        # One query call now, then one per 50 s, for each key.
        REACHSTORE_LIMIT_KEY_QUERY_RATE="0.02",
        REACHSTORE_LIMIT_KEY_QUERY_BURST="1",
    )
    looker = _key(tier, "read,operator")  # for ListNamespaceHealth: a key (and bucket) of its own
    caller = _key(tier, "read")
    for _ in range(2):
        tier.start_member()
    plain = dict(tier.common)
    if skew_s:
        tier.common.update(
            LD_PRELOAD=LIBFAKETIME,
            FAKETIME=f"+{skew_s}s",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
        )
    skewed, owners = tier.start_placed(
        lambda me, owners: any(me not in o for o in owners.values()), looker
    )
    tier.common.clear()
    tier.common.update(plain)
    skewed_id = tier.rows()[skewed.address][0]
    elsewhere = sorted(n for n, o in owners.items() if skewed_id not in o)

    try:
        reply = pb_grpc.QueryServiceStub(skewed.channel).Query(
            pb.QueryRequest(namespaces=elsewhere, query="ledger item price", top_k=20),
            timeout=15,
            metadata=[("authorization", f"Bearer {caller}")],
        )
    except grpc.RpcError as exc:
        pytest.fail(f"the key's one call was refused: {exc.code()} {exc.details()}")
    summary = (
        f"one call of a key allowed one, through a member {skew_s} s ahead, namespaces held "
        f"by the other two: {json_format.MessageToJson(reply.meta)[:2000]}"
    )
    assert reply.meta.coverage_ratio == 1.0, summary
    assert {r.namespace for r in reply.results} == set(elsewhere), summary

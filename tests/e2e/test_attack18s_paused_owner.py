"""An owner that is paused (SIGSTOP: a stalled VM, a long GC, a debugger) rather than
killed, tried with real query processes on PostgreSQL (the Tier of tests/e2e/test_shards.py).

docs/SHARDS.md: a query is routed to one live replica of each namespace's owners; an owner
that cannot be reached is passed over for the namespace's next owner; a namespace none of
whose owners answered is one ``SHARD_UNAVAILABLE`` failure (transient, ``retry_after_ms``,
``structured_data.reason == "shard_unavailable"``, ``owners_tried``).

A paused process still has its socket open, so a call to it neither connects nor is
refused: it just never answers. The lease here is long enough (15 s) for the paused member
to stay in every view while the queries run, as it would for the first seconds of any
pause with the default lease.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from google.protobuf import json_format

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.processes import ServiceProcess
from tests.e2e.test_shards import Tier, tier  # noqa: F401 - the fixture, reused

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

LEASE_S = 15


def _settled(
    shards: Tier, members: list[ServiceProcess], timeout: float = 60
) -> dict[str, list[str]]:
    """Waits until every member's view places every namespace on the same two owners."""
    deadline = time.monotonic() + timeout
    while True:
        views = [shards.owners(m) for m in members]
        if all(v == views[0] for v in views) and all(len(o) == 2 for o in views[0].values()):
            return views[0]
        assert time.monotonic() < deadline, f"views never agreed: {views}"
        time.sleep(0.3)


@pytest.fixture
def three(tier: Tier) -> Iterator[tuple[Tier, list[ServiceProcess], dict[str, list[str]]]]:  # noqa: F811
    tier.common["REACHSTORE_QUERY_MEMBER_LEASE_S"] = str(LEASE_S)
    members = [tier.start_member() for _ in range(3)]
    tier.wait_serving(3)
    owners = _settled(tier, members)
    try:
        yield tier, members, owners
    finally:
        # A stopped process does not act on SIGTERM: let it run again before the cleanup.
        for member in members:
            if member.process is not None and member.process.poll() is None:
                os.kill(member.process.pid, signal.SIGCONT)


def _ask(
    router: ServiceProcess, names: list[str], timeout_ms: int = 2000
) -> tuple[pb.QueryResponse, float]:
    started = time.monotonic()
    reply = pb_grpc.QueryServiceStub(router.channel).Query(
        pb.QueryRequest(
            namespaces=names, query="ledger item price", top_k=20, timeout_ms=timeout_ms
        ),
        timeout=timeout_ms / 1000 + 10,
    )
    return reply, time.monotonic() - started


def _pair_and_router(
    shards: Tier, members: list[ServiceProcess], owners: dict[str, list[str]]
) -> tuple[list[ServiceProcess], ServiceProcess, list[str]]:
    """Two members that together own some namespaces, the third member (which owns none
    of those), and those namespaces."""
    by_id = {member_id: address for address, (member_id, _) in shards.rows().items()}
    pairs: dict[frozenset[str], list[str]] = {}
    for name, o in owners.items():
        pairs.setdefault(frozenset(o), []).append(name)
    pair, names = max(pairs.items(), key=lambda item: len(item[1]))
    addresses = {by_id[i] for i in pair}
    owning = [m for m in members if m.address in addresses]
    router = next(m for m in members if m.address not in addresses)
    return owning, router, sorted(names)


def test_one_paused_owner_fails_over_to_the_live_replica(
    three: tuple[Tier, list[ServiceProcess], dict[str, list[str]]],
) -> None:
    """One owner of a namespace paused, the other alive and idle: each query through a
    third member should be answered by the live replica (the guarantee of R=2). Each
    namespace's searches rotate over its owners (servicer.py ``_route``), so of
    four queries about half ask the paused one first."""
    shards, members, owners = three
    owning, router, names = _pair_and_router(shards, members, owners)
    paused = owning[0]
    assert paused.process is not None
    os.kill(paused.process.pid, signal.SIGSTOP)
    replies = []
    for _ in range(4):
        reply, elapsed = _ask(router, names)
        replies.append(
            (
                round(elapsed, 2),
                reply.meta.coverage_ratio,
                [(f.namespace, f.error_code) for f in reply.meta.namespaces_failed],
            )
        )
    summary = f"owners {names} paused {paused.name}: {replies}"
    assert all(coverage == 1.0 for _, coverage, _ in replies), summary
    assert all(not failed for _, _, failed in replies), summary


def test_all_owners_paused_is_a_named_shard_unavailable(
    three: tuple[Tier, list[ServiceProcess], dict[str, list[str]]],
) -> None:
    """Both owners of a namespace paused: no owner can answer. The namespace should be the
    failure docs/SHARDS.md names for that, ``SHARD_UNAVAILABLE`` with the owners tried,
    transient with a retry hint; the other namespaces answer."""
    shards, members, owners = three
    owning, router, names = _pair_and_router(shards, members, owners)
    by_address = {address: member_id for address, (member_id, _) in shards.rows().items()}
    for member in owning:
        assert member.process is not None
        os.kill(member.process.pid, signal.SIGSTOP)
    reply, elapsed = _ask(router, names)
    failed = {f.namespace: f for f in reply.meta.namespaces_failed}
    assert set(failed) == set(names), reply.meta
    for failure in failed.values():
        data = json_format.MessageToDict(failure.structured_data)
        summary = f"after {elapsed:.2f}s: {json_format.MessageToJson(failure)}"
        assert failure.category == pf_pb2.CATEGORY_TRANSIENT, summary
        assert failure.retryable and failure.retry_after_ms > 0, summary
        assert failure.error_code == "SHARD_UNAVAILABLE", summary
        assert data.get("reason") == "shard_unavailable", summary
        assert set(data.get("owners_tried", [])) == {by_address[m.address] for m in owning}, summary

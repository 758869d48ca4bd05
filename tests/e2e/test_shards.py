"""Namespaces sharded over query processes (docs/SHARDS.md), tried with real processes on
PostgreSQL: four members and twelve namespaces, each namespace held by two. Killing one
member under load loses no answer; killing both owners of a namespace fails that namespace
alone, transiently, with the reason named; a fifth member joining moves namespaces without
an answer going missing; and a caller cannot forge the header members sign their
forwarded searches with."""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import psycopg
import pytest
from google.protobuf import json_format

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.processes import ServiceProcess

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

NAMESPACES = [f"shelf-{i:02d}" for i in range(12)]
LEASE_S = 3
ALL = list(NAMESPACES)


def _text(namespace: str) -> str:
    return f"The {namespace} ledger lists item {namespace} and its price."


class Tier:
    """The query members of one test, by name, on one PostgreSQL database."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.tmp_path = tmp_path
        self.common = {
            "REACHSTORE_DATABASE_URL": url,
            "REACHSTORE_PII_SECRET": "shard-tests-pii-secret",
            "REACHSTORE_QUERY_MEMBER_LEASE_S": str(LEASE_S),
            "REACHSTORE_QUERY_HOP_SECRET": "shard-tests-hop-secret-of-32-chars!",
        }
        self.url = url.replace("postgresql+psycopg://", "postgresql://")
        self.members: dict[str, ServiceProcess] = {}
        self._count = itertools.count()

    def start_member(self, address: str | None = None) -> ServiceProcess:
        name = f"query-{next(self._count)}"
        member = ServiceProcess(
            "reachstore_server.query.main",
            "reachstore.query.v1.QueryService",
            self.tmp_path,
            name,
            {**self.common, "REACHSTORE_DATA_DIR": str(self.tmp_path / name)},
            address=address,
        )
        member._env["REACHSTORE_QUERY_ADVERTISE"] = member.address
        member.start()
        self.members[name] = member
        return member

    def rows(self) -> dict[str, tuple[str, str]]:
        """member address -> (member id, state), read with SQL from the members table."""
        with psycopg.connect(self.url) as conn:
            rows = conn.execute("SELECT address, member_id, state FROM query_members").fetchall()
        return {address: (member_id, state) for address, member_id, state in rows}

    def wait_serving(self, count: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = [state for _, state in self.rows().values()]
            if states.count("serving") == count and len(states) == count:
                time.sleep(LEASE_S / 5 * 2)  # every member's view has seen the last change
                return
            assert time.monotonic() < deadline, f"members never settled: {self.rows()}"
            time.sleep(0.2)

    def live(self) -> list[ServiceProcess]:
        return [
            m for m in self.members.values() if m.process is not None and m.process.poll() is None
        ]

    def owners(self, via: ServiceProcess, key: str = "") -> dict[str, list[str]]:
        reply = pb_grpc.QueryServiceStub(via.channel).ListNamespaceHealth(
            pb.ListNamespaceHealthRequest(page_size=100),
            timeout=10,
            metadata=[("authorization", f"Bearer {key}")] if key else None,
        )
        return {n.name: list(n.owners) for n in reply.namespaces}

    def agreed_owners(self, key: str = "", timeout: float = 30) -> dict[str, list[str]]:
        """The owners of each namespace once every live member's view agrees and names two."""
        deadline = time.monotonic() + timeout
        while True:
            views = [self.owners(m, key) for m in self.live()]
            if all(v == views[0] for v in views) and all(len(o) == 2 for o in views[0].values()):
                return views[0]
            assert time.monotonic() < deadline, views
            time.sleep(0.3)

    def start_placed(
        self, wanted: Callable[[str, dict[str, list[str]]], bool], key: str = ""
    ) -> tuple[ServiceProcess, dict[str, list[str]]]:
        """One more member, and the owners, such that ``wanted(its id, owners)``.

        A member's id is random, and so is the placement it gets: one of three members
        owns all twelve namespaces about once in 130 starts (2/3 each). A test that needs
        a namespace the member does not own would then have none, so a member whose
        placement is not wanted leaves and another, with a new id, takes its place."""
        for _ in range(5):
            member = self.start_member()
            self.wait_serving(len(self.live()))
            owners = self.agreed_owners(key)
            if wanted(self.rows()[member.address][0], owners):
                return member, owners
            member.stop()
        raise AssertionError(f"five members in a row were placed as not wanted: {owners}")

    def start_ingest(self) -> ServiceProcess:
        """An ingest service on the members' database."""
        return ServiceProcess(
            "reachstore_server.ingest.main",
            "reachstore.ingest.v1.IngestService",
            self.tmp_path,
            "ingest",
            {**self.common, "REACHSTORE_DATA_DIR": str(self.tmp_path / "ingest")},
        ).start()

    def stop_all(self) -> None:
        for member in self.members.values():
            member.stop()


def query(member: ServiceProcess, namespaces: list[str] = ALL) -> pb.QueryResponse:
    stub = pb_grpc.QueryServiceStub(member.channel)
    return stub.Query(
        pb.QueryRequest(
            namespaces=namespaces, query="ledger item price", top_k=20, timeout_ms=3000
        ),
        timeout=10,
    )


@pytest.fixture
def tier(tmp_path: Path, pg_database: str) -> Iterator[Tier]:
    tier = Tier(tmp_path, pg_database)
    ingest = tier.start_ingest()
    try:
        stub = ingest_grpc.IngestServiceStub(ingest.channel)
        tasks = []
        for name in NAMESPACES:
            stub.CreateNamespace(ingest_pb.CreateNamespaceRequest(name=name), timeout=10)
            tasks.append(
                stub.CreateDocument(
                    ingest_pb.CreateDocumentRequest(
                        namespace=name,
                        document=ingest_pb.DocumentInput(document_id="ledger", text=_text(name)),
                    ),
                    timeout=10,
                ).task.task_id
            )
        deadline = time.monotonic() + 120
        for task_id in tasks:
            while (
                stub.GetTask(ingest_pb.GetTaskRequest(task_id=task_id), timeout=10).task.state
                != ingest_pb.TASK_STATE_COMPLETED
            ):
                assert time.monotonic() < deadline, "ingest did not finish"
                time.sleep(0.1)
    finally:
        ingest.stop()
    try:
        yield tier
    finally:
        tier.stop_all()


def _ready(member: ServiceProcess) -> set[str]:
    """The namespaces whose index the member holds ready (ListNamespaceHealth)."""
    reply = pb_grpc.QueryServiceStub(member.channel).ListNamespaceHealth(
        pb.ListNamespaceHealthRequest(page_size=100), timeout=10
    )
    return {n.name for n in reply.namespaces if n.index_state == "ready"}


def _complete(reply: pb.QueryResponse) -> bool:
    return reply.meta.coverage_ratio == 1.0 and {r.namespace for r in reply.results} == set(ALL)


class Load:
    """Clients querying every namespace through every live member, round robin, as a
    load balancer in front of the tier would send them; a member that is down is the
    balancer's to skip, so a call refused for want of a process is tried on the next."""

    def __init__(self, tier: Tier, clients: int = 3) -> None:
        self.tier = tier
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.missing: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(clients)]

    def _run(self) -> None:
        turn = 0
        while not self._stop.is_set():
            live = self.tier.live()
            turn += 1
            member = live[turn % len(live)]
            try:
                reply = query(member)
            except (grpc.RpcError, AttributeError):
                self.outcomes["balancer skipped a process going down"] += 1
                continue
            if _complete(reply):
                self.outcomes["complete"] += 1
            else:
                self.outcomes["missing"] += 1
                self.missing.append(json_format.MessageToJson(reply.meta))

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


def test_four_members_hold_two_copies_and_survive_a_kill_and_a_join(tier: Tier) -> None:
    for _ in range(4):
        tier.start_member()
    tier.wait_serving(4)
    members = list(tier.members.values())
    ids = {address: member_id for address, (member_id, _) in tier.rows().items()}

    # Every member answers for all twelve; each namespace has two owners, and a member
    # holds only the indexes placed on it.
    for member in members:
        assert _complete(query(member)), query(member).meta
    owners = tier.owners(members[0])
    assert all(len(o) == 2 and len(set(o)) == 2 for o in owners.values()), owners
    held = collections.Counter(owner for o in owners.values() for owner in o)
    assert sum(held.values()) == 24
    # Each holds only the indexes placed on it, once the first ones (which held every
    # namespace while they were alone) have dropped the rest, three leases after the move.
    for member in members:
        mine = {n for n, o in owners.items() if ids[member.address] in o}
        deadline = time.monotonic() + LEASE_S * 6
        while (ready := _ready(member)) != mine:
            assert time.monotonic() < deadline, (member.name, ready, mine)
            time.sleep(0.3)

    # Killed under load: every answer stays whole, the other owner answers.
    with Load(tier) as load:
        time.sleep(1.5)
        members[1].kill()
        time.sleep(LEASE_S * 2.5)
    summary = f"kill of one of four: {dict(load.outcomes)}"
    assert load.outcomes["complete"] > 20, summary
    assert load.outcomes["missing"] == 0, (summary, load.missing[:3])
    tier.wait_serving(3)

    # A fifth member joins under load: it warms before it serves, nothing goes missing.
    with Load(tier) as load:
        time.sleep(1.0)
        fifth = tier.start_member()
        tier.wait_serving(4)
        time.sleep(1.0)
    summary = f"a member joining: {dict(load.outcomes)}"
    assert load.outcomes["missing"] == 0, (summary, load.missing[:3])
    moved = tier.owners(fifth)
    fifth_id = tier.rows()[fifth.address][0]
    assert any(fifth_id in o for o in moved.values()), moved
    assert all(len(o) == 2 for o in moved.values()), moved


def test_both_owners_down_fails_that_namespace_alone_until_one_returns(tier: Tier) -> None:
    for _ in range(4):
        tier.start_member()
    tier.wait_serving(4)
    members = list(tier.members.values())
    by_id = {member_id: address for address, (member_id, _) in tier.rows().items()}
    owners = tier.owners(members[0])
    # A pair of members that together own at least one namespace.
    pair = owners[NAMESPACES[0]]
    doomed = {n for n, o in owners.items() if set(o) == set(pair)}
    victims = [m for m in members if m.address in {by_id[i] for i in pair}]
    survivor = next(m for m in members if m not in victims)
    for victim in victims:
        victim.kill()

    reply = query(survivor)
    failed = {f.namespace: f for f in reply.meta.namespaces_failed}
    assert set(failed) == doomed, (failed.keys(), doomed)
    assert {r.namespace for r in reply.results} == set(ALL) - doomed
    for failure in failed.values():
        data = json_format.MessageToDict(failure.structured_data)
        assert failure.error_code == "SHARD_UNAVAILABLE"
        assert failure.retryable and failure.retry_after_ms > 0
        assert failure.category == pf_pb2.CATEGORY_TRANSIENT, failure
        assert data["reason"] == "shard_unavailable"
        assert set(data["owners_tried"]) == set(pair)

    # An owner comes back (a new process where one was): the namespace answers again.
    tier.start_member(address=victims[0].address)
    deadline = time.monotonic() + 60
    while not _complete(reply := query(survivor)):
        assert time.monotonic() < deadline, reply.meta
        time.sleep(0.3)


def test_a_forged_hop_header_is_routed_and_charged_as_any_call(tier: Tier) -> None:
    """The header members sign their forwarded searches with, forged by a caller: the call
    is still routed to the owners (had the member taken it for a forwarded search, it would
    have searched, and so loaded, indexes not placed on it) and answers in full."""
    for _ in range(2):
        tier.start_member()
    third, owners = tier.start_placed(lambda me, owners: any(me not in o for o in owners.values()))
    third_id = tier.rows()[third.address][0]
    not_mine = [n for n, o in owners.items() if third_id not in o]
    stub = pb_grpc.QueryServiceStub(third.channel)
    request = pb.QueryRequest(namespaces=not_mine, query="ledger item price", top_k=20)
    for forged in (
        f"{third_id}.{int(time.time())}.{'0' * 64}",
        "someone.1.abc",
        "",
    ):
        reply = stub.Query(request, timeout=10, metadata=[("x-reachstore-hop", forged)])
        assert reply.meta.coverage_ratio == 1.0, (forged, reply.meta)
        assert {r.namespace for r in reply.results} == set(not_mine)
    assert not _ready(third) & set(not_mine), _ready(third)

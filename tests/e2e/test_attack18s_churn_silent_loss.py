"""Churn of query members while documents are written and read, tried with real processes
on PostgreSQL, looking for one thing: an answer that says a namespace was searched
(``namespaces_succeeded``) but lacks a document whose ingest had completed before the
query was sent.

docs/SHARDS.md and the issue it answers: "no sequence of processes coming and going makes
a query lose results without a failure row naming what is missing". A failure row
(SHARD_UNAVAILABLE, NAMESPACE_TIMEOUT, INDEX_REBUILDING, ...) is allowed; silence is not.

The churn, over about forty seconds: a member killed and restarted at its address with its
own data directory (its snapshots); a member paused (SIGSTOP) past its lease and resumed;
two members stopped at once; a member joining; a member killed and replaced by a new
one at its address with an empty data directory. Meanwhile a writer adds documents to
every namespace and readers query single namespaces (top_k above the documents each holds,
so every document must come back) through every member that is running.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from tests.e2e.processes import ServiceProcess
from tests.e2e.test_shards import ALL, LEASE_S, Tier, tier  # noqa: F401 - the fixture, reused

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


class Written:
    """Documents whose ingest completed, with when (time.monotonic)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.docs: dict[str, list[tuple[str, float]]] = {n: [("ledger", 0.0)] for n in ALL}

    def add(self, namespace: str, document_id: str) -> None:
        with self.lock:
            self.docs[namespace].append((document_id, time.monotonic()))

    def before(self, namespace: str, moment: float) -> set[str]:
        with self.lock:
            return {d for d, at in self.docs[namespace] if at < moment}


@pytest.fixture
def ingest(tier: Tier) -> Iterator[ServiceProcess]:  # noqa: F811
    process = ServiceProcess(
        "reachstore_server.ingest.main",
        "reachstore.ingest.v1.IngestService",
        tier.tmp_path,
        "ingest-live",
        {**tier.common, "REACHSTORE_DATA_DIR": str(tier.tmp_path / "ingest-live")},
    ).start()
    try:
        yield process
    finally:
        process.stop()


def _restart_at(shards: Tier, old: ServiceProcess, keep_data: bool) -> ServiceProcess:
    """A new process at ``old``'s address, with ``old``'s data directory or a fresh one."""
    name = old.name if keep_data else f"{old.name}-fresh{int(time.monotonic() * 1000)}"
    member = ServiceProcess(
        "reachstore_server.query.main",
        "reachstore.query.v1.QueryService",
        shards.tmp_path,
        name,
        {**shards.common, "REACHSTORE_DATA_DIR": str(shards.tmp_path / name)},
        address=old.address,
    )
    member._env["REACHSTORE_QUERY_ADVERTISE"] = member.address
    member.start(migrate=False)
    shards.members[f"{name}-{time.monotonic()}"] = member
    return member


def test_no_answer_claims_a_namespace_and_lacks_a_written_document(
    tier: Tier,  # noqa: F811
    ingest: ServiceProcess,
) -> None:
    members = [tier.start_member() for _ in range(4)]
    tier.wait_serving(4)
    written = Written()
    paused: set[int] = set()
    stop = threading.Event()
    silent: list[str] = []
    counts = {"complete": 0, "named failure": 0, "refused": 0}
    counts_lock = threading.Lock()

    def running() -> list[ServiceProcess]:
        return [
            m
            for m in tier.live()
            if m.process is not None and m.process.pid not in paused and m.channel is not None
        ]

    def writer() -> None:
        stub = ingest_grpc.IngestServiceStub(ingest.channel)
        i = 0
        while not stop.is_set():
            i += 1
            namespace = ALL[i % len(ALL)]
            document_id = f"w-{i:04d}"
            task_id = stub.CreateDocument(
                ingest_pb.CreateDocumentRequest(
                    namespace=namespace,
                    document=ingest_pb.DocumentInput(
                        document_id=document_id,
                        text=f"Ledger addendum {i} for {namespace}: item {i} and its price.",
                    ),
                ),
                timeout=10,
            ).task.task_id
            while not stop.is_set():
                state = stub.GetTask(ingest_pb.GetTaskRequest(task_id=task_id), timeout=10).task
                if state.state == ingest_pb.TASK_STATE_COMPLETED:
                    written.add(namespace, document_id)
                    break
                assert state.state != ingest_pb.TASK_STATE_FAILED, state
                time.sleep(0.05)
            time.sleep(0.15)

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            choices = running()
            if not choices:
                time.sleep(0.05)
                continue
            member = rng.choice(choices)
            namespace = rng.choice(ALL)
            sent = time.monotonic()
            expected = written.before(namespace, sent)
            try:
                channel = member.channel
                assert channel is not None
                reply = pb_grpc.QueryServiceStub(channel).Query(
                    pb.QueryRequest(
                        namespaces=[namespace],
                        query="ledger item price",
                        top_k=100,
                        timeout_ms=2500,
                    ),
                    timeout=8,
                )
            except (grpc.RpcError, AssertionError, ValueError):
                with counts_lock:
                    counts["refused"] += 1  # the balancer's to retry elsewhere
                continue
            if namespace not in reply.meta.namespaces_succeeded:
                assert [f.namespace for f in reply.meta.namespaces_failed] == [namespace], reply
                with counts_lock:
                    counts["named failure"] += 1
                continue
            found = {r.document_id for r in reply.results if r.namespace == namespace}
            lacking = expected - found
            if lacking:
                silent.append(
                    f"{member.name} answered {namespace} (coverage "
                    f"{reply.meta.coverage_ratio}) without {sorted(lacking)}; got {sorted(found)}"
                )
            else:
                with counts_lock:
                    counts["complete"] += 1

    crashed: list[str] = []

    def guarded(target, *args) -> None:  # type: ignore[no-untyped-def]
        try:
            target(*args)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            crashed.append(f"{target.__name__}: {exc!r}"[:500])

    threads = [threading.Thread(target=guarded, args=(writer,))] + [
        threading.Thread(target=guarded, args=(reader, s)) for s in range(3)
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2)
        # 1. Killed, and back at its address with its own data directory.
        members[0].kill()
        time.sleep(1)
        members[0] = _restart_at(tier, members[0], keep_data=True)
        time.sleep(2)
        # 2. Paused past its lease, then resumed.
        victim = members[1]
        assert victim.process is not None
        paused.add(victim.process.pid)
        os.kill(victim.process.pid, signal.SIGSTOP)
        time.sleep(LEASE_S * 2.5)
        os.kill(victim.process.pid, signal.SIGCONT)
        paused.discard(victim.process.pid)
        time.sleep(2)
        # 3. Two stopped at once, and one joining.
        for member in members[2:4]:
            member.stop()
        members.append(tier.start_member())
        time.sleep(LEASE_S * 2)
        # 4. Killed, replaced at its address by a process with an empty data directory.
        members[0].kill()
        members[0] = _restart_at(tier, members[0], keep_data=False)
        time.sleep(LEASE_S * 2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        for member in tier.members.values():
            if member.process is not None and member.process.poll() is None:
                os.kill(member.process.pid, signal.SIGCONT)
    documents = sum(len(d) - 1 for d in written.docs.values())
    summary = (
        f"{counts}, {documents} documents written; silent: {silent[:5]} ({len(silent)} in "
        f"all); crashed: {crashed}"
    )
    print(summary)
    assert not crashed, summary
    assert counts["complete"] > 50 and documents > 20, summary
    assert not silent, summary

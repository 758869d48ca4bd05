"""Faults in a scaled-out deployment on PostgreSQL: two query replicas, two reach workers,
one ingest, one audit and the bridge, each a real process (see ``deployment.py``), broken
while a load runs: a replica or a worker killed with SIGKILL, the database stopped and
started again, an index snapshot overwritten with garbage, the audit service gone.

Each test prints what it did and what it observed (run with ``-s``); the same summary is
in every assertion message. The tests share one deployment and run in file order; each
leaves every process running for the next.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy

from reachstore.query.v1 import query_service_pb2 as query_pb
from reachstore.query.v1 import query_service_pb2_grpc as query_grpc
from tests.e2e.conftest import wait_task
from tests.e2e.deployment import CHANNEL, Deployment
from tests.reach.peers import HttpReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

# How soon, after the database is back, every kind of call must work again.
RECOVERY_LIMIT_S = 15.0


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpReceiver]:
    with HttpReceiver(dedupe=True) as rx:
        yield rx


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, receiver: HttpReceiver
) -> Iterator[Deployment]:
    running = Deployment(tmp_path_factory.mktemp("deployment"), receiver)
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=deployment.bridge.url, timeout=30) as client:
        yield client


# ------------------------------------------------------------------------------ helpers


@dataclasses.dataclass
class Observed:
    """What one kind of call saw during a load."""

    ok: int = 0
    retried: int = 0
    failures: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    # (status, code, category, retry_after_ms) of every error answer.
    errors: list[tuple[int, str, str, int]] = dataclasses.field(default_factory=list)
    last_error_at: float = 0.0
    first_ok_after: dict[float, float] = dataclasses.field(default_factory=dict)

    def line(self) -> str:
        return f"ok={self.ok} retried={self.retried} errors={dict(self.failures)}"


def error_of(reply: httpx.Response) -> tuple[int, str, str, int]:
    try:
        error = reply.json()["error"]
    except (ValueError, KeyError, TypeError):
        return reply.status_code, "not-json", "", 0
    return reply.status_code, error["code"], error["category"], error.get("retry_after_ms") or 0


class Load:
    """Threads calling ``call`` back to back until stopped; ``call`` returns the reply,
    and a reply of 400 or more is an error. Replies, errors and their times are kept."""

    def __init__(self, threads: int, call: Callable[[httpx.Client, int], httpx.Response], url: str):
        self.seen = Observed()
        self._call = call
        self._url = url
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._oks: list[float] = []
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        with httpx.Client(base_url=self._url, timeout=30) as http:
            while not self._stop.is_set():
                n = next(self._counter)
                try:
                    reply = self._call(http, n)
                except httpx.HTTPError as exc:
                    with self._lock:
                        self.seen.failures[f"transport {type(exc).__name__}"] += 1
                    continue
                now = time.monotonic()
                with self._lock:
                    if reply.status_code < 400:
                        self.seen.ok += 1
                        self._oks.append(now)
                    else:
                        error = error_of(reply)
                        self.seen.errors.append(error)
                        self.seen.failures[f"{error[0]} {error[1]}"] += 1
                        self.seen.last_error_at = now

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def wait_for_answers(self, count: int, timeout: float = 60) -> int:
        """Waits until ``count`` more calls succeeded (a loaded machine starts slowly)."""
        target = self.seen.ok + count
        deadline = time.monotonic() + timeout
        while self.seen.ok < target and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.seen.ok

    def first_ok_after(self, moment: float) -> float | None:
        with self._lock:
            later = [t for t in self._oks if t >= moment]
        return min(later) - moment if later else None


def query_call(namespaces: list[str]) -> Callable[[httpx.Client, int], httpx.Response]:
    def call(http: httpx.Client, n: int) -> httpx.Response:
        reply = http.post("/api/v1/query", json={"namespaces": namespaces, "query": "green tea"})
        if reply.status_code == 200 and reply.json()["meta"]["coverage_ratio"] < 1:
            # A partial answer counts as a failure here: every namespace must answer.
            return httpx.Response(599, json={"error": {"code": "PARTIAL", "category": ""}})
        return reply

    return call


def submit_task(http: httpx.Client, key: str, n: int) -> tuple[httpx.Response, int]:
    """Submits a one-action task with idempotency key ``key``, again after each transient
    answer (waiting what the answer advises), as a well-behaved agent would; returns the
    last reply and how many times it was sent again."""
    body = {
        "entity_id": f"E-{key}",
        "idempotency_key": key,
        "actions": [
            {"name": "notify", "channel": CHANNEL, "action_type": "notify", "params": {"n": n}}
        ],
    }
    retried = 0
    deadline = time.monotonic() + 60
    while True:
        try:
            reply = http.post("/api/v1/reach/tasks", json=body)
        except httpx.TransportError:
            reply = None
        if reply is not None and reply.status_code < 500:
            return reply, retried
        if time.monotonic() > deadline:
            assert reply is not None, f"no answer for {key}"
            return reply, retried
        retried += 1
        wait_ms = error_of(reply)[3] if reply is not None else 500
        time.sleep(min(wait_ms, 2000) / 1000)


def wait_actions_settled(
    engine: sqlalchemy.Engine, task_ids: list[str], timeout: float = 60
) -> collections.Counter[str]:
    """Polls the store until every action of ``task_ids`` has left the states a worker
    still moves; returns the actions per state as last seen."""
    deadline = time.monotonic() + timeout
    query = sqlalchemy.text(
        "SELECT state, count(*) FROM reach_actions WHERE task_id = ANY(:ids) GROUP BY state"
    )
    while True:
        with engine.connect() as conn:
            states = collections.Counter(dict(conn.execute(query, {"ids": task_ids}).all()))
        moving = sum(states[s] for s in ("ready", "submitting", "pending", "unknown"))
        if not moving or time.monotonic() > deadline:
            return states
        time.sleep(0.25)


def effects_per_action(receiver: HttpReceiver) -> collections.Counter[str]:
    """Distinct effects the receiver took, per reachstore action id (a repeat it answered
    from its Idempotency-Key memory takes none)."""
    return collections.Counter(
        r.headers.get("x-reachstore-action-id", "") for r in receiver.records if r.new_effect
    )


def action_ids(engine: sqlalchemy.Engine, task_ids: list[str]) -> list[str]:
    query = sqlalchemy.text("SELECT action_id FROM reach_actions WHERE task_id = ANY(:ids)")
    with engine.connect() as conn:
        return [row[0] for row in conn.execute(query, {"ids": task_ids})]


# -------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def engine(deployment: Deployment) -> Iterator[sqlalchemy.Engine]:
    database = sqlalchemy.create_engine(deployment.database_url, pool_pre_ping=True)
    yield database
    database.dispose()


def ingest(http: httpx.Client, namespace: str, docs: dict[str, str]) -> None:
    http.post("/api/v1/namespaces", json={"name": namespace})
    for document_id, text in docs.items():
        reply = http.post(
            f"/api/v1/namespaces/{namespace}/documents",
            json={"document": {"document_id": document_id, "text": text}},
        )
        assert reply.status_code == 202, reply.text
        assert wait_task(http, reply.json()["task"]["task_id"])["state"] == "completed"


TEAS = {
    "green": "Green tea is steamed or pan-fired soon after picking.",
    "black": "Black tea leaves are fully oxidised before drying.",
    "oolong": "Oolong tea is partly oxidised, between green and black tea.",
}
COFFEES = {
    "roast": "Coffee beans are roasted before brewing.",
    "espresso": "Espresso forces hot water through finely ground coffee.",
}


def test_every_replica_answers_with_a_document_once_its_ingest_completed(
    deployment: Deployment, http: httpx.Client
) -> None:
    ingest(http, "coffee", COFFEES)
    replicas = [query_grpc.QueryServiceStub(q.channel) for q in deployment.queries]
    seen: collections.Counter[str] = collections.Counter()
    for document_id, text in TEAS.items():
        ingest(http, "tea", {document_id: text})
        # The very next query on each replica, without waiting: it must find the document.
        for number, replica in enumerate(replicas):
            reply = replica.Query(
                query_pb.QueryRequest(namespaces=["tea"], query=text, top_k=1), timeout=10
            )
            found = [r.document_id for r in reply.results]
            seen[f"replica-{number} {'found' if found == [document_id] else 'missed'}"] += 1
    summary = f"{len(TEAS)} documents, each queried on both replicas right after: {dict(seen)}"
    print(summary)
    assert set(seen) == {"replica-0 found", "replica-1 found"}, summary


def test_killing_a_query_replica_under_load_fails_no_request(deployment: Deployment) -> None:
    with Load(4, query_call(["tea", "coffee"]), deployment.bridge.url) as load:
        before = load.wait_for_answers(40)
        deployment.queries[0].kill()
        time.sleep(2.5)
    deployment.queries[0].start()
    summary = (
        f"2 query replicas, 4 clients through the bridge; replica 0 killed (SIGKILL) after "
        f"{before} answers: {load.seen.line()}"
    )
    print(summary)
    assert load.seen.ok > before > 0, summary
    assert not load.seen.failures, summary


def test_killing_a_reach_worker_mid_run_loses_and_duplicates_nothing(
    deployment: Deployment, receiver: HttpReceiver, engine: sqlalchemy.Engine
) -> None:
    tasks: list[str] = []
    retried = 0
    with httpx.Client(base_url=deployment.bridge.url, timeout=30) as http:
        for n in range(60):
            if n == 20:
                deployment.reaches[0].kill()
            reply, again = submit_task(http, f"kill-{n}", 1000 + n)
            assert reply.status_code == 202, reply.text
            tasks.append(reply.json()["task"]["task_id"])
            retried += again
    states = wait_actions_settled(engine, tasks)
    deployment.reaches[0].start()
    ids = action_ids(engine, tasks)
    effects = effects_per_action(receiver)
    duplicated = [a for a in ids if effects[a] > 1]
    lost = [a for a in ids if effects[a] == 0]
    summary = (
        f"60 one-action tasks through the bridge to 2 reach workers, worker 0 killed (SIGKILL) "
        f"after 20: submissions sent again {retried}; actions by state {dict(states)}; "
        f"duplicated {len(duplicated)}, lost {len(lost)}"
    )
    print(summary)
    assert len(set(tasks)) == 60 and len(ids) == 60, summary
    assert states == {"succeeded": 60}, summary
    assert not duplicated and not lost, summary


def test_restarting_postgresql_under_load_recovers_by_itself(
    deployment: Deployment, receiver: HttpReceiver, engine: sqlalchemy.Engine
) -> None:
    submitted: list[str] = []
    submit_lock = threading.Lock()

    def reach_call(http: httpx.Client, n: int) -> httpx.Response:
        # No retry here: the load records what each call got; the tasks that were
        # accepted are checked at the end.
        body = {
            "entity_id": f"E-pg-{n}",
            "idempotency_key": f"pg-{n}",
            "actions": [
                {
                    "name": "notify",
                    "channel": CHANNEL,
                    "action_type": "notify",
                    "params": {"n": 2000 + n},
                }
            ],
        }
        reply = http.post("/api/v1/reach/tasks", json=body)
        if reply.status_code == 202:
            with submit_lock:
                submitted.append(reply.json()["task"]["task_id"])
        time.sleep(0.05)
        return reply

    def ingest_call(http: httpx.Client, n: int) -> httpx.Response:
        time.sleep(0.1)
        return http.get("/api/v1/namespaces/tea")

    loads = {
        "query": Load(2, query_call(["tea", "coffee"]), deployment.bridge.url),
        "reach": Load(1, reach_call, deployment.bridge.url),
        "ingest": Load(1, ingest_call, deployment.bridge.url),
    }
    with contextlib.ExitStack() as running:
        for load in loads.values():
            running.enter_context(load)
        for load in loads.values():
            load.wait_for_answers(5)
        deployment.postgres.stop("immediate")
        stopped_at = time.monotonic()
        time.sleep(3)
        deployment.postgres.start()
        back_at = time.monotonic()
        time.sleep(RECOVERY_LIMIT_S)
    recovery = {name: load.first_ok_after(back_at) for name, load in loads.items()}
    last_error = {
        name: round(load.seen.last_error_at - back_at, 2) if load.seen.errors else None
        for name, load in loads.items()
    }
    errors = [e for load in loads.values() for e in load.seen.errors]
    bad = [e for e in errors if e[0] not in (503, 504) or e[2] not in ("transient", "timeout")]
    no_hint = [e for e in errors if e[3] <= 0]
    states = wait_actions_settled(engine, submitted)
    effects = effects_per_action(receiver)
    ids = action_ids(engine, submitted)
    alive = {
        p.name: p.process is not None and p.process.poll() is None for p in deployment.processes
    }
    summary = (
        f"PostgreSQL stopped (immediate) for {back_at - stopped_at:.1f} s under load; "
        + "; ".join(f"{name}: {load.seen.line()}" for name, load in loads.items())
        + f"; first success after it returned (s): "
        f"{ {k: round(v, 2) if v is not None else None for k, v in recovery.items()} }"
        f"; last error after it returned (s): {last_error}; reach tasks accepted "
        f"{len(submitted)}, actions by state {dict(states)}, duplicated "
        f"{sum(1 for a in ids if effects[a] > 1)}, lost {sum(1 for a in ids if effects[a] == 0)}"
        f"; processes alive {alive}"
    )
    print(summary)
    assert all(alive.values()), summary
    assert errors, f"the outage went unnoticed: {summary}"
    assert not bad, f"{bad[:5]}\n{summary}"
    assert not no_hint, summary
    for name, load in loads.items():
        assert recovery[name] is not None and recovery[name] < RECOVERY_LIMIT_S, summary
        assert load.seen.last_error_at - back_at < RECOVERY_LIMIT_S / 2, summary
    assert states == {"succeeded": len(submitted)}, summary
    assert all(effects[a] == 1 for a in ids), summary


def _snapshot_of(replica_dir: Path, engine: sqlalchemy.Engine, namespace: str) -> Path:
    with engine.connect() as conn:
        namespace_id = conn.execute(
            sqlalchemy.text("SELECT id FROM namespaces WHERE name = :name"), {"name": namespace}
        ).scalar_one()
    return replica_dir / "indexes" / f"{namespace_id}.snap"


def test_a_garbage_snapshot_is_rebuilt_while_other_namespaces_answer(
    deployment: Deployment, engine: sqlalchemy.Engine
) -> None:
    replica = deployment.queries[1]
    replica.stop()  # SIGTERM: writes its snapshots on the way out
    snapshot = _snapshot_of(deployment.workdir / "query-1", engine, "tea")
    assert snapshot.exists(), snapshot
    snapshot.write_bytes(b"garbage" * 1000)
    # Rebuilding takes at least 3 s on the restarted replica, so that the answers given
    # meanwhile can be seen.
    replica._env["REACHSTORE_FAULT_REBUILD_DELAY_MS"] = "3000"
    try:
        replica.start()
    finally:
        del replica._env["REACHSTORE_FAULT_REBUILD_DELAY_MS"]
    stub = query_grpc.QueryServiceStub(replica.channel)
    seen: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    rebuilt_after = None
    while time.monotonic() - started < 30:
        reply = stub.Query(
            query_pb.QueryRequest(namespaces=["tea", "coffee"], query="tea or coffee", top_k=10),
            timeout=10,
        )
        failed = {f.namespace: f.error_code for f in reply.meta.namespaces_failed}
        seen["coffee answered" if "coffee" not in failed else f"coffee {failed['coffee']}"] += 1
        seen["tea answered" if "tea" not in failed else f"tea {failed['tea']}"] += 1
        if "tea" not in failed:
            rebuilt_after = time.monotonic() - started
            tea = {r.document_id for r in reply.results if r.namespace == "tea"}
            break
        time.sleep(0.2)
    summary = (
        f"replica 1 restarted on a garbage snapshot of 'tea': answers {dict(seen)}; tea "
        f"answered again after {rebuilt_after} s"
    )
    print(summary)
    assert seen["coffee answered"] == sum(v for k, v in seen.items() if k.startswith("coffee")), (
        summary
    )
    assert seen["tea INDEX_REBUILDING"] > 0, summary
    assert rebuilt_after is not None, summary
    assert tea == set(TEAS), summary


def test_no_audit_event_is_lost_while_the_audit_service_is_down(
    deployment: Deployment, engine: sqlalchemy.Engine
) -> None:
    def outbox() -> int:
        with engine.connect() as conn:
            return int(
                conn.execute(sqlalchemy.text("SELECT count(*) FROM audit_outbox")).scalar_one()
            )

    deployment.audit.kill()
    tasks = []
    with httpx.Client(base_url=deployment.bridge.url, timeout=30) as http:
        for n in range(20):
            reply, _ = submit_task(http, f"audit-{n}", 3000 + n)
            assert reply.status_code == 202, reply.text
            tasks.append(reply.json()["task"]["task_id"])
    states = wait_actions_settled(engine, tasks)
    waiting = outbox()
    deployment.audit.start()
    deadline = time.monotonic() + 30
    while outbox() and time.monotonic() < deadline:
        time.sleep(0.2)
    ids = action_ids(engine, tasks)
    with engine.connect() as conn:
        rows = conn.execute(
            sqlalchemy.text(
                "SELECT method, params_json::json->>'action_id' FROM audit_events "
                "WHERE method LIKE 'action.%' AND params_json::json->>'action_id' = ANY(:ids)"
            ),
            {"ids": ids},
        ).all()
    per_action = collections.Counter(rows)
    summary = (
        f"audit killed, 20 tasks through 2 reach workers: actions {dict(states)}; {waiting} "
        f"event(s) waited in the outbox, {outbox()} left after the restart; "
        f"{len(per_action)} action events stored, most for one (method, action) "
        f"{max(per_action.values(), default=0)}"
    )
    print(summary)
    assert states == {"succeeded": 20}, summary
    assert waiting > 0 and outbox() == 0, summary
    # submitting and succeeded, once each, for every action.
    assert {m for m, _ in per_action} >= {"action.submitting", "action.succeeded"}, summary
    assert all(per_action[("action.succeeded", a)] == 1 for a in ids), summary
    assert set(per_action.values()) == {1}, summary

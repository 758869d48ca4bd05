"""The audit trail end to end, with real processes: no event is lost while the audit
service is down (or killed mid-append), and no raw personal data reaches the trail, the
logs or an API response."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy

from reachstore.audit.v1 import audit_service_pb2 as audit_pb
from reachstore.audit.v1 import audit_service_pb2_grpc as audit_grpc
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore.reach.v1 import reach_service_pb2 as reach_pb
from reachstore.reach.v1 import reach_service_pb2_grpc as reach_grpc
from reachstore_server.audit.signing import PrivateKey
from tests.e2e.processes import ServiceProcess, shipper_key
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

SECRETS = {
    "REACHSTORE_PII_SECRET": "audit-system-tests-pii-secret",
    "REACHSTORE_AUDIT_SIGNING_KEY": PrivateKey.generate().pem(),
}
PG_MARKED = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _config(path: Path, receiver: HttpReceiver) -> Path:
    path.write_text(
        f"""
[channels.hook]
kind = "webhook"
description = "posts to the test receiver"
action_types = ["notify"]
idempotency_params = ["n"]
[channels.hook.webhook]
url = "{receiver.url}"
""",
        encoding="utf-8",
    )
    return path


def _outbox(engine: sqlalchemy.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sqlalchemy.text("SELECT count(*) FROM audit_outbox")).scalar_one())


def _events(engine: sqlalchemy.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sqlalchemy.text(
                "SELECT event_id, method, params_json, seq FROM audit_events "
                "WHERE tenant = 'default'"
            )
        ).mappings()
        return [dict(r) for r in rows]


def _submit(stub: reach_grpc.ReachServiceStub, n: int) -> str:
    spec = reach_pb.ActionSpec(name="a", channel="hook", action_type="notify")
    spec.params.update({"n": n})
    reply = stub.SubmitTask(
        reach_pb.SubmitTaskRequest(entity_id=f"E-{n}", actions=[spec]), timeout=10
    )
    return reply.task.task_id


def _wait_succeeded(stub: reach_grpc.ReachServiceStub, task_ids: list[str]) -> None:
    for task_id in task_ids:
        deadline = time.monotonic() + 30
        while True:
            task = stub.GetTask(
                reach_pb.GetTaskRequest(task_id=task_id, wait_ms=2000), timeout=10
            ).task
            if task.state == reach_pb.TASK_STATE_SUCCEEDED:
                break
            assert time.monotonic() < deadline, f"task {task_id} is {task.state}"


@pytest.mark.parametrize("database_url", PG_MARKED, indirect=True)
def test_no_event_is_lost_while_the_audit_service_is_down(
    database_url: str, tmp_path: Path
) -> None:
    engine = sqlalchemy.create_engine(database_url)
    with HttpReceiver() as receiver:
        audit_addr = f"127.0.0.1:{ServiceProcess.free_port()}"
        common = {
            **SECRETS,
            "REACHSTORE_DATABASE_URL": database_url,
            "REACHSTORE_DATA_DIR": str(tmp_path / "data"),
            "REACHSTORE_AUDIT_ADDR": audit_addr,
        }
        common["REACHSTORE_AUDIT_SHIPPER_KEY"] = shipper_key(common)

        def audit_process() -> ServiceProcess:
            return ServiceProcess(
                "reachstore_server.audit.main",
                "reachstore.audit.v1.AuditService",
                tmp_path,
                "audit",
                common,
                address=audit_addr,
            )

        audit = audit_process().start()
        reach = ServiceProcess(
            "reachstore_server.reach.main",
            "reachstore.reach.v1.ReachService",
            tmp_path,
            "reach",
            {**common, "REACHSTORE_REACH_CONFIG": str(_config(tmp_path / "reach.toml", receiver))},
        ).start()
        ingest = ServiceProcess(
            "reachstore_server.ingest.main",
            "reachstore.ingest.v1.IngestService",
            tmp_path,
            "ingest",
            common,
        ).start()
        restarted: ServiceProcess | None = None
        try:
            stub = reach_grpc.ReachServiceStub(reach.channel)
            ingest_stub = ingest_grpc.IngestServiceStub(ingest.channel)
            tasks = [_submit(stub, n) for n in range(20)]
            audit.kill()  # mid-load, possibly mid-append: acknowledgements may be lost
            tasks += [_submit(stub, n) for n in range(20, 40)]
            for i in range(5):
                ingest_stub.CreateNamespace(
                    ingest_pb.CreateNamespaceRequest(name=f"ns-{i}"), timeout=10
                )
            rejected = reach_pb.SubmitTaskRequest(entity_id="")  # refused: audited all the same
            with pytest.raises(Exception):  # noqa: B017 - the call's own error is not the point
                stub.SubmitTask(rejected, timeout=10)
            _wait_succeeded(stub, tasks)
            waiting = _outbox(engine)
            restarted = audit_process().start()
            deadline = time.monotonic() + 30
            while _outbox(engine) and time.monotonic() < deadline:
                time.sleep(0.2)
            left = _outbox(engine)
            events = _events(engine)
            by_method = collections.Counter(e["method"] for e in events)
            per_action = collections.Counter(
                (e["method"], json.loads(e["params_json"]).get("action_id"))
                for e in events
                if e["method"].startswith("action.")
            )
            verified = audit_grpc.AuditServiceStub(restarted.channel).Verify(
                audit_pb.VerifyRequest(), timeout=30
            )
            summary = (
                f"audit outage on {database_url.split(':')[0]}: 40 tasks, 5 namespaces, 1 refused "
                f"call; {waiting} event(s) waited in the outbox while it was down, {left} left "
                f"after its restart; stored {len(events)}: {dict(sorted(by_method.items()))}; "
                f"verify ok={verified.ok} over {verified.events_checked} events"
            )
            print(summary)
            assert waiting > 0, summary
            assert left == 0, summary
            assert by_method["SubmitTask"] == 41, summary
            assert by_method["action.submitting"] == 40 and by_method["action.succeeded"] == 40, (
                summary
            )
            assert by_method["CreateNamespace"] == 5, summary
            assert set(per_action.values()) == {1}, summary  # nothing twice
            assert len({e["event_id"] for e in events}) == len(events), summary
            assert sorted(e["seq"] for e in events) == list(range(1, len(events) + 1)), summary
            assert verified.ok, f"{summary}\n{verified.first_break}"
            # ListEvents pages through exactly what is stored, in chain order.
            listed, token = [], ""
            audit_stub = audit_grpc.AuditServiceStub(restarted.channel)
            while True:
                page = audit_stub.ListEvents(
                    audit_pb.ListEventsRequest(page_size=25, page_token=token), timeout=10
                )
                listed += [e.seq for e in page.events]
                token = page.next_page_token
                if not token:
                    break
            assert listed == list(range(1, len(events) + 1)), summary
            # Stopping the audit service signs the chain's head on the way out (the
            # interval, 60 s, never came while it ran).
            restarted.stop()
            with engine.connect() as conn:
                # The local tenant's chain; the service tenant's holds the appends' records.
                head = conn.execute(
                    sqlalchemy.text("SELECT seq FROM audit_heads WHERE tenant = 'default'")
                ).scalar_one()
                signed = conn.execute(
                    sqlalchemy.text(
                        "SELECT max(seq) FROM audit_checkpoints WHERE tenant = 'default'"
                    )
                ).scalar_one()
            assert signed == head == len(events), summary
        finally:
            for process in (ingest, reach, restarted, audit):
                if process is not None:
                    process.stop()
            engine.dispose()


# --- personal data -------------------------------------------------------------------------

RAW = {
    "phone": "13800138000",
    "intl": "+44 20 7946 0958",
    "email": "zhang.san@example.com",
    "cn_id": "11010519491231002X",
    "card": "4111 1111 1111 1111",
    "name": "Zhang San",
}
KEPT = "ORD20261130000123"  # an order number: not personal, must stay readable


@pytest.fixture(scope="module")
def pii_system(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningSystem, HttpReceiver]]:
    folder = tmp_path_factory.mktemp("audit-pii")
    with HttpReceiver(default="echo") as receiver:
        env = {"REACHSTORE_REACH_CONFIG": str(_config(folder / "reach.toml", receiver))}
        running = RunningSystem(folder / "data", env)
        running.start()
        try:
            yield running, receiver
        finally:
            running.stop()


def test_no_raw_personal_data_reaches_the_trail_the_logs_or_the_api(
    pii_system: tuple[RunningSystem, HttpReceiver],
) -> None:
    system, receiver = pii_system
    note = (
        f"call {RAW['phone']} or {RAW['intl']}, mail {RAW['email']}, id {RAW['cn_id']}, "
        f"card {RAW['card']}, order {KEPT}"
    )
    with httpx.Client(base_url=system.http_url, timeout=30) as http:
        submitted = http.post(
            "/api/v1/reach/tasks",
            json={
                "entity_id": KEPT,
                "actions": [
                    {
                        "name": "notify",
                        "channel": "hook",
                        "action_type": "notify",
                        "params": {"n": 1, "note": note, "customer_name": RAW["name"]},
                    }
                ],
            },
        )
        assert submitted.status_code == 202, submitted.text
        task_id = submitted.json()["task"]["task_id"]
        http.post("/api/v1/namespaces", json={"name": "crm"})
        http.post(
            "/api/v1/namespaces/crm/documents",
            json={
                "document": {"document_id": "c1", "text": note, "metadata": {"owner": RAW["email"]}}
            },
        )
        deadline = time.monotonic() + 30
        while True:
            task = http.get(f"/api/v1/reach/tasks/{task_id}", params={"wait_ms": 2000}).json()[
                "task"
            ]
            if task["state"] == "succeeded":
                break
            assert time.monotonic() < deadline, task
        action_id = task["actions"][0]["action_id"]
        # Events reach the audit service through the outbox: wait for the action's.
        deadline = time.monotonic() + 30
        while True:
            listed = http.get("/api/v1/audit/events", params={"page_size": 100})
            assert listed.status_code == 200, listed.text
            methods = {e["method"] for e in listed.json()["events"]}
            if {"SubmitTask", "action.succeeded", "CreateDocument"} <= methods:
                break
            assert time.monotonic() < deadline, methods
        api_text = (
            listed.text
            + http.get(f"/api/v1/reach/actions/{action_id}").json()["action"]["receipts"][0][
                "snippet"
            ]
        )
    assert receiver.records, "the receiver got the action (raw, as it must)"
    engine = sqlalchemy.create_engine(f"sqlite:///{system.data_dir / 'reachstore.db'}")
    try:
        with engine.connect() as conn:
            stored = "\n".join(
                json.dumps(list(row), default=str)
                for table in ("audit_events", "audit_outbox", "audit_checkpoints", "reach_receipts")
                for row in conn.execute(sqlalchemy.text(f"SELECT * FROM {table}"))
            )
    finally:
        engine.dispose()
    logs = "".join(system.output)
    for place, text in (
        ("the audit tables and receipts", stored),
        ("the logs", logs),
        ("the API", api_text),
    ):
        for kind, value in RAW.items():
            assert value not in text, f"raw {kind} found in {place}"
            assert value.replace(" ", "") not in text.replace(" ", ""), f"{kind} in {place}"
    # What is masked is still joinable, and what is not personal is still readable.
    assert "[phone:" in stored and "[email:" in stored and "[cn_id:" in stored
    assert "[card:" in stored and "[field:" in stored
    assert KEPT in stored


# --- who may read what ---------------------------------------------------------------------

TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    running = RunningSystem(
        tmp_path_factory.mktemp("audit-keys") / "data",
        {"REACHSTORE_REQUIRE_KEYS": "true", "REACHSTORE_AUDIT_CHECKPOINT_S": "1"},
    )
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


def _wait_events(http: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        reply = http.get("/api/v1/audit/events", params={"page_size": 100, **params})
        assert reply.status_code == 200, reply.text
        if reply.json()["events"] or time.monotonic() > deadline:
            return list(reply.json()["events"])
        time.sleep(0.2)


def test_tenants_see_their_own_trail_and_auditors_see_all(secured: RunningSystem) -> None:
    from tests.e2e.test_auth import make_key

    acme_key = make_key(secured, "acme", "read,write")
    globex_key = make_key(secured, "globex", "read,write")
    auditor_key = make_key(secured, "acme", "read,auditor")

    def client(key: str) -> httpx.Client:
        return httpx.Client(
            base_url=secured.http_url, timeout=30, headers={"Authorization": f"Bearer {key}"}
        )

    with client(acme_key) as acme, client(globex_key) as globex, client(auditor_key) as auditor:
        made = acme.post(
            "/api/v1/namespaces",
            json={"name": "orders"},
            headers={"traceparent": f"00-{TRACE}-b7ad6b7169203331-01"},
        )
        assert made.status_code == 200, made.text
        assert globex.post("/api/v1/namespaces", json={"name": "orders"}).status_code == 200
        mine = _wait_events(acme, method="CreateNamespace")
        assert [e["tenant"] for e in mine] == ["acme"]
        assert mine[0]["caller_key_id"] == acme_key.split("_")[1]
        assert mine[0]["trace_id"] == TRACE and mine[0]["result_status"] == "ok"
        assert _wait_events(acme, trace_id=TRACE)[0]["event_id"] == mine[0]["event_id"]
        theirs = _wait_events(globex, method="CreateNamespace")
        assert [e["tenant"] for e in theirs] == ["globex"]
        # Another tenant's trail: refused to an ordinary key, open to an auditor.
        refused = acme.get("/api/v1/audit/events", params={"tenant": "globex"})
        assert (
            refused.status_code == 403 and refused.json()["error"]["code"] == "AUTH_SCOPE_MISSING"
        )
        seen = _wait_events(auditor, tenant="globex", method="CreateNamespace")
        assert seen[0]["event_id"] == theirs[0]["event_id"]
        hidden = acme.get(f"/api/v1/audit/events/{theirs[0]['event_id']}")
        assert hidden.status_code == 404
        assert hidden.json()["error"]["code"] == "AUDIT_EVENT_NOT_FOUND"
        assert auditor.get(f"/api/v1/audit/events/{theirs[0]['event_id']}").status_code == 200
        # Appending is for the services alone.
        forged = acme.post("/api/v1/audit/events:append", json={"events": []})
        assert forged.status_code == 403
        # Verify: one's own chain, or every chain for an auditor.
        own = acme.post("/api/v1/audit:verify", json={})
        assert own.status_code == 200, own.text
        assert own.json()["ok"] and own.json()["tenants_checked"] == 1, own.text
        every = auditor.post("/api/v1/audit:verify", json={"all_tenants": True})
        assert every.json()["ok"] and every.json()["tenants_checked"] >= 2, every.text
        assert acme.post("/api/v1/audit:verify", json={"all_tenants": True}).status_code == 403
        deadline = time.monotonic() + 15
        while not acme.get("/api/v1/audit/checkpoint").json()["checkpoint"]:
            assert time.monotonic() < deadline, "no checkpoint was signed"
            time.sleep(0.2)
        checkpoint = acme.get("/api/v1/audit/checkpoint").json()["checkpoint"]
        assert checkpoint["tenant"] == "acme" and checkpoint["key_id"].startswith("ed25519:")
        # A refused call is audited too, with its code and category.
        bad = acme.post("/api/v1/namespaces", json={"name": "Not A Name"})
        assert bad.status_code == 400
        failed = _wait_events(acme, method="CreateNamespace", since="2000-01-01T00:00:00Z")
        deadline = time.monotonic() + 15
        while not any(e["result_status"] == "INVALID_ARGUMENT" for e in failed):
            assert time.monotonic() < deadline, failed
            time.sleep(0.2)
            failed = _wait_events(acme, method="CreateNamespace")
        [refusal] = [e for e in failed if e["result_status"] == "INVALID_ARGUMENT"]
        assert refusal["error_code"] == "INVALID_ARGUMENT" and refusal["category"] == "permanent"
        assert acme.get("/api/v1/audit/events", params={"since": "yesterday"}).status_code == 400

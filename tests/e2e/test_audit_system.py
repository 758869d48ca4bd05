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
from tests.e2e.processes import ServiceProcess
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

SECRETS = {
    "REACHSTORE_PII_SECRET": "audit-system-tests-pii-secret",
    "REACHSTORE_AUDIT_KEY": "audit-system-tests-signing-key",
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
            sqlalchemy.text("SELECT event_id, method, params_json, seq FROM audit_events")
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

        def audit_process() -> ServiceProcess:
            return ServiceProcess(
                "services.audit.main",
                "reachstore.audit.v1.AuditService",
                tmp_path,
                "audit",
                common,
                address=audit_addr,
            )

        audit = audit_process().start()
        reach = ServiceProcess(
            "services.reach.main",
            "reachstore.reach.v1.ReachService",
            tmp_path,
            "reach",
            {**common, "REACHSTORE_REACH_CONFIG": str(_config(tmp_path / "reach.toml", receiver))},
        ).start()
        ingest = ServiceProcess(
            "services.ingest.main", "reachstore.ingest.v1.IngestService", tmp_path, "ingest", common
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

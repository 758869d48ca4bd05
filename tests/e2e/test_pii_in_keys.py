"""Personal data used as a business entity never shows in an idempotency key.

A real `reachstore up` whose webhook channel keys its actions on the recipient's e-mail,
name and phone, driven over REST and gRPC with e-mail addresses, spaced Chinese mobiles,
international numbers, names, a resident ID and a card number as ``entity_id``. Nothing
the system stores or shows carries them in clear, in any spelling a key could have given
them (as typed, percent-encoded, digits only): not the reach tables or any other table
(read with SQL), not the audit trail (every field of every event), not the receipts or
external ids, not the log lines on the console, not the keys in SubmitTask, Reach,
GetTask, ListTasks, GetAction and ListActions answers; nor does a key carry the plain
SHA-256 of the keyed parameters, which anyone can recompute from a guessed phone number.
A caller that holds a key still finds its action's trail by it.

Then the secret that keys them is rotated (``docs/SECURITY.md``, "Idempotency keys"): with
the old secret listed in ``REACHSTORE_PII_SECRET_PREVIOUS`` a re-submission finds the task
reserved before the rotation; without it, the same re-submission is a new action.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import httpx
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

SECRET = "pii-key-tests-secret-one-0123456789"
ROTATED = "pii-key-tests-secret-two-0123456789"

EMAIL = "Zhang.Wei@example.com"
MOBILE = "138 0013 8000"
INTL = "+44 20 7946 0958"
NAME_ZH = "张伟"
NAME = "Zhang Wei"
RESIDENT_ID = "11010519491231002X"
CARD = "4111 1111 1111 1111"
ENTITIES = [EMAIL, MOBILE, INTL, NAME_ZH, NAME, RESIDENT_ID, CARD]
PARAMS = {
    "to": EMAIL,
    "name": NAME_ZH,
    "phone": MOBILE,
    "id_number": RESIDENT_ID,
    "card": CARD,
}
WHITELIST = ["to", "name", "phone"]

# Where an entity is held in clear by design: the task's own entity column (ListTasks
# filters on it) and the action's parameters (what the receiver is sent).
CLEAR_BY_DESIGN = {("reach_tasks", "entity_id"), ("reach_actions", "params_json")}


def spellings(value: str) -> set[str]:
    """Every way a key or an event could have written ``value``."""
    digits = "".join(c for c in value if c.isdigit())
    forms = {value, value.lower(), quote(value, safe=""), quote(value.lower(), safe="")}
    forms |= {unicodedata.normalize("NFC", f) for f in forms}
    if len(digits) >= 8:
        forms.add(digits)
    return forms


FORBIDDEN = sorted({form for entity in ENTITIES for form in spellings(entity)})
# The unkeyed digest the key used to carry: recomputable by anyone who guesses the values.
PLAIN_DIGEST = hashlib.sha256(
    json.dumps(
        {name: PARAMS[name] for name in WHITELIST},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
).hexdigest()[:16]


def leaks(text: str) -> list[str]:
    found = [form for form in FORBIDDEN if form in text]
    if PLAIN_DIGEST in text:
        found.append(f"plain digest {PLAIN_DIGEST}")
    return found


def as_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def keys_in(value: Any) -> list[str]:
    """Every idempotency key and external id in a JSON answer, at any depth."""
    out: list[str] = []
    if isinstance(value, dict):
        for name, item in value.items():
            if name in ("idempotency_key", "external_id") and isinstance(item, str):
                out.append(item)
            else:
                out.extend(keys_in(item))
    elif isinstance(value, list):
        for item in value:
            out.extend(keys_in(item))
    return out


def config(receiver: HttpReceiver) -> str:
    return f"""
[channels.hook]
kind = "webhook"
description = "posts to a test receiver"
action_types = ["notify"]
idempotency_params = {json.dumps(WHITELIST)}
window = "day"
[channels.hook.webhook]
url = "{receiver.url}"
idempotency_header = true
read_timeout_s = 2
"""


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpReceiver]:
    # No answer body: the receiver's id falls back to the idempotency key, which is then
    # stored and shown as the action's external id too.
    rx = HttpReceiver(default="status:200").start()
    yield rx
    rx.stop()


def start(folder: Path, receiver: HttpReceiver, env: dict[str, str]) -> RunningSystem:
    reach_config = folder / "reach.toml"
    reach_config.write_text(config(receiver))
    running = RunningSystem(
        folder / "data",
        {
            "REACHSTORE_REACH_CONFIG": str(reach_config),
            "REACHSTORE_AUDIT_READS": "true",
            "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
            "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
            **env,
        },
    )
    running.start()
    return running


def submit(http: httpx.Client, entity: str, **extra: Any) -> dict[str, Any]:
    reply = http.post(
        "/api/v1/reach/tasks",
        json={
            "entity_id": entity,
            "actions": [
                {"name": "notify", "channel": "hook", "action_type": "notify", "params": PARAMS}
            ],
            **extra,
        },
    )
    assert reply.status_code in (200, 202), reply.text
    return reply.json()


def settled(http: httpx.Client, task_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        task = http.get(f"/api/v1/reach/tasks/{task_id}").json()
        if task["task"]["state"] == "succeeded":
            return task
        assert time.monotonic() < deadline, task
        time.sleep(0.1)


def audit_events(http: httpx.Client, **filters: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    token = ""
    while True:
        page = http.get(
            "/api/v1/audit/events", params={**filters, "page_size": 100, "page_token": token}
        ).json()
        events.extend(page["events"])
        token = page["next_page_token"]
        if not token:
            return events


def table_leaks(database: Path) -> list[str]:
    """Every (table, column) of the database holding an entity, outside CLEAR_BY_DESIGN."""
    found = []
    with sqlite3.connect(database) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                if (table, column) in CLEAR_BY_DESIGN:
                    continue
                for (value,) in db.execute(f'SELECT "{column}" FROM "{table}"'):
                    if isinstance(value, bytes):
                        value = value.decode("utf-8", "replace")
                    if isinstance(value, str) and leaks(value):
                        found.append(f"{table}.{column}: {leaks(value)} in {value[:200]!r}")
    return found


def test_no_entity_shows_in_a_key_the_trail_the_tables_or_the_logs(
    tmp_path: Path, receiver: HttpReceiver
) -> None:
    system = start(tmp_path, receiver, {"REACHSTORE_PII_SECRET": SECRET})
    try:
        shown: list[str] = []  # every key and external id an answer carried
        answers: list[dict[str, Any]] = []
        with httpx.Client(base_url=system.http_url, timeout=30.0) as http:
            preview = submit(http, EMAIL, validate_only=True)
            answers.append(preview)
            task_ids = []
            for entity in ENTITIES:
                reply = submit(http, entity)
                answers.append(reply)
                task_ids.append(reply["task"]["task_id"])
            again = submit(http, MOBILE)  # the same intent: the same key, deduplicated
            assert again["deduplicated"] is True
            answers.append(again)
            reached = http.post(
                "/api/v1/reach:reach",
                json={
                    "entity_id": "+86 139-1234-5678",
                    "action": {"channel": "hook", "action_type": "notify", "params": PARAMS},
                },
            )
            assert reached.status_code in (200, 202), reached.text
            answers.append(reached.json())
            task_ids.append(reached.json()["task_id"])
            with grpc.insecure_channel(system.reach_addr) as channel:
                stub = pb_grpc.ReachServiceStub(channel)
                over_grpc = stub.SubmitTask(
                    pb.SubmitTaskRequest(
                        entity_id=f"{NAME} <{EMAIL}>",
                        actions=[
                            json_format.ParseDict(
                                {"name": "notify", "channel": "hook", "action_type": "notify",
                                 "params": PARAMS},
                                pb.ActionSpec(),
                            )
                        ],
                    ),
                    timeout=30,
                )  # fmt: skip
                answers.append(as_dict(over_grpc))
                task_ids.append(over_grpc.task.task_id)
                for task_id in task_ids:
                    done = settled(http, task_id)
                    answers.append(done)
                    for action in done["task"]["actions"]:
                        answers.append(
                            http.get(f"/api/v1/reach/actions/{action['action_id']}").json()
                        )
                        got = stub.GetAction(pb.GetActionRequest(action_id=action["action_id"]))
                        answers.append(as_dict(got))
                listed = stub.ListTasks(pb.ListTasksRequest(page_size=100))
                answers.append(as_dict(listed))
            answers.append(http.get("/api/v1/reach/tasks", params={"page_size": 100}).json())
            answers.append(http.get("/api/v1/reach/actions", params={"page_size": 100}).json())
            # ListTasks still finds a task by its entity, as the caller typed it.
            by_entity = http.get("/api/v1/reach/tasks", params={"entity_id": NAME_ZH}).json()
            assert [t["task_id"] for t in by_entity["tasks"]] == [task_ids[ENTITIES.index(NAME_ZH)]]
            for answer in answers:
                shown.extend(keys_in(answer))
            assert len(shown) > 30
            for text in shown:
                assert not leaks(text), (text, leaks(text))
            # What a receipt holds and what the receiver was sent as the key.
            receipts = [r for a in answers for r in a.get("action", {}).get("receipts", [])]
            assert receipts
            for receipt in receipts:
                assert not leaks(json.dumps(receipt, ensure_ascii=False)), receipt
            sent = [d.headers["idempotency-key"] for d in receiver.records]
            assert len(sent) >= len(task_ids)
            for key in sent:
                assert not leaks(key), key

            # A caller holding a key finds its action's trail by it, once shipped.
            key = again["task"]["actions"][0]["idempotency_key"]
            deadline = time.monotonic() + 30
            while True:
                methods = {e["method"] for e in audit_events(http, idempotency_key=key)}
                if {"SubmitTask", "action.submitting", "action.succeeded"} <= methods:
                    break
                assert time.monotonic() < deadline, methods
                time.sleep(0.2)
            # The trail: every field of every event, once every action's outcome is in.
            while len(audit_events(http, method="action.succeeded")) < len(task_ids):
                assert time.monotonic() < deadline
                time.sleep(0.2)
            events = audit_events(http)
            for event in events:
                text = json.dumps(event, ensure_ascii=False)
                assert not leaks(text), (leaks(text), text[:600])

        # The database, every table but the two columns that hold the entity by design.
        assert table_leaks(system.data_dir / "reachstore.db") == []
    finally:
        assert system.stop() == 0, "".join(system.output[-40:])
    # The log lines and the console of the whole run.
    output = "".join(system.output)
    assert "reach" in output
    assert not leaks(output), leaks(output)


def test_a_rotated_secret_still_finds_what_the_previous_one_reserved(
    tmp_path: Path, receiver: HttpReceiver
) -> None:
    def run(env: dict[str, str]) -> dict[str, Any]:
        system = start(tmp_path, receiver, env)
        try:
            with httpx.Client(base_url=system.http_url, timeout=30.0) as http:
                return submit(http, EMAIL)
        finally:
            assert system.stop() == 0, "".join(system.output[-40:])

    first = run({"REACHSTORE_PII_SECRET": SECRET})
    assert first["deduplicated"] is False
    # Rotated, the old secret kept for look-ups: the same intent is the same task.
    rotated = run({"REACHSTORE_PII_SECRET": ROTATED, "REACHSTORE_PII_SECRET_PREVIOUS": SECRET})
    assert rotated["deduplicated"] is True
    assert rotated["task"]["task_id"] == first["task"]["task_id"]
    first_key = first["task"]["actions"][0]["idempotency_key"]
    assert rotated["task"]["actions"][0]["idempotency_key"] == first_key
    # Without the old secret the earlier key is out of reach: a new action, as documented.
    forgotten = run({"REACHSTORE_PII_SECRET": ROTATED})
    assert forgotten["deduplicated"] is False
    assert forgotten["task"]["task_id"] != first["task"]["task_id"]
    assert forgotten["task"]["actions"][0]["idempotency_key"] != first_key


@pytest.mark.parametrize(
    ("previous", "rule"),
    [("short", "at least 16 bytes"), (f"{SECRET},", "an empty entry")],
)
def test_a_bad_previous_secret_stops_up_naming_it(
    tmp_path: Path, receiver: HttpReceiver, previous: str, rule: str
) -> None:
    system = RunningSystem(
        tmp_path / "data",
        {"REACHSTORE_PII_SECRET": SECRET, "REACHSTORE_PII_SECRET_PREVIOUS": previous},
    )
    with pytest.raises(RuntimeError, match="exited") as refused:
        system.start()
    assert "REACHSTORE_PII_SECRET_PREVIOUS" in str(refused.value)
    assert rule in str(refused.value)
    assert SECRET not in str(refused.value)  # a secret is never repeated back

"""Raw personal data sent straight to a real audit service's AppendEvents, by a deployment
service key that skipped masking, on SQLite and PostgreSQL: read back with SQL, no stored
column holds any of it.

The audit service masks again on arrival, and since the append path was made cheaper it
tells a batch with nothing to mask from one with something in one pass over the whole
batch (``Masker.mask_json``, ``Masker.mask_texts``). So the raw values here hide among
many clean events, in every place a value can sit: free text, a sensitive field, a key, a
list, a number, full-width digits, the idempotency key. Each event must be stored exactly
as masking it one value at a time stores it (``Masker.mask_value``), the clean ones
unchanged, and the chain must verify.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from google.protobuf import json_format

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.audit.v1 import audit_service_pb2_grpc as pb_grpc
from reachstore_server.audit.signing import CheckpointKeys, PrivateKey
from reachstore_server.audit.store import AuditStore
from reachstore_server.common.canonical import canonical_json
from reachstore_server.common.pii import Masker
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.storage.engine import make_engine, make_sessions
from tests.e2e.processes import ServiceProcess, shipper_key

pytestmark = pytest.mark.e2e

PII_SECRET = "attack17-unmasked-append-pii-secret"
RAW = {
    "phone": "13812345678",
    "spaced_phone": "+86 139 1234 5678",
    "intl": "+44 20 7946 0958",
    "email": "li.lei@example.com",
    "cn_id": "11010519491231002X",
    "card": "4111 1111 1111 1111",
    "full_width": "１３７１２３４５６７８",
    "name": "Han Meimei",
}
NUMBER_PHONE = 13612345678  # a phone sent as a number


def clean_params(n: int) -> dict[str, Any]:
    """What a service that masked sends: tokens where personal data was, an order number."""
    return {
        "channel": "sms-cn",
        "params": {
            "phone": "[phone:0a1b2c3d]",
            "customer_name": "[field:4e5f6a7b]",
            "order_id": f"ORD-2026-{n:08d}",
            "amount": f"{n % 997}.50",
        },
    }


def raw_params(n: int) -> dict[str, Any]:
    """Each raw value somewhere else in the parameters."""
    places: list[dict[str, Any]] = [
        {"note": f"call {RAW['phone']} today"},
        {"note": f"or {RAW['spaced_phone']}"},
        {"items": ["ok", {"contact": f"ring {RAW['intl']}"}]},
        {"reply_to": RAW["email"]},
        {"document": {"text": f"id {RAW['cn_id']} on file"}},
        {"payment": f"card {RAW['card']} charged"},
        {"sms": f"手机{RAW['full_width']}已发送"},
        {"customer_name": RAW["name"]},
        {"by_contact": {RAW["email"]: "preferred"}},
        {"count": NUMBER_PHONE},
    ]
    return {**clean_params(n), **places[n % len(places)]}


def event(n: int, params: dict[str, Any], idempotency_key: str) -> pb.AuditEvent:
    message = pb.AuditEvent(
        event_id=f"attack17-{n:05d}",
        time=rfc3339(dt.datetime.now(dt.UTC)),
        tenant=("acme", "globex")[n % 2],
        caller_key_id="k_attack17",
        service="reach",
        method="SubmitTask",
        idempotency_key=idempotency_key,
        result_status="ok",
        duration_ms=n,
        trace_id=f"{n:032x}",
    )
    json_format.ParseDict(params, message.params)
    return message


def audit_settings(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest, pii_secret: str
) -> tuple[dict[str, str], str, PrivateKey]:
    """The settings of an audit service on a new SQLite file or PostgreSQL database (its
    environment, its database URL, its signing key), call-rate limits off."""
    folder = tmp_path / "data"
    folder.mkdir()
    url = (
        f"sqlite:///{folder / 'reachstore.db'}"
        if engine == "sqlite"
        else request.getfixturevalue("pg_database")
    )
    key = PrivateKey.generate()
    env = {
        "REACHSTORE_DATA_DIR": str(folder),
        "REACHSTORE_DATABASE_URL": url,
        "REACHSTORE_AUDIT_SIGNING_KEY": key.pem(),
        "REACHSTORE_PII_SECRET": pii_secret,
        "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
    }
    return env, url, key


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_raw_personal_data_sent_to_append_events_never_reaches_the_table(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env, url, key = audit_settings(engine, tmp_path, request, PII_SECRET)
    audit = ServiceProcess(
        "reachstore_server.audit.main", "reachstore.audit.v1.AuditService", tmp_path, "audit", env
    ).start()
    sent: dict[str, tuple[dict[str, Any], str]] = {}
    try:
        metadata = [("authorization", f"Bearer {shipper_key(env)}")]
        stub = pb_grpc.AuditServiceStub(audit.channel)
        # A batch with nothing to mask, then batches where one event in 25 holds raw data
        # (and one idempotency key in 50 an e-mail address) among clean ones.
        for first, raw_every in ((0, 0), (200, 25), (400, 25)):
            batch = []
            for n in range(first, first + 200):
                dirty = raw_every and n % raw_every == 7
                params = raw_params(n // raw_every) if dirty else clean_params(n)
                key_text = f"mail {RAW['email']}" if raw_every and n % 50 == 11 else f"k-{n}"
                batch.append(event(n, params, key_text))
                sent[f"attack17-{n:05d}"] = (params, key_text)
            reply = stub.AppendEvents(
                pb.AppendEventsRequest(events=batch), timeout=30, metadata=metadata
            )
            assert (reply.appended, reply.duplicates) == (200, 0)
    finally:
        assert audit.stop() == 0, audit.log_tail()

    db = make_engine(url)
    try:
        with db.connect() as conn:
            rows = conn.execute(sqlalchemy.text("SELECT * FROM audit_events")).mappings().all()
        store = AuditStore(make_sessions(db))
        for tenant in ("acme", "globex"):
            report = store.verify(tenant, CheckpointKeys(key.public))
            assert report.first_break is None, report.first_break
            assert report.events_checked == 300
    finally:
        db.dispose()
    stored = "\n".join(json.dumps(dict(row), default=str) for row in rows)
    for kind, value in RAW.items():
        for form in {value, value.replace(" ", ""), value.replace("+", "")}:
            assert form not in stored, f"raw {kind} stored"
    assert str(NUMBER_PHONE) not in stored, "a phone sent as a number stored"
    # Stored exactly as masking each value on its own stores it; clean events unchanged.
    masker = Masker(PII_SECRET.encode())
    by_id = {row["event_id"]: row for row in rows}
    for event_id, (params, key_text) in sent.items():
        row = by_id[event_id]
        assert row["params_json"] == canonical_json(masker.mask_value(params)), event_id
        assert row["idempotency_key"] == masker.mask_text(key_text), event_id
    assert sum(row["params_json"] != canonical_json(sent[i][0]) for i, row in by_id.items()
               if i in sent) == 16  # fmt: skip
    assert "[phone:" in stored and "[email:" in stored and "[cn_id:" in stored
    assert "[card:" in stored and "[field:" in stored

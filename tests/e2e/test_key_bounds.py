"""A tenant's admin attacking a real `reachstore up --require-keys` from outside: keys it
makes over the API can do no more than itself (scopes, namespace grants, channel
allow-list, groups, lifetime), `auditor` and `internal` keys come only from the command
line, and `AppendEvents` keeps a key in its own tenant's trail, recording every call."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from reachstore.audit.v1 import audit_service_pb2 as audit_pb
from reachstore.audit.v1 import audit_service_pb2_grpc as audit_grpc
from tests.e2e.attack_support import (
    audit_channel,
    bearer,
    cli,
    cli_key,
    error_of,
    http_client,
    same_refusal,
)
from tests.e2e.system import RunningSystem

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    env = {
        "REACHSTORE_REQUIRE_KEYS": "true",
        "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
    }
    running = RunningSystem(tmp_path_factory.mktemp("key-bounds"), env)
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def audit(system: RunningSystem) -> Iterator[audit_grpc.AuditServiceStub]:
    with audit_channel(system) as channel:
        yield audit_grpc.AuditServiceStub(channel)


def _event(tenant: str, **fields: Any) -> audit_pb.AuditEvent:
    return audit_pb.AuditEvent(
        event_id=uuid.uuid4().hex,
        time=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        tenant=tenant,
        service="admin",
        method="CreateKey",
        **fields,
    )


# --- scopes ------------------------------------------------------------------------------


def test_an_admin_key_cannot_mint_a_scope_it_does_not_hold(system: RunningSystem) -> None:
    admin = cli_key(system, "acme", "read,write,admin")["secret"]
    with http_client(system, admin) as http:
        for scopes in (["auditor"], ["internal"], ["read", "reach"], ["operator"]):
            reply = http.post("/api/v1/keys", json={"name": "escalate", "scopes": scopes})
            error = error_of(reply, 403, "KEY_EXCEEDS_CREATOR")
            assert error["structured_data"]["field"] == "scopes", error
        held = [k["scopes"] for k in http.get("/api/v1/keys").json()["keys"]]
        assert all(set(s) <= {"read", "write", "admin"} for s in held), held
        # What it holds it may pass on.
        assert http.post("/api/v1/keys", json={"scopes": ["read"]}).status_code == 200


def test_auditor_and_internal_keys_come_only_from_the_command_line(
    system: RunningSystem,
) -> None:
    # Even a key that holds them (the operator made it with the command line) cannot pass
    # them on over the API: one leaked admin key must not become every tenant's trail.
    strong = cli_key(system, "acme", "read,admin,auditor,internal")["secret"]
    with http_client(system, strong) as http:
        for scope in ("auditor", "internal"):
            reply = http.post("/api/v1/keys", json={"scopes": ["read", scope]})
            error = error_of(reply, 403, "KEY_EXCEEDS_CREATOR")
            assert "reachstore keys create" in error["message"], error
    made = cli_key(system, "acme", "read,auditor")
    assert made["key"]["scopes"] == ["auditor", "read"]


# --- grants ------------------------------------------------------------------------------


def test_a_new_key_keeps_its_creators_grants(system: RunningSystem) -> None:
    root = cli_key(system, "acme", "read,write,admin")["secret"]
    with http_client(system, root) as http:
        assert http.post("/api/v1/namespaces", json={"name": "private"}).status_code in (200, 409)
    creator = cli_key(
        system,
        "acme",
        "read,write,admin",
        "--namespaces",
        "docs-*",
        "--channels",
        "notify-*",
        "--groups",
        "ops",
        "--ttl-seconds",
        "3600",
    )
    creator_expires = dt.datetime.fromisoformat(creator["key"]["expires_at"])
    with http_client(system, creator["secret"]) as http:
        refused = {
            "namespaces[0]": {"namespaces": ["*"]},
            "namespaces[1]": {"namespaces": ["docs-a", "private"]},
            "channels[0]": {"channels": ["pay-*"]},
            "groups[0]": {"groups": ["finance"]},
            "ttl_seconds": {"ttl_seconds": 7200},
        }
        for field, asked in refused.items():
            reply = http.post("/api/v1/keys", json={"scopes": ["read"], **asked})
            error = error_of(reply, 403, "KEY_EXCEEDS_CREATOR")
            assert error["structured_data"]["field"] == field, error
        # Nothing asked: as wide as the creator, never wider ("[]" is not "everything").
        made = http.post("/api/v1/keys", json={"name": "inherits", "scopes": ["read"]})
        assert made.status_code == 200, made.text
        key = made.json()["key"]
        assert (key["namespaces"], key["channels"]) == (["docs-*"], ["notify-*"]), key
        assert dt.datetime.fromisoformat(key["expires_at"]) <= creator_expires, key
        narrower = http.post(
            "/api/v1/keys",
            json={
                "scopes": ["read"],
                "namespaces": ["docs-a", "docs-b*"],
                "channels": ["notify-mail"],
                "groups": ["ops"],
                "ttl_seconds": 60,
            },
        )
        assert narrower.status_code == 200, narrower.text
    with http_client(system, made.json()["secret"]) as inherited:
        reply = inherited.get("/api/v1/namespaces/private")
        error_of(reply, 404, "NAMESPACE_UNAVAILABLE")


# --- the audit trail -----------------------------------------------------------------------


def test_append_events_keeps_a_key_in_its_own_tenant(
    system: RunningSystem, audit: audit_grpc.AuditServiceStub
) -> None:
    acme_internal = cli_key(system, "acme", "internal")["secret"]
    auditor = cli_key(system, "acme", "read,auditor")["secret"]
    forged = _event("globex", caller_key_id="globex-admin")
    for batch in ([forged], [_event("acme"), forged]):
        with pytest.raises(grpc.RpcError) as refused:
            audit.AppendEvents(
                audit_pb.AppendEventsRequest(events=batch),
                timeout=10,
                metadata=bearer(acme_internal),
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, refused.value.details()
    with http_client(system, acme_internal) as http:
        reply = http.post(
            "/api/v1/audit/events:append",
            json={"events": [{**_as_json(forged), "event_id": uuid.uuid4().hex}]},
        )
        error = error_of(reply, 403, "AUDIT_TENANT_NOT_ALLOWED")
        assert error["structured_data"]["field"] == "events[0].tenant", error
    with http_client(system, auditor) as http:
        error_of(http.get(f"/api/v1/audit/events/{forged.event_id}"), 404, "AUDIT_EVENT_NOT_FOUND")
    # Its own tenant's events it may append.
    own = audit.AppendEvents(
        audit_pb.AppendEventsRequest(events=[_event("acme")]),
        timeout=10,
        metadata=bearer(acme_internal),
    )
    assert own.appended == 1


def test_only_a_deployment_service_key_appends_for_every_tenant(
    system: RunningSystem, audit: audit_grpc.AuditServiceStub
) -> None:
    service = cli_key(system, "system", "", "--service", "--name", "shipper")
    assert (service["key"]["tenant"], service["key"]["scopes"]) == ("system", ["internal"])
    done = audit.AppendEvents(
        audit_pb.AppendEventsRequest(events=[_event("globex"), _event("acme")]),
        timeout=10,
        metadata=bearer(service["secret"]),
    )
    assert done.appended == 2
    # The reserved tenant holds deployment service keys and nothing else.
    ordinary = cli(system, "keys", "create", "--tenant", "system", "--scopes", "read,admin")
    assert ordinary.returncode == 2 and "--service" in ordinary.stderr, ordinary


def test_append_events_is_audited(
    system: RunningSystem, audit: audit_grpc.AuditServiceStub
) -> None:
    appender = cli_key(system, "acme", "internal")
    auditor = cli_key(system, "acme", "read,auditor")["secret"]
    secret, key_id = appender["secret"], appender["key"]["key_id"]
    appended = _event("acme")
    audit.AppendEvents(
        audit_pb.AppendEventsRequest(events=[appended]), timeout=10, metadata=bearer(secret)
    )
    with pytest.raises(grpc.RpcError):
        audit.AppendEvents(
            audit_pb.AppendEventsRequest(events=[_event("globex")]),
            timeout=10,
            metadata=bearer(secret),
        )
    with http_client(system, auditor) as http:
        events = http.get(
            "/api/v1/audit/events",
            params={"tenant": "acme", "method": "AppendEvents", "caller_key_id": key_id},
        ).json()["events"]
    outcomes = sorted((e["result_status"], e["error_code"]) for e in events)
    assert outcomes == [("PERMISSION_DENIED", "AUDIT_TENANT_NOT_ALLOWED"), ("ok", "")], events
    ok = next(e for e in events if e["result_status"] == "ok")
    assert ok["service"] == "audit" and ok["params"]["event_ids"] == [appended.event_id], ok


def _as_json(event: audit_pb.AuditEvent) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "time": event.time,
        "tenant": event.tenant,
        "caller_key_id": event.caller_key_id,
        "service": event.service,
        "method": event.method,
    }


def test_a_restricted_admin_manages_only_keys_within_its_grants(system: RunningSystem) -> None:
    root = cli_key(system, "acme", "read,write,admin", "--name", "root admin")
    wide = cli_key(system, "acme", "read", "--namespaces", "private-*", "--name", "private")
    docs = cli_key(system, "acme", "read,admin", "--namespaces", "docs-*", "--name", "docs admin")
    with http_client(system, docs["secret"]) as http:
        mine = http.post("/api/v1/keys", json={"scopes": ["read"], "namespaces": ["docs-a"]})
        assert mine.status_code == 200, mine.text
        listed, token = set(), ""
        while True:
            page = http.get("/api/v1/keys", params={"page_size": 100, "page_token": token}).json()
            listed |= {k["key_id"] for k in page["keys"]}
            if not (token := page["next_page_token"]):
                break
        assert mine.json()["key"]["key_id"] in listed and docs["key"]["key_id"] in listed
        for other in (root, wide):
            assert other["key"]["key_id"] not in listed, f"it lists {other['key']['name']!r}"
            same_refusal(
                http.post(f"/api/v1/keys/{other['key']['key_id']}:revoke", json={}),
                http.post("/api/v1/keys/0123456789abcdef:revoke", json={}),
                "key_id",
            )
        revoked = http.post(f"/api/v1/keys/{mine.json()['key']['key_id']}:revoke", json={})
        assert revoked.status_code == 200, revoked.text
    with http_client(system, root["secret"]) as http:
        assert http.get("/api/v1/keys").status_code == 200, "the root admin key was revoked"

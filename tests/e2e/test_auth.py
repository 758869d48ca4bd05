"""API keys, scopes, grants and tenant isolation, over REST and gRPC, with keys required."""

from __future__ import annotations

import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import reachstore
from reachstore.query.v1 import query_service_pb2, query_service_pb2_grpc
from tests.e2e.conftest import wait_task
from tests.e2e.system import RunningSystem


def make_key(system: RunningSystem, tenant: str, scopes: str, *extra: str) -> str:
    """Creates a key the way an operator does, with the command line."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reachstore_server.cli",
            "keys",
            "create",
            "--data-dir",
            str(system.data_dir),
            "--tenant",
            tenant,
            "--scopes",
            scopes,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1].rsplit(" ", 1)[-1]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    # Generous call rates: these tests hammer on purpose; test_limits.py tests the limits.
    env = {
        "REACHSTORE_REQUIRE_KEYS": "true",
        "REACHSTORE_LIMIT_KEY_QUERY_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_QUERY_RATE": "0",
        "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
    }
    system = RunningSystem(tmp_path_factory.mktemp("secured"), env)
    system.start()
    yield system
    assert system.stop() == 0


@pytest.fixture(scope="module")
def keys(secured: RunningSystem) -> dict[str, str]:
    return {
        "acme": make_key(secured, "acme", "read,write,admin", "--name", "acme admin"),
        "globex": make_key(secured, "globex", "read,write,admin"),
        "acme-reader": make_key(secured, "acme", "read"),
        "acme-docs": make_key(secured, "acme", "read,write", "--namespaces", "docs-*"),
    }


def _client(system: RunningSystem, key: str | None = None, header: str = "bearer") -> httpx.Client:
    headers = {}
    if key is not None:
        headers = {"Authorization": f"Bearer {key}"} if header == "bearer" else {"X-API-Key": key}
    return httpx.Client(base_url=system.http_url, timeout=30, headers=headers)


def _error(reply: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code
    return error


def _ingest(http: httpx.Client, namespace: str, doc_id: str, text: str) -> None:
    http.post("/api/v1/namespaces", json={"name": namespace})
    reply = http.post(
        f"/api/v1/namespaces/{namespace}/documents",
        json={"document": {"document_id": doc_id, "text": text}, "on_duplicate": "overwrite"},
    )
    assert reply.status_code == 202, reply.text
    assert wait_task(http, reply.json()["task"]["task_id"])["state"] == "completed"


QUERY = {"namespaces": ["demo"], "query": "semantic storage"}


def test_health_answers_without_a_key(secured: RunningSystem) -> None:
    assert httpx.get(f"{secured.http_url}/healthz").status_code == 200
    with grpc.insecure_channel(secured.query_addr) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "AUTH_MISSING"),
        ({"Authorization": "Bearer nope"}, "AUTH_MALFORMED"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "AUTH_MALFORMED"),
        ({"Authorization": "Bearer"}, "AUTH_MALFORMED"),
        ({"X-API-Key": "rsk_short"}, "AUTH_MALFORMED"),
        (
            {"Authorization": f"Bearer rsk_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"},
            "AUTH_INVALID_KEY",
        ),
    ],
)
def test_credential_problems_are_401_in_the_auth_category(
    secured: RunningSystem, headers, code
) -> None:  # type: ignore[no-untyped-def]
    reply = httpx.post(f"{secured.http_url}/api/v1/query", json=QUERY, headers=headers, timeout=30)
    error = _error(reply, 401, code)
    assert (error["category"], error["retryable"]) == ("auth", False)


def test_a_header_that_is_not_ascii_is_a_clean_401(secured: RunningSystem) -> None:
    reply = httpx.post(
        f"{secured.http_url}/api/v1/query",
        json=QUERY,
        timeout=30,
        headers={"Authorization": "Bearer rsk_é".encode()},
    )
    _error(reply, 401, "AUTH_MALFORMED")


def test_a_valid_key_works_as_bearer_and_as_x_api_key(secured: RunningSystem, keys) -> None:  # type: ignore[no-untyped-def]
    for header in ("bearer", "x-api-key"):
        with _client(secured, keys["acme"], header) as http:
            reply = http.post("/api/v1/query", json={"namespaces": ["nope"], "query": "x"})
            assert reply.status_code == 200, reply.text


def test_grpc_callers_present_the_key_as_metadata(secured: RunningSystem, keys) -> None:  # type: ignore[no-untyped-def]
    with grpc.insecure_channel(secured.query_addr) as channel:
        stub = query_service_pb2_grpc.QueryServiceStub(channel)
        request = query_service_pb2.QueryRequest(namespaces=["nope"], query="x")
        with pytest.raises(grpc.RpcError) as missing:
            stub.Query(request, timeout=10)
        assert missing.value.code() == grpc.StatusCode.UNAUTHENTICATED
        reply = stub.Query(
            request, timeout=10, metadata=[("authorization", f"Bearer {keys['acme']}")]
        )
        assert reply.meta.coverage_ratio == 0.0


def test_a_key_without_the_scope_is_403(secured: RunningSystem, keys) -> None:  # type: ignore[no-untyped-def]
    with _client(secured, keys["acme-reader"]) as http:
        error = _error(
            http.post("/api/v1/namespaces", json={"name": "x"}), 403, "AUTH_SCOPE_MISSING"
        )
        assert error["structured_data"]["required_scope"] == "write"
        _error(http.get("/api/v1/keys"), 403, "AUTH_SCOPE_MISSING")
        assert (
            http.post("/api/v1/query", json={"namespaces": ["x"], "query": "y"}).status_code == 200
        )


def test_keys_are_managed_over_the_api_and_revocation_takes_effect(
    secured: RunningSystem, keys
) -> None:  # type: ignore[no-untyped-def]
    with _client(secured, keys["acme"]) as admin:
        created = admin.post("/api/v1/keys", json={"name": "temp", "scopes": ["read"]}).json()
        secret, key_id = created["secret"], created["key"]["key_id"]
        assert created["key"]["tenant"] == "acme" and secret.startswith(f"rsk_{key_id}_")
        listed = admin.get("/api/v1/keys").json()["keys"]
        assert key_id in {k["key_id"] for k in listed}
        assert all("secret" not in k for k in listed)
        with _client(secured, secret) as temp:
            assert (
                temp.post("/api/v1/query", json={"namespaces": ["x"], "query": "y"}).status_code
                == 200
            )
            revoked = admin.post(f"/api/v1/keys/{key_id}:revoke", json={}).json()["key"]
            assert revoked["revoked_at"]
            _error(
                temp.post("/api/v1/query", json={"namespaces": ["x"], "query": "y"}),
                401,
                "AUTH_KEY_REVOKED",
            )
    with _client(secured, keys["globex"]) as other:  # another tenant cannot see or revoke it
        assert key_id not in {k["key_id"] for k in other.get("/api/v1/keys").json()["keys"]}
        _error(other.post(f"/api/v1/keys/{key_id}:revoke", json={}), 404, "KEY_NOT_FOUND")


def test_an_expired_key_is_refused_as_expired(secured: RunningSystem) -> None:
    key = make_key(secured, "acme", "read", "--ttl-seconds", "1")
    with _client(secured, key) as http:
        deadline = time.monotonic() + 30
        while (
            reply := http.post("/api/v1/query", json={"namespaces": ["x"], "query": "y"})
        ).status_code == 200:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        _error(reply, 401, "AUTH_KEY_EXPIRED")


def test_two_tenants_with_the_same_names_never_see_each_other(secured: RunningSystem, keys) -> None:  # type: ignore[no-untyped-def]
    with _client(secured, keys["acme"]) as acme, _client(secured, keys["globex"]) as globex:
        _ingest(acme, "shared", "d1", "Acme sells anvils to coyotes.")
        _ingest(globex, "shared", "d1", "Globex builds volcano lairs.")
        for http, mine, theirs in [(acme, "anvils", "volcano"), (globex, "volcano", "anvils")]:
            results = http.post(
                "/api/v1/query", json={"namespaces": ["shared"], "query": theirs, "top_k": 5}
            ).json()["results"]
            assert results and all(mine in r["text"] for r in results)
            assert http.get("/api/v1/namespaces/shared").json()["namespace"]["document_count"] == 1
            assert (
                mine
                in http.get("/api/v1/namespaces/shared/documents/d1").json()["document"]["text"]
            )
        acme_task = acme.post(
            "/api/v1/namespaces/shared/documents", json={"document": {"text": "x"}}
        ).json()["task"]["task_id"]
        _error(globex.get(f"/api/v1/tasks/{acme_task}"), 404, "TASK_NOT_FOUND")
        _error(globex.post(f"/api/v1/tasks/{acme_task}:cancel", json={}), 404, "TASK_NOT_FOUND")
    with reachstore.Client(secured.query_addr, secured.ingest_addr) as sdk:
        with pytest.raises(reachstore.AuthError) as missing:
            sdk.search(["shared"], "anvils")
        assert missing.value.code == "AUTH_MISSING"
    for tenant, mine, theirs in [("acme", "anvils", "volcano"), ("globex", "volcano", "anvils")]:
        with reachstore.Client(
            secured.query_addr, secured.ingest_addr, api_key=keys[tenant]
        ) as sdk:
            results = sdk.search(["shared"], theirs, top_k=5).results
            assert not any(theirs in r.text for r in results)
            assert mine in sdk.get_document("shared", "d1").text
            if tenant == "globex":  # acme's count is still moving: its last upload is queued
                assert sdk.get_namespace("shared").document_count == 1
                assert [d.document_id for d in sdk.list_documents("shared")] == ["d1"]
    with reachstore.Client(
        secured.query_addr, secured.ingest_addr, api_key=keys["acme-reader"]
    ) as reader:
        with pytest.raises(reachstore.AuthError) as scope:
            reader.create_namespace("nope")
        assert scope.value.code == "AUTH_SCOPE_MISSING"


def test_outside_its_grants_a_namespace_looks_missing(secured: RunningSystem, keys) -> None:  # type: ignore[no-untyped-def]
    with _client(secured, keys["acme"]) as admin:
        _ingest(admin, "docs-a", "a", "Docs about gardens.")
        _ingest(admin, "private", "p", "Private notes about gardens.")
    with _client(secured, keys["acme-docs"]) as http:
        meta = http.post(
            "/api/v1/query", json={"namespaces": ["docs-a", "private", "never"], "query": "gardens"}
        ).json()["meta"]
        assert meta["namespaces_succeeded"] == ["docs-a"]
        hidden, missing = meta["namespaces_failed"]
        for failure in (hidden, missing):
            (
                failure.pop("namespace"),
                failure.pop("message"),
                failure["structured_data"].pop("namespace"),
            )
        assert hidden == missing
        star = http.post("/api/v1/query", json={"namespaces": ["*"], "query": "gardens"}).json()[
            "meta"
        ]
        assert star["namespaces_queried"] == ["docs-a"]
        a = http.get("/api/v1/namespaces/private/documents/p")
        b = http.get("/api/v1/namespaces/never/documents/p")
        assert a.status_code == b.status_code == 404
        assert a.json()["error"]["code"] == b.json()["error"]["code"] == "NAMESPACE_UNAVAILABLE"
        names = [n["name"] for n in http.get("/api/v1/namespaces").json()["namespaces"]]
        assert names == ["docs-a"]
        accepted = http.post(
            "/api/v1/namespaces/private/documents", json={"document": {"text": "x"}}
        )
        assert accepted.status_code == 202 and accepted.json()["task"]["state"] == "queued"
        failed = wait_task(http, accepted.json()["task"]["task_id"])
        assert failed["error"]["error_code"] == "NAMESPACE_UNAVAILABLE"
        _error(
            http.post("/api/v1/namespaces", json={"name": "elsewhere"}), 403, "AUTH_SCOPE_MISSING"
        )


def _timed(http: httpx.Client, path: str) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    reply = http.get(path)
    return time.perf_counter() - started, reply


def _median(values: list[float]) -> float:
    return statistics.median(values)


# Compares response times: with other tests loading the machine the noise swamps them.
@pytest.mark.alone
def test_missing_and_not_yours_cannot_be_told_apart(secured: RunningSystem, keys) -> None:  # type: ignore[no-untyped-def]
    with _client(secured, keys["acme"]) as acme:
        _ingest(acme, "acme-only", "doc", "Only acme has this.")
    with _client(secured, keys["globex"]) as globex:
        for exists, missing in [
            ("/api/v1/namespaces/acme-only", "/api/v1/namespaces/never-made"),
            (
                "/api/v1/namespaces/acme-only/documents/doc",
                "/api/v1/namespaces/never-made/documents/doc",
            ),
            ("/api/v1/namespaces/acme-only/documents", "/api/v1/namespaces/never-made/documents"),
        ]:
            a_times, b_times = [], []
            for _ in range(120):  # interleaved, so drift in the machine's load hits both alike
                a, a_reply = _timed(globex, exists)
                b, b_reply = _timed(globex, missing)
                a_times.append(a)
                b_times.append(b)
            assert a_reply.status_code == b_reply.status_code == 404
            a_error, b_error = a_reply.json()["error"], b_reply.json()["error"]
            for error in (a_error, b_error):
                (
                    error.pop("request_id"),
                    error.pop("message"),
                    error["structured_data"].pop("namespace"),
                )
            assert a_error == b_error
            noise = max(
                abs(_median(a_times[::2]) - _median(a_times[1::2])),
                abs(_median(b_times[::2]) - _median(b_times[1::2])),
            )
            # Same look-up on both paths; the floor covers timer and scheduler jitter.
            assert abs(_median(a_times) - _median(b_times)) <= 3 * noise + 0.0003, (exists, noise)
        deleted = globex.delete("/api/v1/namespaces/acme-only")
        never = globex.delete("/api/v1/namespaces/never-made")
        assert deleted.status_code == never.status_code == 404
    with _client(secured, keys["acme"]) as acme:
        assert acme.get("/api/v1/namespaces/acme-only").status_code == 200


def test_guessing_keys_neither_locks_out_nor_breaks_legitimate_callers(
    secured: RunningSystem, keys
) -> None:  # type: ignore[no-untyped-def]
    codes: list[str] = []

    def attack() -> None:
        with httpx.Client(base_url=secured.http_url, timeout=30) as http:
            for _ in range(300):
                guess = f"rsk_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"
                reply = http.post(
                    "/api/v1/query", json=QUERY, headers={"Authorization": f"Bearer {guess}"}
                )
                codes.append(reply.json()["error"]["code"])

    attacker = threading.Thread(target=attack)
    attacker.start()
    statuses = []
    with _client(secured, keys["acme"]) as http:
        while attacker.is_alive() or not statuses:
            statuses.append(
                http.post("/api/v1/query", json={"namespaces": ["x"], "query": "y"}).status_code
            )
        attacker.join()
        assert set(codes) == {"AUTH_INVALID_KEY"} and len(codes) == 300
        assert set(statuses) == {200}, "a legitimate caller was refused during the attack"
        assert (
            http.post("/api/v1/query", json={"namespaces": ["x"], "query": "y"}).status_code == 200
        )


def test_the_key_up_made_for_seeding_is_revoked_once_used(secured: RunningSystem) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reachstore_server.cli",
            "keys",
            "list",
            "--data-dir",
            str(secured.data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [line] = [line for line in done.stdout.splitlines() if "seeds the demo namespace" in line]
    assert " revoked " in line

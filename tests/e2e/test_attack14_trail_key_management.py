"""A restricted key reading its tenant's audit trail on a real `reachstore up
--require-keys`: key management stays hidden from it (docs/SECURITY.md, "Grants inside a
tenant": "key management, calls naming only an id ... stays hidden from it").

The rule in ``reachstore_server/audit/visibility.py`` reads an event's subject off its parameters,
and a ``CreateKey`` event carries the new key's ``namespaces``: an admin making a key
granted ``public-payroll`` leaves an event that names only namespaces inside a
``public-*`` grant, so the `public-*` reader is shown which key the admin holds, that it
made a key, with which scopes and grants. Both the listing and ``GetEvent`` must answer
such an event as a missing one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.attack_support import cli_key, error_of, http_client, same_refusal
from tests.e2e.system import RunningSystem

pytestmark = pytest.mark.e2e

MISSING_EVENT = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    env = {
        "REACHSTORE_REQUIRE_KEYS": "true",
        "REACHSTORE_LIMIT_KEY_QUERY_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_QUERY_RATE": "0",
        "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
    }
    running = RunningSystem(tmp_path_factory.mktemp("attack14-trail-keys"), env)
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


def _events(http: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    reply = http.get("/api/v1/audit/events", params={"page_size": 100, **params})
    assert reply.status_code == 200, reply.text
    events: list[dict[str, Any]] = reply.json()["events"]
    return events


def _shipped(http: httpx.Client, method: str, count: int) -> list[dict[str, Any]]:
    """The tenant's events of ``method`` as the unrestricted admin reads them, once the
    shipper has delivered ``count`` of them."""
    deadline = time.monotonic() + 30
    while True:
        found = _events(http, method=method)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


def test_a_public_key_does_not_read_the_admins_key_management(system: RunningSystem) -> None:
    admin = cli_key(system, "acme", "read,write,admin")
    reader = cli_key(system, "acme", "read", "--namespaces", "public-*")["secret"]
    with http_client(system, admin["secret"]) as http:
        for asked in (["public-payroll"], ["public-*"]):
            made = http.post(
                "/api/v1/keys",
                json={"name": "payroll export", "scopes": ["read", "write"], "namespaces": asked},
            )
            assert made.status_code == 200, made.text
        created = _shipped(http, "CreateKey", 2)
    assert len(created) == 2, created
    assert {e["caller_key_id"] for e in created} == {admin["key"]["key_id"]}

    with http_client(system, reader) as restricted:
        seen = [
            (e["method"], e["caller_key_id"], e["params"])
            for e in _events(restricted)
            if e["service"] == "admin"
        ]
        assert seen == [], f"a public-* read key reads key management: {seen}"
        assert _events(restricted, method="CreateKey") == []
        for event in created:
            hidden = restricted.get(f"/api/v1/audit/events/{event['event_id']}")
            missing = restricted.get(f"/api/v1/audit/events/{MISSING_EVENT}")
            error_of(missing, 404, "AUDIT_EVENT_NOT_FOUND")
            same_refusal(hidden, missing, "event_id")

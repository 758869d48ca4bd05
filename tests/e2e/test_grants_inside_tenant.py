"""Restricted keys attacking their own tenant on a real `reachstore up --require-keys`: a
key granted only `public-*` namespaces, or allowed only `notify-*` channels, must find
everything outside its grants exactly as it finds what does not exist — in the audit
trail, among reach tasks and actions, and when it creates a namespace."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.attack_support import cli_key, error_of, http_client, same_refusal
from tests.e2e.conftest import wait_task
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

MISSING = "0123456789abcdef0123456789abcdef"


def _config(path: Path, receiver: HttpReceiver) -> Path:
    channels = ""
    for name, kind in (("notify-mail", "notify"), ("pay-hook", "pay")):
        channels += f"""
[channels.{name}]
kind = "webhook"
description = "{name}: posts to the test receiver"
action_types = ["{kind}"]
idempotency_params = ["n"]
[channels.{name}.webhook]
url = "{receiver.url}"
status_url = "{receiver.status_url}"
cancel_url = "{receiver.cancel_url}"
"""
    path.write_text(channels, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    folder = tmp_path_factory.mktemp("grants")
    # Every send is accepted and stays pending: a dependent action stays blocked, so it can
    # still be cancelled, resolved or looked at while the tests run.
    with HttpReceiver(default="accept:600") as receiver:
        env = {
            "REACHSTORE_REQUIRE_KEYS": "true",
            "REACHSTORE_REACH_CONFIG": str(_config(folder / "reach.toml", receiver)),
            "REACHSTORE_LIMIT_KEY_QUERY_RATE": "0",
            "REACHSTORE_LIMIT_TENANT_QUERY_RATE": "0",
            "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
            "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
        }
        running = RunningSystem(folder / "data", env)
        running.start()
        yield running
        assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def made(system: RunningSystem) -> dict[str, dict[str, Any]]:
    """The keys the tests attack with, made by the operator: ``{"key": ..., "secret": ...}``."""
    return {
        name: cli_key(system, "acme", scopes, *extra)
        for name, scopes, *extra in (
            ("admin", "read,write,admin"),
            ("agent", "read,write,reach"),
            ("public", "read,write", "--namespaces", "public-*"),
            ("notify", "read,reach", "--channels", "notify-*"),
            ("notify-operator", "read,operator", "--channels", "notify-*"),
            ("auditor", "read,auditor"),
        )
    }


@pytest.fixture(scope="module")
def keys(made: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: key["secret"] for name, key in made.items()}


def _action(name: str, channel: str, n: int, *after: str) -> dict[str, Any]:
    kind = "pay" if channel == "pay-hook" else "notify"
    return {
        "name": name,
        "channel": channel,
        "action_type": kind,
        "params": {"n": n},
        "depends_on": list(after),
    }


def _submit(http: httpx.Client, entity: str, *actions: dict[str, Any]) -> dict[str, Any]:
    reply = http.post("/api/v1/reach/tasks", json={"entity_id": entity, "actions": list(actions)})
    assert reply.status_code == 202, reply.text
    task: dict[str, Any] = reply.json()["task"]
    return task


def _all_events(http: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    token = ""
    while True:
        reply = http.get(
            "/api/v1/audit/events", params={"page_size": 100, "page_token": token, **params}
        )
        assert reply.status_code == 200, reply.text
        events += reply.json()["events"]
        token = reply.json()["next_page_token"]
        if not token:
            return events


def _wait_shipped(http: httpx.Client, wanted: set[str]) -> list[dict[str, Any]]:
    """The trail once every wanted method has arrived (events travel through the outbox)."""
    deadline = time.monotonic() + 30
    while True:
        events = _all_events(http)
        if wanted <= {e["method"] for e in events}:
            return events
        assert time.monotonic() < deadline, sorted({e["method"] for e in events})
        time.sleep(0.3)


# --- the audit trail -----------------------------------------------------------------------


def test_a_key_granted_public_namespaces_reads_only_their_part_of_the_trail(
    system: RunningSystem, keys: dict[str, str], made: dict[str, dict[str, Any]]
) -> None:
    with http_client(system, keys["admin"]) as admin:
        for name in ("public-a", "private-x"):
            admin.post("/api/v1/namespaces", json={"name": name})
        for namespace, doc, meta in (
            ("public-a", "open-doc", {"topic": "gardens"}),
            ("private-x", "secret-doc", {"salary_band": "B"}),
        ):
            reply = admin.post(
                f"/api/v1/namespaces/{namespace}/documents",
                json={"document": {"document_id": doc, "text": "notes", "metadata": meta}},
            )
            wait_task(admin, reply.json()["task"]["task_id"])
    with http_client(system, keys["agent"]) as agent:
        _submit(agent, "PAY-TRAIL", _action("charge", "pay-hook", 1))
    public_id = made["public"]["key"]["key_id"]
    with http_client(system, keys["public"]) as public:
        # Its own (refused) attempt is audited with the name masked; the token it learns
        # there must not let it find the admin's event about the same namespace.
        error_of(
            public.post("/api/v1/namespaces", json={"name": "private-x"}), 403, "AUTH_SCOPE_MISSING"
        )
    with http_client(system, keys["auditor"]) as auditor:
        everything = _wait_shipped(auditor, {"CreateNamespace", "CreateDocument", "SubmitTask"})
        deadline = time.monotonic() + 30
        while not any(e["caller_key_id"] == public_id for e in everything):
            assert time.monotonic() < deadline, "the refused call was not audited"
            time.sleep(0.3)
            everything = _all_events(auditor)
    [own] = [e for e in everything if e["caller_key_id"] == public_id]
    token = own["params"]["name"]
    [theirs] = [
        e
        for e in everything
        if e["method"] == "CreateNamespace"
        and e["params"].get("name") == token
        and e["caller_key_id"] != public_id
    ]
    with http_client(system, keys["public"]) as public:
        seen = _all_events(public)
        text = json.dumps(seen)
        for secret in ("private-x", "secret-doc", "salary_band"):
            assert secret not in text, f"{secret!r} is in the trail a public-* key reads"
        # Its channels are not restricted: reach tasks it may read, so their events too.
        assert "pay-hook" in text  # (the entity id itself is masked: docs/SECURITY.md)
        assert text.count(token) == 1, "the key found another event about private-x"
        about = {(e["method"], e["params"].get("namespace")) for e in seen}
        assert ("CreateDocument", "public-a") in about, about
        same_refusal(
            public.get(f"/api/v1/audit/events/{theirs['event_id']}"),
            public.get(f"/api/v1/audit/events/{uuid.uuid4().hex}"),
            "event_id",
        )
        # Filters narrow what it may see; they never widen it.
        narrowed = _all_events(public, method="CreateDocument")
        assert {e["params"]["namespace"] for e in narrowed} == {"public-a"}, narrowed
    with http_client(system, keys["notify"]) as notify:
        text = json.dumps(_all_events(notify))
        for secret in ("pay-hook", "PAY-TRAIL"):
            assert secret not in text, f"{secret!r} is in the trail a notify-* key reads"
        # Its namespaces are not restricted: what happens in them it may read.
        assert "public-a" in text and "secret-doc" in text


# --- reach ---------------------------------------------------------------------------------


def test_a_key_allowed_notify_channels_cannot_see_or_cancel_pay_actions(
    system: RunningSystem, keys: dict[str, str]
) -> None:
    with http_client(system, keys["agent"]) as agent:
        pay = _submit(
            agent,
            "PAY-1",
            _action("charge", "pay-hook", 1),
            _action("refund", "pay-hook", 2, "charge"),
        )
        mixed = _submit(
            agent, "MIX-1", _action("mail", "notify-mail", 3), _action("charge", "pay-hook", 4)
        )
        mine = _submit(agent, "NOTE-1", _action("mail", "notify-mail", 5))
    blocked = next(a for a in pay["actions"] if a["name"] == "refund")
    assert blocked["state"] == "blocked", blocked
    with http_client(system, keys["notify"]) as notify:
        same_refusal(
            notify.post(f"/api/v1/reach/actions/{blocked['action_id']}:cancel", json={}),
            notify.post(f"/api/v1/reach/actions/{MISSING}:cancel", json={}),
            "action_id",
        )
        for task in (pay, mixed):
            same_refusal(
                notify.get(f"/api/v1/reach/tasks/{task['task_id']}"),
                notify.get(f"/api/v1/reach/tasks/{MISSING}"),
                "task_id",
            )
            for action in task["actions"]:
                same_refusal(
                    notify.get(f"/api/v1/reach/actions/{action['action_id']}"),
                    notify.get(f"/api/v1/reach/actions/{MISSING}"),
                    "action_id",
                )
        # Waiting on a hidden task ends at once, as it does for a missing one.
        started = time.monotonic()
        waited = notify.get(f"/api/v1/reach/tasks/{pay['task_id']}", params={"wait_ms": 3000})
        assert waited.status_code == 404 and time.monotonic() - started < 1.5, waited.text
        listed = {t["task_id"] for t in notify.get("/api/v1/reach/tasks").json()["tasks"]}
        assert mine["task_id"] in listed and not {pay["task_id"], mixed["task_id"]} & listed
        by_channel = notify.get("/api/v1/reach/tasks", params={"channel": "pay-hook"}).json()
        assert by_channel["tasks"] == []
        assert notify.get(f"/api/v1/reach/tasks/{mine['task_id']}").status_code == 200
    with http_client(system, keys["agent"]) as agent:
        still = agent.get(f"/api/v1/reach/actions/{blocked['action_id']}").json()["action"]
        assert still["state"] == "blocked", "a notify-* key cancelled a pay-hook action"


def test_an_operator_allowed_notify_channels_cannot_see_or_settle_pay_actions(
    system: RunningSystem, keys: dict[str, str]
) -> None:
    with http_client(system, keys["agent"]) as agent:
        pay = _submit(agent, "PAY-2", _action("charge", "pay-hook", 6))
    action_id = pay["actions"][0]["action_id"]
    with http_client(system, keys["notify-operator"]) as operator:
        queue = operator.get("/api/v1/reach/actions", params={"page_size": 100}).json()
        assert all(a["channel"] != "pay-hook" for a in queue["actions"]), queue
        same_refusal(
            operator.post(
                f"/api/v1/reach/actions/{action_id}:resolve",
                json={"outcome": "RESOLUTION_SUCCEEDED", "note": "checked"},
            ),
            operator.post(
                f"/api/v1/reach/actions/{MISSING}:resolve",
                json={"outcome": "RESOLUTION_SUCCEEDED", "note": "checked"},
            ),
            "action_id",
        )
        same_refusal(
            operator.post(f"/api/v1/reach/actions/{action_id}:recheck", json={}),
            operator.post(f"/api/v1/reach/actions/{MISSING}:recheck", json={}),
            "action_id",
        )


# --- namespaces ----------------------------------------------------------------------------


def test_creating_a_namespace_outside_the_grants_says_nothing_about_it(
    system: RunningSystem, keys: dict[str, str]
) -> None:
    with http_client(system, keys["admin"]) as admin:
        for name in ("private-y", "public-b"):
            assert admin.post("/api/v1/namespaces", json={"name": name}).status_code == 200
    with http_client(system, keys["public"]) as public:
        exists, missing = [], []
        for _ in range(60):  # interleaved, so drift in the machine's load hits both alike
            for name, times in (
                ("private-y", exists),
                (f"private-{uuid.uuid4().hex[:8]}", missing),
            ):
                started = time.perf_counter()
                reply = public.post("/api/v1/namespaces", json={"name": name})
                times.append((time.perf_counter() - started, reply))
        for (_, a), (_, b) in zip(exists, missing, strict=True):
            same_refusal(a, b, "namespace")
        error_of(exists[0][1], 403, "AUTH_SCOPE_MISSING")
        medians = [statistics.median(t for t, _ in times) for times in (exists, missing)]
        assert abs(medians[0] - medians[1]) < 0.002, medians
        # Inside its grants the key sees the namespace anyway, so "exists" tells it nothing.
        error_of(
            public.post("/api/v1/namespaces", json={"name": "public-b"}), 409, "NAMESPACE_EXISTS"
        )
        assert public.get("/api/v1/namespaces/public-b").status_code == 200


def _timing_gap(http: httpx.Client, hidden: str, missing: str) -> tuple[float, float]:
    """(gap between the median times, the noise within each) over interleaved requests,
    so drift in the machine's load hits both alike."""
    a_times, b_times = [], []
    for _ in range(100):
        for target, times in ((hidden, a_times), (missing, b_times)):
            started = time.perf_counter()
            assert http.get(target).status_code == 404
            times.append(time.perf_counter() - started)
    noise = max(
        abs(statistics.median(t[::2]) - statistics.median(t[1::2])) for t in (a_times, b_times)
    )
    return abs(statistics.median(a_times) - statistics.median(b_times)), noise


def test_a_hidden_task_costs_what_a_missing_one_does(
    system: RunningSystem, keys: dict[str, str]
) -> None:
    with http_client(system, keys["agent"]) as agent:
        pay = _submit(agent, "PAY-3", _action("charge", "pay-hook", 7))
    with http_client(system, keys["notify"]) as notify:
        gap, noise = _timing_gap(
            notify, f"/api/v1/reach/tasks/{pay['task_id']}", f"/api/v1/reach/tasks/{MISSING}"
        )
        # The same look-up on both paths; the floor covers timer and scheduler jitter.
        assert gap <= 3 * noise + 0.0005, (gap, noise)
        gap, noise = _timing_gap(
            notify,
            f"/api/v1/reach/actions/{pay['actions'][0]['action_id']}",
            f"/api/v1/reach/actions/{MISSING}",
        )
        # A hidden action's receipts and history are not read (visibility.find_action).
        assert gap <= 3 * noise + 0.0005, (gap, noise)

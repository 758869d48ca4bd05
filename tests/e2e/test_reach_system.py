"""Reach end to end: a real `reachstore up --require-keys` whose channels point at real
local receivers (HTTP, SMTP, gRPC) in this process, driven over REST and gRPC with keys
made by the command line, as an agent and an operator would."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from tests.e2e.system import RunningSystem
from tests.e2e.test_auth import make_key
from tests.reach.peers import GrpcReceiver, HttpReceiver, SmtpReceiver

pytestmark = pytest.mark.e2e

FINAL = {"succeeded", "failed", "cancelled", "skipped"}
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _config(rx: dict[str, Any]) -> str:
    """Channels with the default logic and short times, so retries, breakers and
    reviews happen within seconds."""
    fast = """
[channels.{name}.retry]
base_s = 0.05
cap_s = 0.2
max_retries = {retries}
rate_limited_base_s = 0.1
rate_limited_cap_s = 2
[channels.{name}.unknown]
base_s = 0.2
cap_s = 0.5
max_polls = 2
[channels.{name}.pending]
poll_interval_s = 0.1
stall_timeout_s = {stall}
"""

    def hook(
        name: str,
        receiver: HttpReceiver,
        extra: str = "",
        header: bool = True,
        retries: int = 3,
        types: str = '["notify", "dispatch"]',
        stall: float = 20,
    ) -> str:
        return f"""
[channels.{name}]
kind = "webhook"
description = "{name}: posts to a test receiver"
action_types = {types}
idempotency_params = ["ticket", "n"]
window = "day"
receiver_deduplicates = {"true" if header else "false"}
{extra}
[channels.{name}.webhook]
url = "{receiver.url}"
status_url = "{receiver.status_url}"
cancel_url = "{receiver.cancel_url}"
idempotency_header = {"true" if header else "false"}
read_timeout_s = 0.5
""" + fast.format(name=name, retries=retries, stall=stall)

    schema = (
        'parameters = { type = "object", required = ["ticket"], properties = { '
        'ticket = { type = "string", maxLength = 40 }, group = { type = "string" }, '
        'items = { type = "array" }, n = { type = "number" } } }\n'
        "[[channels.hook.rules]]\n"
        'expr = "!has(params.items) || size(params.items) <= 20"\n'
        'message = "at most 20 items per dispatch"\n'
        "[[channels.hook.rules]]\n"
        'expr = "!has(params.group) || params.group in caller.groups"\n'
        'message = "the target group must be one of the caller\'s groups"\n'
    )
    return """
[engine]
workers = 16
lease_s = 5
alert_channel = "alerts"
""" + "".join(
        [
            hook("hook", rx["hook"], schema),
            hook("plain-hook", rx["hook"], header=False),
            hook("limited", rx["limited"], "quota_per_second = 10"),
            hook(
                "fragile",
                rx["fragile"],
                "[channels.fragile.breaker]\nwindow_s = 10\nmin_samples = 4\nopen_s = 1.5\n"
                "half_open_probes = 2\n",
                retries=0,
            ),
            hook("rejecting", rx["rejecting"]),
            hook("slow", rx["hook"], stall=0.5),
            hook("alerts", rx["alerts"], types='["alert"]'),
            f"""
[channels.mail]
kind = "email"
description = "sends e-mail"
action_types = ["notify"]
idempotency_params = ["to", "subject"]
[channels.mail.email]
host = "{rx["smtp"].host}"
port = {rx["smtp"].port}
sender = "reach@example.com"
timeout_s = 2
send_timeout_s = 3

[channels.rpc]
kind = "grpc"
description = "assigns tickets over internal RPC"
action_types = ["assign"]
idempotency_params = ["ticket"]
[channels.rpc.grpc]
target = "{rx["grpc"].target}"
tls = false  # the test server speaks plain text
method = "/peer.v1.Tickets/Assign"
idempotency_metadata = true
timeout_s = 1.5
""",
        ]
    )


@pytest.fixture(scope="module")
def receivers() -> Iterator[dict[str, Any]]:
    peers: dict[str, Any] = {
        "hook": HttpReceiver(dedupe=True),
        "limited": HttpReceiver(),
        "fragile": HttpReceiver(),
        "rejecting": HttpReceiver(default="status:400"),
        "alerts": HttpReceiver(),
        "smtp": SmtpReceiver(),
        "grpc": GrpcReceiver(),
    }
    for peer in peers.values():
        peer.start()
    try:
        yield peers
    finally:
        for peer in peers.values():
            peer.stop()


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory, receivers: dict[str, Any]
) -> Iterator[RunningSystem]:
    folder = tmp_path_factory.mktemp("reach")
    config = folder / "reach.toml"
    config.write_text(_config(receivers))
    env = {
        "REACHSTORE_REQUIRE_KEYS": "true",
        "REACHSTORE_REACH_CONFIG": str(config),
        # These tests submit in bursts on purpose; test_limits.py covers call rates.
        "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
        "REACHSTORE_LIMIT_KEY_QUERY_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_QUERY_RATE": "0",
    }
    running = RunningSystem(folder / "data", env)
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def keys(system: RunningSystem) -> dict[str, str]:
    channels = "hook,plain-hook,limited,fragile,rejecting,slow,mail,rpc"
    return {
        "agent": make_key(
            system, "acme", "read,reach", "--channels", channels, "--groups", "ops,support"
        ),
        "operator": make_key(system, "acme", "read,operator"),
        "mail_only": make_key(system, "acme", "read,reach", "--channels", "mail"),
        "reader": make_key(system, "acme", "read"),
        "globex": make_key(system, "globex", "read,reach"),
    }


def _client(system: RunningSystem, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=system.http_url, timeout=30.0, headers={"Authorization": f"Bearer {key}"}
    )


@pytest.fixture(scope="module")
def agent(system: RunningSystem, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with _client(system, keys["agent"]) as client:
        yield client


@pytest.fixture(scope="module")
def operator(system: RunningSystem, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with _client(system, keys["operator"]) as client:
        yield client


def action(
    name: str, channel: str = "hook", action_type: str = "notify", **params: Any
) -> dict[str, Any]:
    return {"name": name, "channel": channel, "action_type": action_type, "params": params}


def submit(
    client: httpx.Client, entity: str, *actions: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    reply = client.post(
        "/api/v1/reach/tasks", json={"entity_id": entity, "actions": list(actions), **extra}
    )
    assert reply.status_code == 202, reply.text
    return reply.json()


def settle(
    client: httpx.Client, task_id: str, until: set[str] | None = None, timeout: float = 30.0
) -> dict[str, Any]:
    """Long-polls the task until every action is in ``until`` (default: final)."""
    until = until or FINAL
    deadline = time.monotonic() + timeout
    version = 0
    while True:
        reply = client.get(
            f"/api/v1/reach/tasks/{task_id}", params={"wait_ms": 2000, "known_version": version}
        )
        assert reply.status_code == 200, reply.text
        task = reply.json()["task"]
        if all(a["state"] in until for a in task["actions"]):
            return reply.json()
        assert time.monotonic() < deadline, f"task {task_id} did not settle: {task}"
        version = task["version"]


def get_action(client: httpx.Client, action_id: str) -> dict[str, Any]:
    reply = client.get(f"/api/v1/reach/actions/{action_id}")
    assert reply.status_code == 200, reply.text
    return reply.json()["action"]


def reasons(detail: dict[str, Any]) -> list[str]:
    return [h["reason"] for h in detail["history"]]


# --- delivery, keys, receipts --------------------------------------------------------------


def test_an_action_is_delivered_once_with_key_trace_and_receipt(
    agent: httpx.Client, receivers: dict[str, Any], system: RunningSystem
) -> None:
    rx: HttpReceiver = receivers["hook"]
    rx.script("echo")
    reply = agent.post(
        "/api/v1/reach/tasks",
        json={
            "entity_id": "WO20261130-1",
            "actions": [action("notify", ticket="WO20261130-1", note="call 13800138000")],
        },
        headers={"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"},
    )
    assert reply.status_code == 202, reply.text
    task = reply.json()["task"]
    assert task["trace_id"] == TRACE and task["state"] == "pending"
    key = task["actions"][0]["idempotency_key"]
    # The entity and the keyed parameters are keyed hashes: neither shows in the key.
    assert re.fullmatch(r"acme/e:[0-9a-f]{32}/notify/[0-9a-f]{16}/[0-9-]+", key), key
    assert key.endswith(task["actions"][0]["window"]) and "WO20261130" not in key
    done = settle(agent, task["task_id"])
    assert done["task"]["state"] == "succeeded" and done["partial_failures"] == []
    detail = get_action(agent, task["actions"][0]["action_id"])
    assert detail["attempts"] == 1 and detail["external_id"].startswith("task-")
    [receipt] = detail["receipts"]
    assert receipt["status_code"] == 200 and receipt["outcome"] == "succeeded"
    # The receiver echoed the phone number; the stored receipt holds a masked token.
    assert "13800138000" not in receipt["snippet"] and "[phone:" in receipt["snippet"]
    assert reasons(detail) == ["reserved", "sending", "receiver_confirmed"]
    [delivery] = [d for d in rx.records if d.headers.get("idempotency-key") == key]
    assert delivery.headers["traceparent"].split("-")[1] == TRACE
    assert delivery.body == {"ticket": "WO20261130-1", "note": "call 13800138000"}
    # The structured log line of the outcome carries the trace, task and action ids.
    logged = _wait_for_log(system, f'"trace_id": "{TRACE}"', '"state": "succeeded"')
    assert f'"action_id": "{task["actions"][0]["action_id"]}"' in logged
    assert "13800138000" not in "".join(system.output)


def _wait_for_alert(alerts: HttpReceiver, kind: str, task_id: str) -> None:
    """Other tests raise alerts too: wait for this task's."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if any(
            d.body and d.body.get("kind") == kind and d.body.get("task_id") == task_id
            for d in alerts.records
        ):
            return
        time.sleep(0.1)
    raise AssertionError(f"no {kind} alert for task {task_id}")


def _wait_for_log(system: RunningSystem, *parts: str) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in list(system.output):
            if all(part in line for part in parts):
                return line
        time.sleep(0.1)
    raise AssertionError(f"no log line with {parts}")


def test_repeats_sequential_and_concurrent_make_one_delivery(
    agent: httpx.Client, receivers: dict[str, Any]
) -> None:
    rx: HttpReceiver = receivers["hook"]
    first = submit(agent, "WO-dup", action("a", ticket="WO-dup"))
    again = submit(agent, "WO-dup", action("a", ticket="WO-dup"))
    assert again["deduplicated"] and not first["deduplicated"]
    assert again["task"]["task_id"] == first["task"]["task_id"]

    results: list[dict[str, Any]] = []
    gate = threading.Barrier(8)

    def race() -> None:
        gate.wait()
        results.append(submit(agent, "WO-race", action("a", ticket="WO-race", n=7)))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r["task"]["task_id"] for r in results}) == 1
    assert sum(not r["deduplicated"] for r in results) == 1
    for reserved in (first, results[0]):
        settle(agent, reserved["task"]["task_id"])
        assert rx.deliveries(reserved["task"]["actions"][0]["idempotency_key"]) == 1


def test_a_caller_key_reused_with_other_content_is_refused(agent: httpx.Client) -> None:
    submit(agent, "WO-ck", action("a", ticket="WO-ck"), idempotency_key="agent-turn-17")
    again = submit(agent, "WO-ck", action("a", ticket="WO-ck"), idempotency_key="agent-turn-17")
    assert again["deduplicated"]
    reply = agent.post(
        "/api/v1/reach/tasks",
        json={
            "entity_id": "WO-ck",
            "idempotency_key": "agent-turn-17",
            "actions": [action("a", ticket="WO-other")],
        },
    )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "IDEMPOTENCY_KEY_REUSED" and error["category"] == "permanent"
    assert error["structured_data"]["task_id"] == again["task"]["task_id"]


def test_validate_only_returns_the_keys_and_reserves_nothing(
    agent: httpx.Client, receivers: dict[str, Any]
) -> None:
    before = receivers["hook"].total()
    reply = agent.post(
        "/api/v1/reach/tasks",
        json={
            "entity_id": "WO-dry",
            "validate_only": True,
            "actions": [
                action("a", ticket="WO-dry"),
                {**action("b", ticket="WO-dry", n=2), "depends_on": ["a"]},
            ],
        },
    )
    assert reply.status_code == 202, reply.text
    body = reply.json()
    assert body["validated_only"] and body["task"]["task_id"] == ""
    keys = [a["idempotency_key"] for a in body["task"]["actions"]]
    assert all(re.fullmatch(r"acme/e:[0-9a-f]{32}/notify/[0-9a-f]{16}/[0-9-]+", k) for k in keys)
    # One entity, so one entity part; other parameters, so two keys.
    assert len({k.split("/")[1] for k in keys}) == 1 and len(set(keys)) == 2
    assert [a["state"] for a in body["task"]["actions"]] == ["ready", "blocked"]
    listed = agent.get("/api/v1/reach/tasks", params={"entity_id": "WO-dry"}).json()
    assert listed["tasks"] == []
    # The real submit uses exactly the keys validation showed.
    real = submit(
        agent,
        "WO-dry",
        action("a", ticket="WO-dry"),
        {**action("b", ticket="WO-dry", n=2), "depends_on": ["a"]},
    )
    assert [a["idempotency_key"] for a in real["task"]["actions"]] == keys
    settle(agent, real["task"]["task_id"])
    assert receivers["hook"].total() == before + 2


# --- retries, rate limits, breaker ---------------------------------------------------------


def test_server_errors_are_retried_with_the_same_key_until_success(
    agent: httpx.Client, receivers: dict[str, Any]
) -> None:
    rx: HttpReceiver = receivers["hook"]
    rx.script("status:500", "status:503")
    task = submit(agent, "WO-5xx", action("a", ticket="WO-5xx"))["task"]
    done = settle(agent, task["task_id"])
    assert done["task"]["state"] == "succeeded"
    detail = get_action(agent, task["actions"][0]["action_id"])
    assert detail["attempts"] == 3
    assert reasons(detail).count("retry_scheduled") == 2
    assert [r["status_code"] for r in detail["receipts"]] == [500, 503, 200]
    key = task["actions"][0]["idempotency_key"]
    assert rx.deliveries(key) == 3 and rx.effects(key) == 1


def test_429_waits_at_least_retry_after(agent: httpx.Client, receivers: dict[str, Any]) -> None:
    rx: HttpReceiver = receivers["hook"]
    rx.script("429:1")
    task = submit(agent, "WO-429", action("a", ticket="WO-429"))["task"]
    settle(agent, task["task_id"])
    key = task["actions"][0]["idempotency_key"]
    times = [d.at for d in rx.records if d.headers.get("idempotency-key") == key]
    assert len(times) == 2 and times[1] - times[0] >= 1.0
    detail = get_action(agent, task["actions"][0]["action_id"])
    assert "rate_limited" in reasons(detail) and detail["state"] == "succeeded"


def test_sending_never_exceeds_70_percent_of_the_declared_quota(
    agent: httpx.Client, receivers: dict[str, Any]
) -> None:
    rx: HttpReceiver = receivers["limited"]
    tasks = [
        submit(agent, f"WO-rate-{i}", action("a", "limited", ticket=f"WO-rate-{i}"))["task"]
        for i in range(22)
    ]
    for task in tasks:
        settle(agent, task["task_id"])
    arrivals = sorted(rx.rate_log)[-22:]
    # Quota 10/s -> 7/s with a burst of one: any window of one second holds at most 8.
    worst = max(sum(1 for t in arrivals if start <= t < start + 1.0) for start in arrivals)
    overall = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    assert worst <= 8, worst
    assert overall <= 7.0 * 1.05, overall
    channels = agent.get("/api/v1/reach/channels").json()["channels"]
    assert {c["name"]: c["send_rate_per_second"] for c in channels}["limited"] == 7.0


def test_the_breaker_opens_half_opens_and_closes(
    agent: httpx.Client, receivers: dict[str, Any], system: RunningSystem
) -> None:
    rx: HttpReceiver = receivers["fragile"]
    # 408: a failure that says the request was not taken (a 5xx may come after the action
    # took effect, so after one the action could not end "failed").
    rx.set_default("status:408")
    failing = [
        submit(agent, f"WO-br-{i}", action("a", "fragile", ticket=f"WO-br-{i}"))["task"]
        for i in range(4)
    ]
    for task in failing:
        assert settle(agent, task["task_id"])["task"]["state"] == "failed"
    states = {
        c["name"]: c["breaker_state"]
        for c in agent.get("/api/v1/reach/channels").json()["channels"]
    }
    assert states["fragile"] == "open"
    sent_while_failing = rx.total()
    # While open, new actions wait without being sent.
    rx.set_default("ok")
    waiting = submit(agent, "WO-br-wait", action("a", "fragile", ticket="WO-br-wait"))["task"]
    done = settle(agent, waiting["task_id"], timeout=20)
    assert done["task"]["state"] == "succeeded"
    detail = get_action(agent, waiting["actions"][0]["action_id"])
    assert "breaker_open" in reasons(detail)
    assert rx.total() == sent_while_failing + 1
    # Two successful probes close it again.
    probe = submit(agent, "WO-br-probe", action("a", "fragile", ticket="WO-br-probe"))["task"]
    settle(agent, probe["task_id"])
    states = {
        c["name"]: c["breaker_state"]
        for c in agent.get("/api/v1/reach/channels").json()["channels"]
    }
    assert states["fragile"] == "closed"
    metrics = httpx.get(system.reach_metrics_url, timeout=10).text
    assert 'reachstore_reach_breaker_state{channel="fragile"} 0.0' in metrics


# --- dependencies, unknowns, review, cancel -----------------------------------------------


def test_a_failed_dependency_skips_dependants_but_not_independent_branches(
    agent: httpx.Client, receivers: dict[str, Any]
) -> None:
    task = submit(
        agent,
        "WO-deps",
        action("write", "rejecting", ticket="WO-deps"),
        {**action("notify", ticket="WO-deps", n=1), "depends_on": ["write"]},
        action("log", ticket="WO-deps", n=2),
    )["task"]
    done = settle(agent, task["task_id"])
    states = {a["name"]: a["state"] for a in done["task"]["actions"]}
    assert states == {"write": "failed", "notify": "skipped", "log": "succeeded"}
    assert done["task"]["state"] == "failed"
    by_action = {f["action_id"]: f for f in done["partial_failures"]}
    write, notify = done["task"]["actions"][0], done["task"]["actions"][1]
    assert by_action[write["action_id"]]["error_code"] == "RECEIVER_REJECTED"
    assert by_action[write["action_id"]]["structured_data"]["failure_kind"] == "business"
    assert by_action[write["action_id"]]["retryable"] is False
    assert by_action[notify["action_id"]]["error_code"] == "DEPENDENCY_FAILED"
    assert write["failure_kind"] == "business"
    # The required failure raised an alert through the alert channel.
    _wait_for_alert(receivers["alerts"], "task_failed", task["task_id"])


def test_an_ambiguous_send_becomes_unknown_then_review_and_an_operator_resolves_it(
    agent: httpx.Client, operator: httpx.Client, receivers: dict[str, Any]
) -> None:
    rx: HttpReceiver = receivers["hook"]
    rx.script("hang:2")  # the read timeout is 0.5 s: sent, but no answer
    rx.script_status("status:404", "status:404")  # max_polls is 2
    task = submit(agent, "WO-unknown", action("a", "plain-hook", ticket="WO-unknown"))["task"]
    action_id = task["actions"][0]["action_id"]
    done = settle(agent, task["task_id"], until={"needs_review"})
    assert done["task"]["state"] == "running"
    [failure] = done["partial_failures"]
    assert failure["error_code"] == "REVIEW_REQUIRED" and failure["retryable"] is False
    detail = get_action(agent, action_id)
    assert detail["attempts"] == 1  # never re-sent blindly
    assert "ambiguous_outcome" in reasons(detail) and "rechecks_exhausted" in reasons(detail)
    assert sum(1 for d in rx.records if d.headers.get("x-reachstore-action-id") == action_id) == 1
    # Only an operator may resolve, with a note.
    refused = agent.post(
        f"/api/v1/reach/actions/{action_id}:resolve",
        json={"outcome": "RESOLUTION_SUCCEEDED", "note": "checked"},
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "AUTH_SCOPE_MISSING"
    no_note = operator.post(
        f"/api/v1/reach/actions/{action_id}:resolve",
        json={"outcome": "RESOLUTION_SUCCEEDED", "note": " "},
    )
    assert no_note.status_code == 400
    resolved = operator.post(
        f"/api/v1/reach/actions/{action_id}:resolve",
        json={"outcome": "RESOLUTION_SUCCEEDED", "note": "ticket shows the assignment"},
    )
    assert resolved.status_code == 200, resolved.text
    body = resolved.json()["action"]
    assert body["state"] == "succeeded"
    assert body["resolution"]["note"] == "ticket shows the assignment"
    assert body["resolution"]["outcome"] == "succeeded" and body["resolution"]["resolved_by"]
    assert settle(agent, task["task_id"])["task"]["state"] == "succeeded"
    again = operator.post(
        f"/api/v1/reach/actions/{action_id}:resolve",
        json={"outcome": "RESOLUTION_FAILED", "note": "second thoughts"},
    )
    assert again.status_code == 400 and again.json()["error"]["code"] == "ACTION_NOT_RESOLVABLE"
    _wait_for_alert(receivers["alerts"], "needs_review", task["task_id"])


def test_a_pending_action_that_stalls_goes_to_review_and_is_resolved_as_failed(
    agent: httpx.Client, operator: httpx.Client, receivers: dict[str, Any]
) -> None:
    receivers["hook"].script("accept:60")  # accepted, then "pending" for a minute
    task = submit(agent, "WO-stall", action("a", "slow", ticket="WO-stall"))["task"]
    action_id = task["actions"][0]["action_id"]
    settle(agent, task["task_id"], until={"needs_review"})
    detail = get_action(agent, action_id)
    assert reasons(detail)[:4] == ["reserved", "sending", "receiver_accepted", "pending_stalled"]
    assert reasons(detail)[-1] == "rechecks_exhausted"
    assert detail["polls"] >= 2 and detail["attempts"] == 1
    resolved = operator.post(
        f"/api/v1/reach/actions/{action_id}:resolve",
        json={"outcome": "RESOLUTION_FAILED", "note": "the receiver lost it; re-raised by hand"},
    )
    assert resolved.status_code == 200, resolved.text
    done = settle(agent, task["task_id"])
    assert done["task"]["state"] == "failed"
    [failure] = done["partial_failures"]
    assert failure["error_code"] == "RESOLVED_FAILED" and failure["retryable"] is False


# Cancels an action while its first send is in the air, timed by the test: with other
# tests loading the machine the send can still be under way when the cancel arrives.
@pytest.mark.alone
def test_cancel_unsent_sent_and_finished_actions(
    agent: httpx.Client, receivers: dict[str, Any]
) -> None:
    rx: HttpReceiver = receivers["hook"]
    rx.script("accept:60")  # accepted, pending for a minute
    task = submit(
        agent,
        "WO-cancel",
        action("first", ticket="WO-cancel"),
        {**action("second", ticket="WO-cancel", n=2), "depends_on": ["first"]},
    )["task"]
    first, second = (a["action_id"] for a in task["actions"])
    settle(agent, task["task_id"], until={"pending", "blocked"})
    blocked = agent.post(f"/api/v1/reach/actions/{second}:cancel", json={})
    assert blocked.status_code == 200 and blocked.json()["cancelled"] is True
    assert blocked.json()["action"]["state"] == "cancelled"
    pending = agent.post(f"/api/v1/reach/actions/{first}:cancel", json={})
    assert pending.json()["cancelled"] is True, pending.text
    done = settle(agent, task["task_id"])
    assert done["task"]["state"] == "failed"
    assert "cancelled_at_receiver" in reasons(get_action(agent, first))
    finished = submit(agent, "WO-cancel-2", action("a", ticket="WO-cancel-2"))["task"]
    settle(agent, finished["task_id"])
    late = agent.post(
        f"/api/v1/reach/actions/{finished['actions'][0]['action_id']}:cancel", json={}
    )
    assert late.json()["cancelled"] is False
    assert late.json()["partial_failures"][0]["error_code"] == "ACTION_ALREADY_FINISHED"


def test_long_poll_returns_when_the_task_changes(
    agent: httpx.Client, receivers: dict[str, Any]
) -> None:
    rx: HttpReceiver = receivers["hook"]
    rx.script("accept:60")
    task = submit(agent, "WO-wait", action("a", ticket="WO-wait"))["task"]
    pending = settle(agent, task["task_id"], until={"pending"})["task"]
    threading.Timer(0.5, rx.finish_task, args=(pending["actions"][0]["external_id"],)).start()
    started = time.monotonic()
    reply = agent.get(
        f"/api/v1/reach/tasks/{task['task_id']}",
        params={"wait_ms": 10000, "known_version": pending["version"]},
    )
    took = time.monotonic() - started
    assert reply.json()["task"]["version"] > pending["version"]
    assert took < 5, took
    assert settle(agent, task["task_id"])["task"]["state"] == "succeeded"
    too_long = agent.get(f"/api/v1/reach/tasks/{task['task_id']}", params={"wait_ms": 60000})
    assert too_long.status_code == 400


# --- permissions, rules, tenants -----------------------------------------------------------


def test_scopes_channel_allow_lists_and_rules_are_enforced(
    system: RunningSystem, keys: dict[str, str], agent: httpx.Client
) -> None:
    with _client(system, keys["reader"]) as reader:
        reply = reader.post(
            "/api/v1/reach/tasks", json={"entity_id": "x", "actions": [action("a", ticket="x")]}
        )
        assert reply.status_code == 403 and reply.json()["error"]["code"] == "AUTH_SCOPE_MISSING"
    with _client(system, keys["mail_only"]) as mail_only:
        reply = mail_only.post(
            "/api/v1/reach/tasks", json={"entity_id": "x", "actions": [action("a", ticket="x")]}
        )
        assert reply.status_code == 403
        assert reply.json()["error"]["code"] == "CHANNEL_NOT_ALLOWED"
        visible = [c["name"] for c in mail_only.get("/api/v1/reach/channels").json()["channels"]]
        assert visible == ["mail"]
    # Unknown channels answer like forbidden ones.
    unknown = agent.post(
        "/api/v1/reach/tasks",
        json={"entity_id": "x", "actions": [action("a", "no-such", ticket="x")]},
    )
    assert unknown.status_code == 403 and unknown.json()["error"]["code"] == "CHANNEL_NOT_ALLOWED"
    # Every offending action is reported, each with its field and rule; nothing is reserved.
    reply = agent.post(
        "/api/v1/reach/tasks",
        json={
            "entity_id": "WO-rules",
            "actions": [
                action("ok", ticket="WO-rules"),
                action("finance", ticket="WO-rules", group="finance"),
                action("many", ticket="WO-rules", items=list(range(21))),
                action("shape", ticket=12),
            ],
        },
    )
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "PARAMS_REJECTED" and error["category"] == "permanent"
    found = {d["structured_data"]["action"]: d["structured_data"] for d in error["details"]}
    assert set(found) == {"finance", "many", "shape"}
    assert found["finance"]["rule"] == "the target group must be one of the caller's groups"
    assert found["many"]["rule"] == "at most 20 items per dispatch"
    assert found["shape"]["field"] == "actions[3].params.ticket"
    assert agent.get("/api/v1/reach/tasks", params={"entity_id": "WO-rules"}).json()["tasks"] == []
    allowed = submit(agent, "WO-rules", action("ops", ticket="WO-rules", group="ops"))
    assert settle(agent, allowed["task"]["task_id"])["task"]["state"] == "succeeded"


def test_bad_requests_name_the_field(agent: httpx.Client) -> None:
    cases = [
        ({"entity_id": "", "actions": [action("a", ticket="x")]}, "entity_id"),
        ({"entity_id": "x", "actions": []}, "actions"),
        (
            {"entity_id": "x", "logical_time": "yesterday", "actions": [action("a", ticket="x")]},
            "logical_time",
        ),
        ({"entity_id": "x", "trace_id": "nope", "actions": [action("a", ticket="x")]}, "trace_id"),
        (
            {"entity_id": "x", "actions": [{**action("a", ticket="x"), "depends_on": ["a"]}]},
            "actions[0].depends_on",
        ),
        (
            {"entity_id": "x", "actions": [action("a", ticket="x"), action("a", ticket="y")]},
            "actions[1].name",
        ),
        (
            {"entity_id": "x", "actions": [action("a", action_type="explode", ticket="x")]},
            "actions[0].action_type",
        ),
    ]
    for body, field in cases:
        reply = agent.post("/api/v1/reach/tasks", json=body)
        assert reply.status_code == 400, (body, reply.text)
        assert reply.json()["error"]["structured_data"]["field"] == field, reply.text
    cycle = agent.post(
        "/api/v1/reach/tasks",
        json={
            "entity_id": "x",
            "actions": [
                {**action("a", ticket="x"), "depends_on": ["b"]},
                {**action("b", ticket="x", n=1), "depends_on": ["a"]},
            ],
        },
    )
    assert cycle.status_code == 400 and "cycle" in cycle.json()["error"]["message"]


def test_other_tenants_see_nothing(
    system: RunningSystem, keys: dict[str, str], agent: httpx.Client
) -> None:
    mine = submit(agent, "WO-tenant", action("a", ticket="WO-tenant"))["task"]
    settle(agent, mine["task_id"])
    with _client(system, keys["globex"]) as other:
        reply = other.get(f"/api/v1/reach/tasks/{mine['task_id']}")
        assert reply.status_code == 404 and reply.json()["error"]["code"] == "REACH_TASK_NOT_FOUND"
        never = other.get("/api/v1/reach/tasks/0123456789abcdef0123456789abcdef")
        assert never.status_code == 404 and never.json()["error"] == {
            **reply.json()["error"],
            "request_id": never.json()["error"]["request_id"],
            "structured_data": never.json()["error"]["structured_data"],
        }
        action_reply = other.get(f"/api/v1/reach/actions/{mine['actions'][0]['action_id']}")
        assert action_reply.status_code == 404
        cancel = other.post(
            f"/api/v1/reach/actions/{mine['actions'][0]['action_id']}:cancel", json={}
        )
        assert cancel.status_code == 404
        assert other.get("/api/v1/reach/tasks").json()["tasks"] == []
        # The same entity and parameters in another tenant are another action.
        theirs = submit(other, "WO-tenant", action("a", ticket="WO-tenant"))
        assert not theirs["deduplicated"]
        assert theirs["task"]["actions"][0]["idempotency_key"].startswith("globex/")
        settle(other, theirs["task"]["task_id"])


def test_list_tasks_filters_and_pages(agent: httpx.Client) -> None:
    ids = [
        submit(agent, "WO-list", action("a", ticket="WO-list", n=i))["task"]["task_id"]
        for i in range(5)
    ]
    for task_id in ids:
        settle(agent, task_id)
    seen: list[str] = []
    token = ""
    while True:
        page = agent.get(
            "/api/v1/reach/tasks",
            params={"entity_id": "WO-list", "page_size": 2, "page_token": token},
        ).json()
        seen += [t["task_id"] for t in page["tasks"]]
        token = page["next_page_token"]
        if not token:
            break
    assert seen == list(reversed(ids))
    by_state = agent.get(
        "/api/v1/reach/tasks", params={"state": "TASK_STATE_FAILED", "channel": "rejecting"}
    ).json()
    assert by_state["tasks"] and all(t["state"] == "failed" for t in by_state["tasks"])
    assert (
        agent.get("/api/v1/reach/tasks", params={"channel": "mail", "entity_id": "WO-list"}).json()[
            "tasks"
        ]
        == []
    )


# --- the other channels, over gRPC ---------------------------------------------------------


def _stub(system: RunningSystem) -> tuple[grpc.Channel, pb_grpc.ReachServiceStub]:
    channel = grpc.insecure_channel(system.reach_addr)
    return channel, pb_grpc.ReachServiceStub(channel)


def _grpc_settle(
    stub: pb_grpc.ReachServiceStub, task_id: str, metadata: list[tuple[str, str]]
) -> pb.Task:
    version = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        task = stub.GetTask(
            pb.GetTaskRequest(task_id=task_id, wait_ms=2000, known_version=version),
            metadata=metadata,
            timeout=10,
        ).task
        if task.state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED):
            return task
        version = task.version
    raise AssertionError(f"task {task_id} did not finish")


def test_email_and_internal_rpc_over_grpc(
    system: RunningSystem, keys: dict[str, str], receivers: dict[str, Any]
) -> None:
    metadata = [("authorization", f"Bearer {keys['agent']}")]
    channel, stub = _stub(system)
    with channel:
        mail = pb.ActionSpec(name="mail", channel="mail", action_type="notify")
        mail.params.update(
            {"to": "oncall@example.com", "subject": "WO-7 assigned", "body": "see ticket"}
        )
        rpc = pb.ActionSpec(name="assign", channel="rpc", action_type="assign", depends_on=["mail"])
        rpc.params.update({"ticket": "WO-7", "group": "ops", "count": 2})
        reply = stub.SubmitTask(
            pb.SubmitTaskRequest(entity_id="WO-7", actions=[mail, rpc]),
            metadata=metadata,
            timeout=10,
        )
        task = _grpc_settle(stub, reply.task.task_id, metadata)
        assert task.state == pb.TASK_STATE_SUCCEEDED
        mail_key = task.actions[0].idempotency_key
        [message] = [m for m in receivers["smtp"].messages if m.subject == "WO-7 assigned"]
        assert message.message_id == task.actions[0].external_id
        [call] = [c for c in receivers["grpc"].calls if c.request.get("ticket") == "WO-7"]
        assert call.request["group"] == "ops" and int(call.request["count"]) == 2
        assert call.metadata["idempotency-key"] == task.actions[1].idempotency_key
        assert mail_key != task.actions[1].idempotency_key
        # The one-call form.
        one = pb.ActionSpec(channel="rpc", action_type="assign")
        one.params.update({"ticket": "WO-8", "group": "ops", "count": 1})
        reached = stub.Reach(
            pb.ReachRequest(entity_id="WO-8", action=one), metadata=metadata, timeout=10
        )
        assert (
            reached.task_id and reached.state == pb.ACTION_STATE_READY and not reached.deduplicated
        )
        repeat = stub.Reach(
            pb.ReachRequest(entity_id="WO-8", action=one), metadata=metadata, timeout=10
        )
        assert repeat.task_id == reached.task_id and repeat.deduplicated
        assert _grpc_settle(stub, reached.task_id, metadata).state == pb.TASK_STATE_SUCCEEDED
        assert sum(1 for c in receivers["grpc"].calls if c.request.get("ticket") == "WO-8") == 1


def test_metrics_show_states_latency_and_retries(system: RunningSystem) -> None:
    text = httpx.get(system.reach_metrics_url, timeout=10).text
    assert re.search(r'reachstore_reach_actions\{channel="hook",state="succeeded"\} [1-9]', text)
    assert re.search(
        r'reachstore_reach_retries_total\{channel="hook",reason="transient"\} [1-9]', text
    )
    assert re.search(r'reachstore_reach_action_seconds_count\{channel="hook"\} [1-9]', text)
    assert "reachstore_reach_limiter_wait_seconds_bucket" in text


def test_config_mistakes_stop_up_with_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "reach.toml"
    bad.write_text(
        '[channels.x]\nkind = "webhook"\ndescription = "d"\naction_types = ["a"]\nretries = 3\n'
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reachstore_server.cli",
            "up",
            "--data-dir",
            str(tmp_path / "d"),
            "--reach-config",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "channels.x.retries: unknown key" in done.stderr

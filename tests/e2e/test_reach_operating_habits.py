"""The reach layer's operating habits, end to end on a real `reachstore up --require-keys`
with real HTTP receivers:

- alert thresholds from each channel's own history: a week of synthetic history is written
  to the database before the system starts; the hour before now fails far more than that
  hour of the day used to, so the reach service's first baseline sweep raises an alert,
  which goes to the operations receiver, and the console's health call shows the
  threshold;
- the weekly UNKNOWN review: actions that went through UNKNOWN are listed by channel and
  by how they were settled, over REST (the console's call) and by `reachstore reach
  unknowns --since 7d`.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import insert, text

from reachstore_server.storage.engine import make_engine
from reachstore_server.storage.reach_models import ReachActionRow, ReachHistoryRow, ReachTaskRow
from reachstore_server.storage.schema import migrate_to_head
from tests.e2e.system import RunningSystem
from tests.e2e.test_auth import make_key
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

TENANT = "acme"


def _config(rx: dict[str, HttpReceiver]) -> str:
    def hook(name: str, receiver: HttpReceiver, extra: str = "") -> str:
        return f"""
[channels.{name}]
kind = "webhook"
description = "{name}"
action_types = ["notify"]
idempotency_params = ["ticket"]
{extra}
[channels.{name}.webhook]
url = "{receiver.url}"
status_url = "{receiver.status_url}"
read_timeout_s = 0.5
[channels.{name}.unknown]
base_s = 0.2
cap_s = 0.4
max_polls = 2
"""

    return (
        """
[engine]
lease_s = 5
dedupe_retention_days = 14
[engine.alert_channels]
business = "biz-alerts"
technical = "ops-alerts"
"""
        + hook("spiky", rx["spiky"])
        + hook("plain", rx["plain"])
        + hook("biz-alerts", rx["biz"])
        + hook("ops-alerts", rx["ops"])
    )


def _synthetic_history(url: str, now: dt.datetime) -> None:
    """Seven days of channel ``spiky`` in the hour of the day before ``now``: 100 actions
    a day, 1 to 3 failed; then the hour before now: 100 actions, 40 failed (technical)."""
    engine = make_engine(url)
    migrate_to_head(engine)
    tasks: list[dict[str, Any]] = []
    actions: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    for day in range(8):
        failed = 40 if day == 0 else 1 + day % 3
        for i in range(100):
            done = now - dt.timedelta(days=day, minutes=5 + i * 0.5)
            created = done - dt.timedelta(milliseconds=150 + i)
            task_id, action_id = uuid.uuid4().hex, uuid.uuid4().hex
            state = "failed" if i < failed else "succeeded"
            tasks.append(
                {
                    "task_id": task_id,
                    "tenant": TENANT,
                    "entity_id": f"e-{day}-{i}",
                    "caller_key": None,
                    "request_digest": "0" * 64,
                    "logical_time": created,
                    "trace_id": "0" * 32,
                    "submitted_by": "",
                    "state": state,
                    "version": 3,
                    "created_at": created,
                    "updated_at": done,
                    "finished_at": done,
                }
            )
            actions.append(
                {
                    "action_id": action_id,
                    "task_id": task_id,
                    "tenant": TENANT,
                    "position": 0,
                    "name": "a",
                    "channel": "spiky",
                    "action_type": "notify",
                    "params_json": "{}",
                    "depends_on_json": "[]",
                    "required": True,
                    "idem_key": f"synthetic/{action_id}",
                    "window": "-",
                    "state": state,
                    "attempts": 1,
                    "rate_limited": 0,
                    "polls": 0,
                    "unknown_polls": 0,
                    "ambiguous_sends": 0,
                    "next_at": None,
                    "lease_owner": "",
                    "first_sent_at": None,
                    "accepted_at": None,
                    "external_id": "",
                    "failure_json": "",
                    "failure_kind": "technical" if state == "failed" else "",
                    "resolution_json": "",
                    "created_at": created,
                    "updated_at": done,
                    "finished_at": done,
                }
            )
            for at, before, after, reason in (
                (created, "ready", "submitting", "sending"),
                (done, "submitting", state, "synthetic"),
            ):
                history.append(
                    {
                        "tenant": TENANT,
                        "action_id": action_id,
                        "at": at,
                        "from_state": before,
                        "to_state": after,
                        "reason": reason,
                        "details_json": "{}",
                    }
                )
    with engine.begin() as conn:
        conn.execute(insert(ReachTaskRow.__table__), tasks)
        conn.execute(insert(ReachActionRow.__table__), actions)
        conn.execute(insert(ReachHistoryRow.__table__), history)
    engine.dispose()


@pytest.fixture(scope="module")
def receivers() -> Iterator[dict[str, HttpReceiver]]:
    peers = {name: HttpReceiver() for name in ("spiky", "plain", "biz", "ops")}
    for peer in peers.values():
        peer.start()
    try:
        yield peers
    finally:
        for peer in peers.values():
            peer.stop()


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory, receivers: dict[str, HttpReceiver]
) -> Iterator[RunningSystem]:
    folder = tmp_path_factory.mktemp("habits")
    config = folder / "reach.toml"
    config.write_text(_config(receivers))
    data = folder / "data"
    data.mkdir()
    _synthetic_history(f"sqlite:///{data / 'reachstore.db'}", dt.datetime.now(dt.UTC))
    running = RunningSystem(
        data, {"REACHSTORE_REQUIRE_KEYS": "true", "REACHSTORE_REACH_CONFIG": str(config)}
    )
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def keys(system: RunningSystem) -> dict[str, str]:
    return {
        "agent": make_key(system, TENANT, "read,reach"),
        "operator": make_key(system, TENANT, "read,operator", "--channels", "spiky,plain"),
    }


def _client(system: RunningSystem, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=system.http_url, timeout=30.0, headers={"Authorization": f"Bearer {key}"}
    )


def test_a_channel_past_its_own_baseline_alerts_operations_and_shows_its_threshold(
    system: RunningSystem, keys: dict[str, str], receivers: dict[str, HttpReceiver]
) -> None:
    deadline = time.monotonic() + 30
    alerts: list[dict[str, Any]] = []
    while not alerts and time.monotonic() < deadline:
        alerts = [
            d.body
            for d in receivers["ops"].records
            if d.body and d.body.get("kind") == "baseline_technical_failure_rate"
        ]
        time.sleep(0.2)
    assert alerts, "no baseline alert reached operations"
    [alert] = alerts
    assert alert["failure_kind"] == "technical" and alert["tenant"] == TENANT
    assert "spiky" in alert["message"]
    assert not [d for d in receivers["biz"].records if d.body]
    with _client(system, keys["operator"]) as operator:
        reply = operator.get("/api/v1/reach/health", params={"channel": "spiky"})
    assert reply.status_code == 200, reply.text
    [channel] = reply.json()["channels"]
    judged = {b["signal"]: b for b in channel["baselines"]}
    assert set(judged) == {
        "technical_failure_rate",
        "business_failure_rate",
        "unknown_rate",
        "latency_p99_ms",
    }
    failure = judged["technical_failure_rate"]
    assert failure["alerting"] is True and failure["current"] == pytest.approx(0.40)
    assert failure["history_days"] == 7
    assert failure["mean"] == pytest.approx(2 / 100, abs=0.005)
    assert failure["mean"] < failure["threshold"] < 0.40
    # No UNKNOWN in the history or now: judged, and not alerting.
    assert judged["unknown_rate"]["alerting"] is False


def _run_cli(system: RunningSystem, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "reachstore_server.cli",
            "reach",
            "unknowns",
            "--grpc-port-base",
            str(system.grpc_port_base),
            "--api-key",
            key,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _submit(agent: httpx.Client, channel: str, ticket: str) -> str:
    reply = agent.post(
        "/api/v1/reach/tasks",
        json={
            "entity_id": ticket,
            "actions": [
                {
                    "name": "a",
                    "channel": channel,
                    "action_type": "notify",
                    "params": {"ticket": ticket},
                }
            ],
        },
    )
    assert reply.status_code == 202, reply.text
    return str(reply.json()["task"]["actions"][0]["action_id"])


def _wait_state(agent: httpx.Client, action_id: str, states: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        action = agent.get(f"/api/v1/reach/actions/{action_id}").json()["action"]
        if action["state"] in states or time.monotonic() > deadline:
            return dict(action)
        time.sleep(0.2)


def test_the_weekly_unknown_review_groups_by_channel_and_settlement(
    system: RunningSystem, keys: dict[str, str], receivers: dict[str, HttpReceiver]
) -> None:
    with _client(system, keys["agent"]) as agent, _client(system, keys["operator"]) as operator:
        # Sent, no answer: UNKNOWN. The receiver's look-up then says it was done.
        receivers["plain"].script("hang:2", "hang:2", "hang:2")
        receivers["plain"].script_status("state:done")
        by_lookup = _submit(agent, "plain", "T-lookup")
        assert _wait_state(agent, by_lookup, {"succeeded"})["state"] == "succeeded"
        receivers["plain"].script_status("status:404", "status:404", "status:404", "status:404")
        resolved = _submit(agent, "plain", "T-resolved")
        still_open = _submit(agent, "plain", "T-open")
        for action_id in (resolved, still_open):
            assert _wait_state(agent, action_id, {"needs_review"})["state"] == "needs_review"
        reply = operator.post(
            f"/api/v1/reach/actions/{resolved}:resolve",
            json={"outcome": "RESOLUTION_FAILED", "note": "receiver has no such ticket"},
        )
        assert reply.status_code == 200, reply.text

        review = operator.get("/api/v1/reach/unknowns", params={"since_s": 7 * 86400})
        assert review.status_code == 200, review.text
        body = review.json()
        groups = {(g["channel"], g["settled_by"], g["state"]): g for g in body["groups"]}
        assert set(groups) == {
            ("plain", "lookup", "succeeded"),
            ("plain", "operator", "failed"),
            ("plain", "open", "needs_review"),
        }
        assert int(body["total"]) == 3
        [entry] = groups[("plain", "operator", "failed")]["actions"]
        assert entry["action_id"] == resolved and entry["note"] == "receiver has no such ticket"
        assert entry["resolved_by"] and entry["settled_at"]
        [open_entry] = groups[("plain", "open", "needs_review")]["actions"]
        assert open_entry["action_id"] == still_open and not open_entry.get("settled_at")

        # The agent's key has no operator scope; a period out of range names its field.
        assert agent.get("/api/v1/reach/unknowns").status_code == 403
        bad = operator.get("/api/v1/reach/unknowns", params={"since_s": 10})
        assert bad.status_code == 400 and "since_s" in bad.json()["error"]["message"]

    done = _run_cli(system, keys["operator"], "--since", "7d", "--json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["total"] == 3
    assert {(g["settled_by"], g["state"]) for g in printed["groups"]} == {
        ("lookup", "succeeded"),
        ("operator", "failed"),
        ("open", "needs_review"),
    }
    text = _run_cli(system, keys["operator"], "--since", "7d")
    assert text.returncode == 0, text.stderr
    assert "3 actions entered UNKNOWN" in text.stdout
    assert "settled by operator" in text.stdout and "receiver has no such ticket" in text.stdout
    wrong = _run_cli(system, keys["operator"], "--since", "seven days")
    assert wrong.returncode == 2 and "--since" in wrong.stderr and "7d" in wrong.stderr


def test_the_review_lists_an_action_still_open_from_before_the_period(
    system: RunningSystem, keys: dict[str, str], receivers: dict[str, HttpReceiver]
) -> None:
    """An action that went UNKNOWN nine days ago and still waits for a person is exactly
    what the weekly read is for: `--since 7d` lists it (its history is moved nine days
    back by SQL on the database)."""
    with _client(system, keys["agent"]) as agent:
        receivers["plain"].script("hang:2", "hang:2", "hang:2")
        receivers["plain"].script_status("status:404", "status:404", "status:404")
        old = _submit(agent, "plain", "T-nine-days")
        assert _wait_state(agent, old, {"needs_review"})["state"] == "needs_review"
    engine = make_engine(f"sqlite:///{system.data_dir / 'reachstore.db'}")
    try:
        with engine.begin() as conn:
            moved = conn.execute(
                text("UPDATE reach_history SET at = datetime(at, '-9 days') WHERE action_id = :id"),
                {"id": old},
            ).rowcount
        assert moved >= 2
    finally:
        engine.dispose()
    done = _run_cli(system, keys["operator"], "--since", "7d", "--json")
    assert done.returncode == 0, done.stderr
    listed = {a["action_id"] for g in json.loads(done.stdout)["groups"] for a in g["actions"]}
    assert old in listed, "an action still open since nine days ago is not in the weekly review"


def test_a_period_longer_than_the_retention_is_refused_not_cut_short(
    system: RunningSystem, keys: dict[str, str]
) -> None:
    """Settled actions leave the live tables after the dedupe retention (14 days here):
    a review of 30 days would silently miss those of days 15 to 30."""
    with _client(system, keys["operator"]) as operator:
        reply = operator.get("/api/v1/reach/unknowns", params={"since_s": 30 * 86400})
        assert reply.status_code == 400, reply.text
        message = reply.json()["error"]["message"]
        assert "since_s" in message and "14" in message, message
        assert (
            operator.get("/api/v1/reach/unknowns", params={"since_s": 14 * 86400}).status_code
            == 200
        )
    refused = _run_cli(system, keys["operator"], "--since", "30d")
    assert refused.returncode != 0 and "retention" in refused.stderr, refused.stderr

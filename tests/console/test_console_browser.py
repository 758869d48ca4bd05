"""The operator console in a real headless chromium against a real `reachstore up`: sign
in with an operator key, settle an UNKNOWN action left by a receiver that never answered
and watch its task finish, ask for a look-up now, see a namespace missing from answers in
the health view, and verify the audit trail before and after tampering with it."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.console import system as console_system
from tests.console.conftest import sign_in
from tests.e2e.conftest import ingest
from tests.e2e.system import RunningSystem
from tests.e2e.test_auth import make_key
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

Shot = Callable[[Page, str], Path]


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpReceiver]:
    peer = HttpReceiver()
    peer.start()
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory, receiver: HttpReceiver
) -> Iterator[RunningSystem]:
    folder = tmp_path_factory.mktemp("console")
    config = folder / "reach.toml"
    config.write_text(console_system.reach_config(receiver))
    env = {
        "REACHSTORE_REQUIRE_KEYS": "true",
        "REACHSTORE_REACH_CONFIG": str(config),
        # Searching the slow namespace takes 5 s: with a small budget it times out.
        "REACHSTORE_FAULT_NAMESPACE_DELAY_MS": f"{console_system.SLOW_NAMESPACE}=5000",
    }
    running = RunningSystem(folder / "data", env)
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def keys(system: RunningSystem) -> dict[str, str]:
    return {
        "operator": make_key(system, "acme", "read,operator"),
        "agent": make_key(system, "acme", "read,write,reach"),
    }


@pytest.fixture(scope="module")
def agent(system: RunningSystem, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=system.http_url,
        timeout=30.0,
        headers={"Authorization": f"Bearer {keys['agent']}"},
    ) as client:
        yield client


def test_signing_in_needs_a_key_with_the_operator_scope(
    page: Page, system: RunningSystem, keys: dict[str, str], shot: Shot
) -> None:
    page.goto(f"{system.http_url}/console")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    # The keyboard alone gets through the form: the key field has focus, Enter submits.
    expect(page.get_by_label("Operator key")).to_be_focused()
    page.keyboard.type(keys["agent"])
    page.keyboard.press("Enter")
    refusal = page.get_by_role("alert")
    expect(refusal).to_contain_text("refused the key")
    expect(refusal).to_contain_text("operator")
    expect(page.get_by_role("navigation", name="Views")).to_be_hidden()
    expect(page.get_by_role("button", name="Sign out")).to_be_hidden()
    shot(page, "refused")
    page.get_by_label("Operator key").fill(keys["operator"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
    key_id = keys["operator"].split("_")[1]
    expect(page.locator("#who-key")).to_have_text(f"key {key_id}")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert page.evaluate("Object.keys(sessionStorage)") == []


def test_an_unknown_action_is_resolved_and_its_task_finishes(
    page: Page,
    system: RunningSystem,
    keys: dict[str, str],
    agent: httpx.Client,
    receiver: HttpReceiver,
    shot: Shot,
) -> None:
    receiver.script("hang:30")  # the effect happens, the answer never comes in time
    task = console_system.submit(agent, "WO-console-1")
    action_id = task["actions"][0]["action_id"]
    console_system.wait_action(agent, action_id, {"unknown"})

    sign_in(page, system.http_url, keys["operator"])
    row_button = page.locator(f'button[data-action-id="{action_id}"]')
    expect(row_button).to_be_visible()
    expect(page.locator(f'tr:has(button[data-action-id="{action_id}"])')).to_contain_text("unknown")
    row_button.click()
    detail = page.locator("#action-detail")
    expect(detail.get_by_role("heading", name="Action notify")).to_be_focused()
    expect(detail).to_contain_text(task["task_id"])
    expect(detail).to_contain_text(task["actions"][0]["idempotency_key"])
    expect(detail).to_contain_text("ambiguous_outcome")  # the history
    expect(detail).to_contain_text("OUTCOME_UNKNOWN")
    # The listed parameters are masked: the e-mail address never reaches the page.
    expect(detail.locator("pre.json")).to_contain_text("[email:")
    expect(detail).not_to_contain_text("ops@example.com")
    shot(page, "unknown-action")

    detail.get_by_label("It took effect (succeeded)").check()
    detail.get_by_label("Note: what you checked").fill("the receiver's log shows the ticket")
    detail.get_by_role("button", name="Resolve action").click()
    finished = detail.locator(f'[data-task-id="{task["task_id"]}"]')
    expect(finished).to_have_attribute("data-task-state", "succeeded")
    expect(finished).to_contain_text("succeeded")
    shot(page, "resolved")

    done = agent.get(f"/api/v1/reach/actions/{action_id}").json()["action"]
    assert done["state"] == "succeeded"
    assert done["resolution"]["note"] == "the receiver's log shows the ticket"
    # The queue no longer lists it.
    page.get_by_role("button", name="Refresh").click()
    expect(page.locator(f'button[data-action-id="{action_id}"]')).to_have_count(0)


def test_the_queue_filters_by_channel_age_and_tenant(
    page: Page,
    system: RunningSystem,
    keys: dict[str, str],
    agent: httpx.Client,
    receiver: HttpReceiver,
) -> None:
    receiver.script("hang:30")
    task = console_system.submit(agent, "WO-console-filters")
    action_id = task["actions"][0]["action_id"]
    console_system.wait_action(agent, action_id, {"unknown"})
    sign_in(page, system.http_url, keys["operator"])
    listed = page.locator(f'button[data-action-id="{action_id}"]')
    expect(listed).to_be_visible()

    page.get_by_label("Channel").fill("limited")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.get_by_text("Nothing waits for review with these filters.")).to_be_visible()
    page.get_by_label("Channel").fill("hook")
    page.get_by_label("Age").select_option(label="older than 1 hour")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.get_by_text("Nothing waits for review with these filters.")).to_be_visible()
    page.get_by_label("Age").select_option(label="any age")
    page.get_by_role("button", name="Apply filters").click()
    expect(listed).to_be_visible()
    # Another tenant's queue needs the auditor scope: the refusal says so.
    page.get_by_label("Tenant", exact=True).fill("globex")
    page.get_by_role("button", name="Apply filters").click()
    refusal = page.get_by_role("alert")
    expect(refusal).to_contain_text("auditor")
    expect(refusal).to_contain_text("Retrying will not help")
    # Settle it so later views start from an empty queue.
    assert (
        httpx.post(
            f"{system.http_url}/api/v1/reach/actions/{action_id}:resolve",
            headers={"Authorization": f"Bearer {keys['operator']}"},
            json={"outcome": "RESOLUTION_FAILED", "note": "filters test"},
        ).status_code
        == 200
    )


def test_an_operator_asks_for_a_look_up_now(
    page: Page,
    system: RunningSystem,
    keys: dict[str, str],
    agent: httpx.Client,
    receiver: HttpReceiver,
    shot: Shot,
) -> None:
    receiver.script("hang:30")
    task = console_system.submit(agent, "WO-console-2")
    action_id = task["actions"][0]["action_id"]
    console_system.wait_action(agent, action_id, {"unknown"})
    receiver.script_status("state:done")  # the receiver now knows it took effect

    sign_in(page, system.http_url, keys["operator"])
    page.locator(f'button[data-action-id="{action_id}"]').click()
    detail = page.locator("#action-detail")
    detail.get_by_role("button", name="Look it up at the receiver now").click()
    # The detail reloads with the look-up's outcome.
    expect(detail).to_contain_text("receiver_confirmed", timeout=20_000)
    expect(detail).to_contain_text("This action ended as succeeded")
    shot(page, "rechecked")
    assert agent.get(f"/api/v1/reach/tasks/{task['task_id']}").json()["task"]["state"] == (
        "succeeded"
    )


def test_the_health_view_shows_channels_and_a_partially_covered_namespace(
    page: Page, system: RunningSystem, keys: dict[str, str], agent: httpx.Client, shot: Shot
) -> None:
    ingest(agent, console_system.FAST_NAMESPACE, [{"document_id": "f", "text": "Rivers flow."}])
    ingest(agent, console_system.SLOW_NAMESPACE, [{"document_id": "s", "text": "Lakes fill."}])
    both = [console_system.FAST_NAMESPACE, console_system.SLOW_NAMESPACE]

    def coverage(namespaces: list[str]) -> float:
        reply = agent.post(
            "/api/v1/query", json={"namespaces": namespaces, "query": "rivers", "timeout_ms": 1500}
        )
        assert reply.status_code == 200, reply.text
        return float(reply.json()["meta"]["coverage_ratio"])

    # The first query of a namespace loads its index; after that the fast one answers and
    # the slow one runs out of its budget every time.
    deadline = time.monotonic() + 30
    while coverage([console_system.FAST_NAMESPACE]) < 1:
        assert time.monotonic() < deadline
    coverage(both)
    assert [coverage(both) for _ in range(3)] == [0.5, 0.5, 0.5]

    sign_in(page, system.http_url, keys["operator"], view="health")
    expect(page.get_by_role("heading", name="Health", exact=True)).to_be_visible()
    slow = page.locator(f'tr[data-namespace="{console_system.SLOW_NAMESPACE}"]')
    expect(slow).to_have_class("partial")
    expect(slow).to_contain_text("timeout: NAMESPACE_TIMEOUT ×")
    expect(slow).to_contain_text("0 %")
    fast = page.locator(f'tr[data-namespace="{console_system.FAST_NAMESPACE}"]')
    expect(fast).to_contain_text("100 %")
    expect(page.get_by_role("img", name="Query coverage per namespace")).to_be_visible()
    hook = page.locator('article[data-channel="hook"]')
    expect(hook).to_contain_text("breaker closed")
    expect(hook.get_by_role("img", name="State changes per bucket")).to_be_visible()
    expect(hook.get_by_role("img", name="End-to-end latency")).to_be_visible()
    expect(hook.get_by_role("img", name="Retry rate")).to_be_visible()
    expect(hook).to_contain_text("succeeded")
    expect(page.locator('article[data-channel="limited"]')).to_contain_text("limiter:")
    # Each channel shows the thresholds its alerts are raised at.
    thresholds = hook.locator('table[data-baselines="hook"]')
    expect(thresholds).to_contain_text("Alert thresholds")
    signals = ("technical_failure_rate", "business_failure_rate", "unknown_rate", "latency_p99_ms")
    for signal in signals:
        expect(thresholds.locator(f'tr[data-signal="{signal}"] td.threshold')).to_be_visible()
    # A new system has no history yet: said plainly, never an alert.
    expect(thresholds.locator('tr[data-signal="technical_failure_rate"]')).to_contain_text(
        "not judged"
    )
    shot(page, "health")


def test_the_unknown_review_lists_actions_by_channel_and_settlement(
    page: Page,
    system: RunningSystem,
    keys: dict[str, str],
    agent: httpx.Client,
    receiver: HttpReceiver,
    shot: Shot,
) -> None:
    receiver.script("hang:30")
    task = console_system.submit(agent, "WO-console-review")
    action_id = task["actions"][0]["action_id"]
    console_system.wait_action(agent, action_id, {"unknown"})

    sign_in(page, system.http_url, keys["operator"], view="unknowns")
    expect(page.get_by_role("heading", name="UNKNOWN review")).to_be_visible()
    entry = page.locator(f'tr[data-settled-by="open"] [data-action="{action_id}"]')
    expect(entry).to_be_visible()
    expect(entry.get_by_role("link", name=action_id)).to_have_attribute("href", "#/queue")
    row = page.locator(f'tr:has([data-action="{action_id}"])')
    expect(row).to_contain_text("still open")
    expect(row).to_have_attribute("data-channel", task["actions"][0]["channel"])
    shot(page, "unknown-review")


def _tamper_first_event(db: Path, tenant: str) -> None:
    """Edits an event in place, as the database's owner could after dropping the triggers
    that keep reachstore's own code from rewriting the trail."""
    conn = sqlite3.connect(db, timeout=30)
    try:
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'audit_events'"
        ).fetchall():
            conn.execute(f"DROP TRIGGER {name}")
        changed = conn.execute(
            "UPDATE audit_events SET method = 'Nothing' WHERE tenant = ? AND seq = 1", (tenant,)
        ).rowcount
        conn.commit()
        assert changed == 1
    finally:
        conn.close()


def test_verify_reports_a_clean_trail_then_where_and_how_it_was_tampered_with(
    page: Page, system: RunningSystem, keys: dict[str, str], shot: Shot
) -> None:
    sign_in(page, system.http_url, keys["operator"], view="audit")
    ages = page.locator("[data-checkpoint=ages]")
    expect(ages).to_contain_text("Last checkpoint signed")
    expect(ages).to_contain_text("Last head kept by every witness")
    events = page.locator("section[aria-labelledby=events-title] tbody tr[data-seq]")
    expect(events.first).to_be_visible()
    # Filtering: only the operator's resolutions.
    page.get_by_label("Method or action event").fill("ResolveAction")
    page.get_by_role("button", name="Apply filters").click()
    expect(events.first).to_contain_text("ResolveAction")
    methods = [row.locator("td").nth(3).inner_text() for row in events.all()]
    assert methods and set(methods) == {"ResolveAction"}, methods

    page.get_by_role("button", name="Verify the chain").click()
    verdict = page.locator("#verify-result [data-verdict]")
    expect(verdict).to_have_attribute("data-verdict", "ok")
    expect(verdict).to_contain_text("Intact")
    shot(page, "clean")

    _tamper_first_event(system.data_dir / "reachstore.db", "acme")
    time.sleep(0.2)
    page.get_by_role("button", name="Verify the chain").click()
    expect(verdict).to_have_attribute("data-verdict", "broken")
    expect(verdict).to_contain_text("Broken: edited")
    expect(verdict).to_contain_text("tenant acme, position 1")
    expect(verdict).to_contain_text("content no longer matches its hash")
    shot(page, "tampered")

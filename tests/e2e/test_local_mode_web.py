"""Local development mode (no keys) attacked by web pages the developer happens to visit,
on a real `reachstore up`: a DNS-rebinding page (its own origin now resolves to
127.0.0.1, so the browser sends `Host: rebind.test:<port>`), a foreign page posting blind
(`mode: "no-cors"`, no Content-Type, empty body), and the same requests made with httpx.
The keyless caller also holds only what a local developer needs: not `internal`, not
`auditor`.

The browser is Debian's chromium driven by Playwright. Its own Local Network Access
checks are turned off, as in browsers that have none: the bridge must hold on its own."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.console.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.attack_support import error_of
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

REBIND = "rebind.test"
ATTACKER = "attacker.test"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    folder = tmp_path_factory.mktemp("local-web")
    config = folder / "reach.toml"
    with HttpReceiver(default="accept:600") as receiver:
        config.write_text(
            f"""
[channels.hook]
kind = "webhook"
description = "posts to the test receiver"
action_types = ["notify"]
idempotency_params = ["n"]
[channels.hook.webhook]
url = "{receiver.url}"
status_url = "{receiver.status_url}"
""",
            encoding="utf-8",
        )
        running = RunningSystem(folder / "data", {"REACHSTORE_REACH_CONFIG": str(config)})
        running.start()
        yield running
        assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture
def http(system: RunningSystem) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=system.http_url, timeout=30) as client:
        yield client


def _blocked_action(http: httpx.Client) -> str:
    """An action that waits on another (whose send stays pending): it can be cancelled."""
    entity = f"E-{uuid.uuid4().hex[:8]}"
    actions = [
        {"name": "first", "channel": "hook", "action_type": "notify", "params": {"n": 1}},
        {
            "name": "second",
            "channel": "hook",
            "action_type": "notify",
            "params": {"n": 2},
            "depends_on": ["first"],
        },
    ]
    reply = http.post("/api/v1/reach/tasks", json={"entity_id": entity, "actions": actions})
    assert reply.status_code == 202, reply.text
    second = next(a for a in reply.json()["task"]["actions"] if a["name"] == "second")
    assert second["state"] == "blocked", second
    action_id: str = second["action_id"]
    return action_id


def _state(http: httpx.Client, action_id: str) -> str:
    state: str = http.get(f"/api/v1/reach/actions/{action_id}").json()["action"]["state"]
    return state


def _event(tenant: str) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {
        "event_id": uuid.uuid4().hex,
        "time": now,
        "tenant": tenant,
        "service": "admin",
        "method": "CreateKey",
        "caller_key_id": "forged",
    }


# --- Host, Origin and Content-Type, from any HTTP client --------------------------------------


def test_a_foreign_host_is_refused(system: RunningSystem, http: httpx.Client) -> None:
    port = system.http_port
    for host in (f"{REBIND}:{port}", REBIND, f"127.0.0.1.{REBIND}:{port}", f"localhost.:{port}"):
        reply = http.get("/api/v1/namespaces", headers={"Host": host})
        error = error_of(reply, 403, "HOST_NOT_ALLOWED")
        assert error["category"] == "permanent" and error["retryable"] is False, error
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost"):
        assert http.get("/api/v1/namespaces", headers={"Host": host}).status_code == 200, host
    # Health checks answer whatever the name (probes use addresses); they carry no data.
    assert http.get("/healthz", headers={"Host": f"{REBIND}:{port}"}).status_code == 200


def test_a_foreign_origin_is_refused(system: RunningSystem, http: httpx.Client) -> None:
    same = f"http://127.0.0.1:{system.http_port}"
    for origin in (f"http://{ATTACKER}", "null", f"http://localhost:{system.http_port}"):
        for reply in (
            http.get("/api/v1/namespaces", headers={"Origin": origin}),
            http.post("/api/v1/namespaces", json={"name": "via-page"}, headers={"Origin": origin}),
        ):
            error_of(reply, 403, "ORIGIN_NOT_ALLOWED")
    assert http.get("/api/v1/namespaces/via-page").status_code == 404
    assert http.get("/api/v1/namespaces", headers={"Origin": same}).status_code == 200


def test_a_post_needs_a_json_content_type_even_when_empty(http: httpx.Client) -> None:
    action_id = _blocked_action(http)
    for headers in (
        {},
        {"Content-Type": "text/plain"},
        {"Content-Type": "application/x-www-form-urlencoded"},
    ):
        for path in (
            f"/api/v1/reach/actions/{action_id}:cancel",
            "/api/v1/audit:verify",
            f"/api/v1/reach/actions/{action_id}:recheck",
        ):
            reply = http.post(path, headers=headers)
            error = error_of(reply, 415, "UNSUPPORTED_MEDIA_TYPE")
            assert error["structured_data"]["supported"] == ["application/json"], error
    assert _state(http, action_id) == "blocked"
    # Sent as JSON, an empty body is the empty request.
    cancelled = http.post(
        f"/api/v1/reach/actions/{action_id}:cancel", headers={"Content-Type": "application/json"}
    )
    assert cancelled.status_code == 200 and cancelled.json()["cancelled"], cancelled.text


# --- what the keyless caller may do -------------------------------------------------------------


def test_the_keyless_caller_holds_only_a_developers_scopes(http: httpx.Client) -> None:
    append = http.post("/api/v1/audit/events:append", json={"events": [_event("default")]})
    error = error_of(append, 403, "AUTH_SCOPE_MISSING")
    assert error["structured_data"]["required_scope"] == "internal", error
    assert "internal" not in error["structured_data"]["key_scopes"], error
    for reply in (
        http.get("/api/v1/audit/events", params={"tenant": "globex"}),
        http.post("/api/v1/audit:verify", json={"all_tenants": True}),
        http.get("/api/v1/reach/actions", params={"tenant": "globex"}),
    ):
        error = error_of(reply, 403, "AUTH_SCOPE_MISSING")
        assert error["structured_data"]["required_scope"] == "auditor", error
    # What a developer does locally still works, and the local trail still fills: the
    # services ship their events with a key of their own, not as the keyless caller.
    assert http.post("/api/v1/namespaces", json={"name": "dev-notes"}).status_code == 200
    assert http.get("/api/v1/keys").status_code == 200
    assert http.get("/api/v1/reach/actions").status_code == 200
    deadline = time.monotonic() + 30
    while True:
        events = http.get("/api/v1/audit/events", params={"method": "CreateNamespace"}).json()
        if any(e["params"].get("name") for e in events["events"]):
            break
        assert time.monotonic() < deadline, "the local trail stays empty"
        time.sleep(0.3)
    assert http.post("/api/v1/audit:verify", json={}).json()["ok"] is True


# --- real web pages ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    rules = f"MAP {REBIND} 127.0.0.1, MAP {ATTACKER} 127.0.0.1"
    args = [
        *CHROMIUM_ARGS,
        f"--host-resolver-rules={rules}",
        "--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessRespectPreflightResults",
    ]
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=args
        )
        yield launched
        launched.close()


def _page_results(browser: Browser, url: str, script: str) -> dict[str, Any]:
    """Opens ``url`` as an attacker's page whose script is ``script`` (an async function
    body returning JSON) and returns what it returned. Only the page itself is made up;
    every request its script sends goes over the network."""
    context = browser.new_context()
    try:
        page = context.new_page()
        html = (
            "<!doctype html><title>cute cats</title>"
            f"<script>window.attack = (async () => {{{script}}})();</script>"
        )
        page.route(
            url, lambda route: route.fulfill(status=200, content_type="text/html", body=html)
        )
        page.goto(url)
        results: dict[str, Any] = page.evaluate("window.attack")
        return results
    finally:
        context.close()


def test_a_dns_rebinding_page_gets_nothing(
    system: RunningSystem, http: httpx.Client, browser: Browser
) -> None:
    action_id = _blocked_action(http)
    forged = json.dumps({"events": [_event("globex")]})
    script = f"""
      const out = {{}};
      const answer = async (name, path, init) => {{
        const reply = await fetch(path, init);
        out[name] = [reply.status, await reply.text()];
      }};
      await answer("trail", "/api/v1/audit/events?tenant=globex");
      await answer("namespaces", "/api/v1/namespaces");
      await answer("cancel", "/api/v1/reach/actions/{action_id}:cancel", {{method: "POST"}});
      await answer("append", "/api/v1/audit/events:append", {{method: "POST",
                   headers: {{"Content-Type": "application/json"}}, body: {json.dumps(forged)}}});
      return out;
    """
    # Same origin as far as the browser knows: it reads every answer.
    results = _page_results(browser, f"http://{REBIND}:{system.http_port}/cats.html", script)
    got = {name: (status, body[:160]) for name, (status, body) in results.items()}
    assert _state(http, action_id) == "blocked", f"a rebinding page cancelled an action: {got}"
    for name, (status, body) in results.items():
        assert status == 403, f"{name}: the page got {status}: {got}"
        assert json.loads(body)["error"]["code"] == "HOST_NOT_ALLOWED", body


def test_a_foreign_page_cannot_post_blind(
    system: RunningSystem, http: httpx.Client, browser: Browser
) -> None:
    action_id = _blocked_action(http)
    bridge = f"http://127.0.0.1:{system.http_port}"
    script = f"""
      // no-cors: the browser sends it (a "simple" request, no preflight) but hides the answer
      await fetch("{bridge}/api/v1/reach/actions/{action_id}:cancel",
                  {{method: "POST", mode: "no-cors"}});
      await fetch("{bridge}/api/v1/namespaces", {{method: "POST", mode: "no-cors",
                   headers: {{"Content-Type": "text/plain"}}, body: ""}});
      return {{}};
    """
    _page_results(browser, f"http://{ATTACKER}:8080/cats.html", script)
    time.sleep(0.5)
    assert _state(http, action_id) == "blocked", "a foreign page cancelled an action"


def test_the_pages_own_origin_still_works(system: RunningSystem, browser: Browser) -> None:
    """A page served under the bridge's own loopback origin (the console is one) calls the
    API as before."""
    script = """
      const reply = await fetch("/api/v1/namespaces", {method: "POST",
        headers: {"Content-Type": "application/json"}, body: JSON.stringify({name: "from-page"})});
      return {status: reply.status};
    """
    results = _page_results(browser, f"http://127.0.0.1:{system.http_port}/page.html", script)
    assert results["status"] == 200, results

"""The console when the services behind the bridge are not there: every panel says which
service is not answering and when to try again, instead of staying blank."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.console.conftest import sign_in
from tests.e2e.system import free_port_block

pytestmark = pytest.mark.e2e

# Well formed, so the bridge forwards it; nothing behind the bridge can check it.
SOME_KEY = "rsk_0123456789abcdef_" + "a" * 32


@pytest.fixture(scope="module")
def lone_bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bridge alone: its four services' ports have nobody listening."""
    base = free_port_block(5)
    env = {
        **os.environ,
        "REACHSTORE_DATA_DIR": str(tmp_path_factory.mktemp("lone")),
        "REACHSTORE_LISTEN": f"127.0.0.1:{base + 4}",
        "REACHSTORE_QUERY_ADDR": f"127.0.0.1:{base}",
        "REACHSTORE_INGEST_ADDR": f"127.0.0.1:{base + 1}",
        "REACHSTORE_REACH_ADDR": f"127.0.0.1:{base + 2}",
        "REACHSTORE_AUDIT_ADDR": f"127.0.0.1:{base + 3}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "reachstore_server.bridge.main"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{base + 4}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "the bridge did not start"
        time.sleep(0.1)
    yield url
    process.terminate()
    process.wait(timeout=30)


def test_each_view_names_the_service_that_is_down_and_when_to_retry(
    page: Page, lone_bridge: str, shot: Callable[[Page, str], Path]
) -> None:
    # The key cannot be checked while reach is away; the console lets the operator in and
    # says so in each panel.
    sign_in(page, lone_bridge, SOME_KEY)
    queue_error = page.get_by_role("alert").first
    expect(queue_error).to_contain_text("The reach service is not answering right now")
    expect(queue_error).to_contain_text("Try again in 1 s")
    expect(queue_error).to_contain_text("SERVICE_UNAVAILABLE · transient")
    expect(page.get_by_role("button", name="Retry the review queue")).to_be_visible()
    shot(page, "queue")

    # From the keyboard: the first Tab reaches the skip link, the views are links.
    page.get_by_role("link", name="Review queue").focus()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="UNKNOWN review")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="UNKNOWN review", exact=True)).to_be_focused()
    review = page.locator("section[aria-labelledby=unknowns-title]")
    expect(review).to_contain_text("The reach service is not answering right now")
    expect(page.get_by_role("button", name="Retry the UNKNOWN review")).to_be_visible()
    shot(page, "unknowns")

    page.get_by_role("link", name="UNKNOWN review").focus()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Health")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Health", exact=True)).to_be_focused()
    channels = page.locator("section[aria-labelledby=channels-title]")
    namespaces = page.locator("section[aria-labelledby=namespaces-title]")
    expect(channels).to_contain_text("The reach service is not answering right now")
    expect(namespaces).to_contain_text("The query service is not answering right now")
    shot(page, "health")

    page.get_by_role("link", name="Audit").click()
    events = page.locator("section[aria-labelledby=events-title]")
    expect(events).to_contain_text("The audit service is not answering right now")
    page.get_by_role("button", name="Verify the chain").click()
    expect(page.locator("#verify-result")).to_contain_text(
        "The audit service is not answering right now"
    )
    shot(page, "audit")


def test_the_console_is_served_with_a_strict_policy_and_only_get(lone_bridge: str) -> None:
    page = httpx.get(f"{lone_bridge}/console/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "http" not in page.text.replace("http-equiv", "")  # nothing from elsewhere
    script = httpx.get(f"{lone_bridge}/console/js/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert httpx.get(f"{lone_bridge}/console").headers["location"] == "/console/"
    missing = httpx.get(f"{lone_bridge}/console/js/nope.js")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "ROUTE_NOT_FOUND"
    posted = httpx.post(f"{lone_bridge}/console/")
    assert posted.status_code == 405 and posted.headers["allow"] == "GET, HEAD"

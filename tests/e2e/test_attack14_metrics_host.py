"""The metrics ports of a keyless `reachstore up` attacked by a DNS-rebinding page.

The bridge refuses a Host it does not serve (docs/SECURITY.md, "Local development mode"),
but `up` also listens on loopback with two Prometheus servers (query on base+9, reach on
base+8) that answer whatever the Host. A page whose own name now resolves to 127.0.0.1
names its own host, exactly as it does against the bridge, and reads what every tenant
does: actions by channel and state, queries and partial answers, the audit outbox. The
page is stood in for by httpx sending the Host such a browser sends.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

REBIND = "rebind.test"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    folder = tmp_path_factory.mktemp("attack14-metrics")
    config = folder / "reach.toml"
    with HttpReceiver(default="accept:600") as receiver:
        config.write_text(
            f"""
[channels.payroll-hook]
kind = "webhook"
description = "posts to the test receiver"
action_types = ["notify"]
idempotency_params = ["n"]
[channels.payroll-hook.webhook]
url = "{receiver.url}"
status_url = "{receiver.status_url}"
""",
            encoding="utf-8",
        )
        running = RunningSystem(folder / "data", {"REACHSTORE_REACH_CONFIG": str(config)})
        running.start()
        yield running
        assert running.stop() == 0, "".join(running.output[-40:])


def _activity(system: RunningSystem) -> None:
    """What a developer does: a reach action and a query, so the metrics hold figures."""
    with httpx.Client(base_url=system.http_url, timeout=30) as http:
        action = {
            "name": "a",
            "channel": "payroll-hook",
            "action_type": "notify",
            "params": {"n": 1},
        }
        reply = http.post(
            "/api/v1/reach/tasks",
            json={"entity_id": f"E-{uuid.uuid4().hex[:8]}", "actions": [action]},
        )
        assert reply.status_code == 202, reply.text
        reply = http.post("/api/v1/query", json={"namespaces": ["demo"], "query": "storage"})
        assert reply.status_code == 200, reply.text


@pytest.mark.parametrize("which", ["query", "reach"])
def test_a_rebinding_page_cannot_read_the_metrics(system: RunningSystem, which: str) -> None:
    _activity(system)
    url = system.metrics_url if which == "query" else system.reach_metrics_url
    port = int(url.split(":")[2].split("/")[0])
    with httpx.Client(timeout=10) as client:
        # The server answers the loopback name the operator's Prometheus uses.
        deadline = time.monotonic() + 10
        own = client.get(url)
        while "reachstore_" not in own.text and time.monotonic() < deadline:
            time.sleep(0.3)
            own = client.get(url)
        assert own.status_code == 200 and "reachstore_" in own.text, own.text[:300]
        # The page's request names the page's own host, as the browser sends it.
        rebound = client.get(url, headers={"Host": f"{REBIND}:{port}"})
    leaked = [line for line in rebound.text.splitlines() if line.startswith("reachstore_")]
    assert rebound.status_code == 403 and not leaked, (
        f"the {which} metrics answer Host {REBIND}: {rebound.status_code}, "
        f"{len(leaked)} series, e.g. {leaked[:3]}"
    )

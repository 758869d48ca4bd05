"""Reading an action whose dedupe record was archived (docs/AT_MOST_ONCE.md, "Dedupe
records"): its rows left the live tables, but the answer must say so — archived, how it
ended, when — instead of reading like an id that never existed. The move is the service's
own (``ReachStore.archive_expired``), run on the system's database with a clock 15 days
ahead, as the hourly sweep would run it then."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reachstore_server.reach.store import ReachStore
from reachstore_server.storage.engine import make_engine, make_sessions
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpReceiver]:
    with HttpReceiver() as peer:
        yield peer


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory, receiver: HttpReceiver
) -> Iterator[RunningSystem]:
    folder = tmp_path_factory.mktemp("archived")
    config = folder / "reach.toml"
    config.write_text(
        f"""
[engine]
dedupe_retention_days = 14
[channels.hook]
kind = "webhook"
description = "hook"
action_types = ["notify"]
[channels.hook.webhook]
url = "{receiver.url}"
"""
    )
    running = RunningSystem(folder / "data", {"REACHSTORE_REACH_CONFIG": str(config)})
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


def _archive_everything_finished(data_dir: Path) -> int:
    engine = make_engine(f"sqlite:///{data_dir / 'reachstore.db'}")
    try:
        store = ReachStore(make_sessions(engine))
        later = dt.datetime.now(dt.UTC) + dt.timedelta(days=15)
        return store.archive_expired(later, 14).tasks
    finally:
        engine.dispose()


def test_an_archived_action_is_answered_as_archived(system: RunningSystem) -> None:
    with httpx.Client(base_url=system.http_url, timeout=30) as http:
        reply = http.post(
            "/api/v1/reach/tasks",
            json={
                "entity_id": "order-archived",
                "actions": [
                    {"name": "a", "channel": "hook", "action_type": "notify", "params": {"n": 1}}
                ],
            },
        )
        assert reply.status_code == 202, reply.text
        action_id = reply.json()["task"]["actions"][0]["action_id"]
        deadline = time.monotonic() + 30
        while http.get(f"/api/v1/reach/actions/{action_id}").json()["action"]["state"] != (
            "succeeded"
        ):
            assert time.monotonic() < deadline, "the action did not succeed"
            time.sleep(0.2)
        assert _archive_everything_finished(system.data_dir) >= 1

        gone = http.get(f"/api/v1/reach/actions/{action_id}")
        assert gone.status_code == 404, gone.text
        error = gone.json()["error"]
        assert error["code"] == "ACTION_NOT_FOUND"
        assert "archived" in error["message"] and "succeeded" in error["message"], error
        details = error["structured_data"]
        assert details["reason"] == "archived" and details["state"] == "succeeded", details
        assert details["archived_at"] and details["finished_at"], details
        # An id that never existed still reads as plainly not found.
        never = http.get("/api/v1/reach/actions/" + "0" * 32)
        assert never.status_code == 404
        assert "archived" not in never.json()["error"]["message"]

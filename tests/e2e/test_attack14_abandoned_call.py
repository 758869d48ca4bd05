"""A call the client gives up on while it is changing something, on a real `reachstore up
--require-keys`: it must still leave its event in the trail, with how it ended.

Every call that changes something is audited, failures included
(reachstore_server/audit_client/calls.py;
docs/INPUT_AND_OUTBOX.md, "A call that fails after its first write"). `CancelAction` of a
sent action asks the receiver to cancel it (a POST to the channel's `cancel_url`) before
it writes anything. When the receiver is slow to answer and the caller's deadline runs
out meanwhile, gRPC cancels the handler: the cancel request has reached the receiver, but
the call guard catches only ``Exception`` (``asyncio.CancelledError`` is not one), so the
audited call is never ended and the trail holds no trace of it.
"""

from __future__ import annotations

import http.server
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from tests.e2e.attack_support import bearer, cli_key, http_client
from tests.e2e.system import RunningSystem
from tests.e2e.test_reach_crash import action_spec
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

CANCEL_DELAY_S = 4.0


class SlowCanceller:
    """A receiver's cancel endpoint that takes its time: it records each request, then
    answers 200 after ``CANCEL_DELAY_S``."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server spelling
                outer.requests.append(self.path)
                time.sleep(CANCEL_DELAY_S)
                body = b"{}"
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the caller went away first

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SlowCanceller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def canceller() -> Iterator[SlowCanceller]:
    with SlowCanceller() as slow:
        yield slow


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory, canceller: SlowCanceller
) -> Iterator[RunningSystem]:
    folder = tmp_path_factory.mktemp("attack14-abandoned")
    config = folder / "reach.toml"
    # Every send is accepted and stays pending, so the action is open and cancellable.
    with HttpReceiver(default="accept:600") as receiver:
        config.write_text(
            f"""
[channels.hook]
kind = "webhook"
description = "posts to the test receiver; cancels at a slow endpoint"
action_types = ["notify"]
idempotency_params = ["n"]
[channels.hook.webhook]
url = "{receiver.url}"
status_url = "{receiver.status_url}"
cancel_url = "{canceller.url}/tasks/{{external_id}}/cancel"
""",
            encoding="utf-8",
        )
        env = {
            "REACHSTORE_REQUIRE_KEYS": "true",
            "REACHSTORE_REACH_CONFIG": str(config),
            "REACHSTORE_LIMIT_KEY_QUERY_RATE": "0",
            "REACHSTORE_LIMIT_TENANT_QUERY_RATE": "0",
            "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
            "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
        }
        running = RunningSystem(folder / "data", env)
        running.start()
        yield running
        assert running.stop() == 0, "".join(running.output[-40:])


def _pending_action(stub: pb_grpc.ReachServiceStub, key: str) -> pb.Action:
    submitted = stub.SubmitTask(
        pb.SubmitTaskRequest(
            entity_id=f"E-{uuid.uuid4().hex[:8]}", actions=[action_spec("a0", "hook", {"n": 1})]
        ),
        metadata=bearer(key),
        timeout=15,
    )
    action_id = submitted.task.actions[0].action_id
    deadline = time.monotonic() + 30
    while True:
        action = stub.GetAction(
            pb.GetActionRequest(action_id=action_id), metadata=bearer(key), timeout=10
        ).action
        if action.state == pb.ACTION_STATE_PENDING and action.external_id:
            return action
        assert time.monotonic() < deadline, f"action never became pending: {action}"
        time.sleep(0.2)


def _events(http: httpx.Client, method: str) -> list[dict[str, Any]]:
    reply = http.get("/api/v1/audit/events", params={"method": method})
    assert reply.status_code == 200, reply.text
    events: list[dict[str, Any]] = reply.json()["events"]
    return events


def test_a_cancel_abandoned_by_its_caller_is_still_audited(
    system: RunningSystem, canceller: SlowCanceller
) -> None:
    key = cli_key(system, "acme", "read,reach")["secret"]
    with grpc.insecure_channel(system.reach_addr) as channel:
        stub = pb_grpc.ReachServiceStub(channel)
        action = _pending_action(stub, key)
        with pytest.raises(grpc.RpcError) as gave_up:
            stub.CancelAction(
                pb.CancelActionRequest(action_id=action.action_id),
                metadata=bearer(key),
                timeout=1.0,
            )
    assert gave_up.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, gave_up.value
    # The call did reach outside: the receiver was asked to cancel the action.
    assert canceller.requests == [f"/tasks/{action.external_id}/cancel"], canceller.requests

    # Past the receiver's answer and a few shipper rounds, the trail must know of the call.
    with http_client(system, key) as http:
        deadline = time.monotonic() + CANCEL_DELAY_S + 10
        events = _events(http, "CancelAction")
        while not events and time.monotonic() < deadline:
            time.sleep(0.5)
            events = _events(http, "CancelAction")
        # The trail is being filled meanwhile: the submit before it was shipped.
        assert _events(http, "SubmitTask"), "the shipper delivered nothing at all"
    assert events, (
        "CancelAction reached the receiver and the caller gave up on it, but the trail "
        "holds no event of the call"
    )
    assert [e["params"].get("action_id") for e in events] == [action.action_id], events

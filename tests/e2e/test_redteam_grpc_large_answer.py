"""Red team: a gRPC receiver that does the work and answers with a message larger than the
client accepts (grpc's default limit is 4 MiB) makes the client report RESOURCE_EXHAUSTED
("Received message larger than max"). The gRPC channel reads every RESOURCE_EXHAUSTED as
the receiver's quota ("rate limited", not ambiguous), so the executor re-sends the call
on the rate-limit schedule, ``max_rate_limited`` (6) more times, each taking effect again,
and then settles the action ``failed / rate_limited_too_often``.

The status was produced by our own client after the call was handled: the receiver never
refused anything. An odd but ordinary receiver (one that echoes a big document back) is
enough. The fault checker has no gRPC channel, so it cannot meet this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.e2e.redteam import describe, reach_process, settle, submit, write_config
from tests.e2e.test_reach_crash import PG_MARKED, state_name
from tests.reach.peers import ASSIGN_METHOD, GrpcReceiver

pytestmark = pytest.mark.e2e


class BigAnswer(GrpcReceiver):
    """Handles every call (recorded in ``calls``) and answers with a 5 MiB id."""

    def _assign(self, request: Any, context: grpc.ServicerContext) -> Any:
        super()._assign(request, context)
        return self.reply_class(id="x" * (5 << 20), accepted=True)


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_an_oversized_answer_after_the_effect_is_not_resent(
    tmp_path: Path, database_url: str
) -> None:
    with BigAnswer() as receiver:
        config = write_config(
            tmp_path / "reach.toml",
            f"""
[channels.tickets]
kind = "grpc"
description = "assigns a ticket: not idempotent"
action_types = ["notify"]

[channels.tickets.grpc]
target = "{receiver.target}"
tls = false  # the test server speaks plain text
method = "{ASSIGN_METHOD}"
timeout_s = 4

[channels.tickets.retry]
rate_limited_base_s = 0.2
rate_limited_cap_s = 0.4
""",
        )
        with reach_process(tmp_path, database_url, config) as reach:
            reply = submit(reach.stub, "tickets", {"ticket": "T-1", "group": "net", "count": 1})
            action_id = reply.task.actions[0].action_id
            action = settle(reach.stub, action_id, 60, until=frozenset({"ready", "submitting"}))
        effects = sum(c.metadata.get("x-reachstore-action-id") == action_id for c in receiver.calls)

    state = state_name(action)
    print(f"{effects} call(s) handled by the receiver, action {state}\n{describe(action)}")
    assert effects <= 1, f"{effects} effects of one non-idempotent gRPC action\n{describe(action)}"
    assert state != "failed", f"failed after {effects} handled call(s)\n{describe(action)}"

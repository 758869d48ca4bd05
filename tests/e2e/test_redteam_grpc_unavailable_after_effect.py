"""Red team: a gRPC call whose connection is lost after the server did the work comes
back UNAVAILABLE, which the gRPC channel calls "the call did not get through (transient,
safe to resend)". So a non-idempotent gRPC action is sent again on every retry, takes
effect five times with the default retry policy, and ends ``failed``.

gRPC reports UNAVAILABLE ("Stream removed (Socket closed)", "Connection reset by peer")
for any stream whose transport went away, whether or not the request had been written
and handled; only a call that never left the client is safe to resend, and grpc-core's
own retry logic tells those apart for exactly that reason. Here the receiver is a real
gRPC server behind a TCP proxy (as an L4 balancer sits) that resets the connection after
the server handled the call, before its answer went back: the drop fault of the fault
checker, on gRPC.

The fault checker never configures a gRPC (or e-mail) channel: its channels "of every
kind" are all webhooks (``tests/faults/config.py``), so none of the gRPC channel's
classification is under test there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.redteam import describe, reach_process, settle, submit, write_config
from tests.e2e.redteam_grpc import CutAfterEffect
from tests.e2e.test_reach_crash import PG_MARKED, state_name
from tests.reach.peers import ASSIGN_METHOD

pytestmark = pytest.mark.e2e


def grpc_channel(target: str) -> str:
    """A gRPC channel with every safety setting at its default (not idempotent)."""
    return f"""
[channels.tickets]
kind = "grpc"
description = "assigns a ticket: not idempotent"
action_types = ["notify"]

[channels.tickets.grpc]
target = "{target}"
tls = false  # the test server speaks plain text
method = "{ASSIGN_METHOD}"
timeout_s = 2

[channels.tickets.retry]
base_s = 0.1
cap_s = 0.2
"""


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_a_grpc_call_cut_after_it_took_effect_is_not_resent(
    tmp_path: Path, database_url: str
) -> None:
    with CutAfterEffect() as receiver:
        config = write_config(tmp_path / "reach.toml", grpc_channel(receiver.target))
        with reach_process(tmp_path, database_url, config) as reach:
            reply = submit(reach.stub, "tickets", {"ticket": "T-1", "group": "net", "count": 1})
            action_id = reply.task.actions[0].action_id
            action = settle(reach.stub, action_id, 40, until=frozenset({"ready", "submitting"}))
        effects = sum(c.metadata.get("x-reachstore-action-id") == action_id for c in receiver.calls)

    state = state_name(action)
    print(f"{effects} call(s) handled by the receiver, action {state}\n{describe(action)}")
    assert effects <= 1, f"{effects} effects of one non-idempotent gRPC action\n{describe(action)}"
    assert state != "failed", f"failed after {effects} handled call(s)\n{describe(action)}"

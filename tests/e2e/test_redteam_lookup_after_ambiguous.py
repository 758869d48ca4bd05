"""Red team: after an ambiguous send, the status look-up (or a cancel) of the *last*
attempt decides the action, so it ends ``failed`` or ``cancelled`` although an earlier
attempt took effect.

docs/AT_MOST_ONCE.md §1: "Every ambiguous send is counted on the action
(``ambiguous_sends``). From then on the action can no longer end ``failed``". That holds
on the send path (``_send_failed``), not on the look-up path: ``_settle_by_lookup`` settles
FAILED whatever ``ambiguous_sends`` says, and CancelAction of a PENDING action settles
CANCELLED after the receiver cancelled the last attempt.

On an ``idempotent = true`` channel (re-sending is harmless, so an ambiguous send is
re-sent) whose receiver does not de-duplicate, each attempt is its own job at the
receiver: attempt 1 takes effect and its connection drops (ambiguous), attempt 2 is
accepted as a new job (202), and that job fails (or is cancelled). The action took effect
(attempt 1), and reach says it did not.

The fault checker cannot see this: its status look-up only ever answers done, pending or
404 (``tests/faults/receivers.py``), never "failed", and its workload never cancels.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import PG_MARKED, state_name
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


def config_for(tmp_path: Path, receiver: HttpReceiver) -> Path:
    return write_config(
        tmp_path / "reach.toml",
        webhook_channel(
            "address",
            receiver.url,
            extra="idempotent = true\n\n[channels.address.retry]\nbase_s = 0.1\ncap_s = 0.2\n\n"
            "[channels.address.pending]\npoll_interval_s = 0.3\n",
            webhook_extra=f'status_url = "{receiver.status_url}"\n'
            f'cancel_url = "{receiver.cancel_url}"\n',
        ),
    )


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_a_failed_look_up_of_a_resend_does_not_undo_an_earlier_effect(
    tmp_path: Path, database_url: str
) -> None:
    with HttpReceiver(late_s=30) as receiver:
        receiver.script("drop_after_effect", "accept")
        receiver.script_status("state:failed")
        with reach_process(tmp_path, database_url, config_for(tmp_path, receiver)) as reach:
            reply = submit(reach.stub, "address", {"order": "o-1", "address": "1 Main St"})
            action_id = reply.task.actions[0].action_id
            action = settle(reach.stub, action_id, 30)
        effects = receiver.effects_total()

    state = state_name(action)
    print(f"{effects} effect(s) at the receiver, action {state}\n{describe(action)}")
    assert effects >= 1  # attempt 1 took effect
    assert state != "failed", f"failed although attempt 1 took effect\n{describe(action)}"


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_cancelling_a_resend_does_not_undo_an_earlier_effect(
    tmp_path: Path, database_url: str
) -> None:
    with HttpReceiver(late_s=30) as receiver:
        receiver.script("drop_after_effect", "accept")
        with reach_process(tmp_path, database_url, config_for(tmp_path, receiver)) as reach:
            reply = submit(reach.stub, "address", {"order": "o-1", "address": "1 Main St"})
            action_id = reply.task.actions[0].action_id
            settle(reach.stub, action_id, 30, until=frozenset({"ready", "submitting"}))
            cancelled = reach.stub.CancelAction(
                pb.CancelActionRequest(action_id=action_id), timeout=10
            )
            action = settle(reach.stub, action_id, 10)
        effects = receiver.effects_total()

    state = state_name(action)
    print(f"cancel answered {cancelled.cancelled}; {effects} effect(s), action {state}")
    assert effects >= 1
    assert state != "cancelled", f"cancelled although attempt 1 took effect\n{describe(action)}"

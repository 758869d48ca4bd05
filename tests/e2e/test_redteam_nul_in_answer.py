"""Red team: on PostgreSQL a receiver's answer with a NUL byte in it cannot be recorded,
so the receiver's confirmation is thrown away: the action ends ``unknown`` /
``needs_review`` (``worker_lost_mid_send``) on a channel that may not re-send, and on one
that may, it is sent again and again, each time confirmed, each time lost.

The receipt keeps a snippet of the answer (``channels/webhook.py`` ``_snippet``: decoded
with ``errors="replace"``, so a NUL byte stays a NUL character), masked as text when it
is not JSON, and PostgreSQL's ``text`` cannot hold U+0000: the settle's INSERT fails with
a DataError, which ``Executor._settle`` does not retry, ``_step`` logs it and leaves the
action ``submitting`` until its lease runs out. Binary answers are ordinary (a receiver
that answers with a small protobuf, a padded buffer, a C string): nothing about them says
the action did not happen.

The same with valid JSON whose "id" holds an escaped NUL (``\\u0000``): the snippet is
re-escaped, but ``external_id`` is stored raw. The fault checker's receivers only ever
answer plain JSON ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import PG_MARKED, state_name
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


ANSWERS = {
    # A binary answer: the NUL lands in the receipt's snippet.
    "binary": (b"OK\x00\x01\x02", "application/octet-stream"),
    # Valid JSON whose id holds an escaped NUL: the NUL lands in ``external_id``.
    "json_id": (b'{"id": "t\\u00001", "state": "done"}', "application/json"),
}


class NulAnswer(HttpReceiver):
    """Takes every POST and answers 200 with ``body``, which holds a NUL."""

    def __init__(self, body: bytes, content_type: str) -> None:
        super().__init__()
        self.body, self.content_type = body, content_type
        self.effects = 0

    def _deliver(self, handler: Any, body: bytes) -> None:
        with self._lock:
            self.effects += 1
        handler.answer_raw(200, self.body, self.content_type)


@pytest.mark.parametrize("answer", sorted(ANSWERS))
@pytest.mark.parametrize("resend", [False, True], ids=["plain", "receiver_deduplicates"])
@pytest.mark.parametrize("database_url", PG_MARKED[1:], indirect=True)
def test_a_confirmation_with_a_nul_byte_is_recorded(
    tmp_path: Path, database_url: str, resend: bool, answer: str
) -> None:
    with NulAnswer(*ANSWERS[answer]) as receiver:
        extra = "receiver_deduplicates = true\n" if resend else ""
        config = write_config(
            tmp_path / "reach.toml",
            webhook_channel(
                "orders",
                receiver.url,
                extra=extra,
                webhook_extra="read_timeout_s = 1\nconnect_timeout_s = 0.5\n",
            ),
            engine="lease_s = 3",
        )
        with reach_process(tmp_path, database_url, config) as reach:
            reply = submit(reach.stub, "orders", {"charge": "order-1"})
            action = settle(reach.stub, reply.task.actions[0].action_id, 40)
        effects = receiver.effects

    print(f"{effects} POST(s), each answered 200\n{describe(action)}")
    assert state_name(action) == "succeeded", (
        f"confirmed {effects} time(s), yet\n{describe(action)}"
    )
    assert effects == 1

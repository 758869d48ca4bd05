"""Red team: on PostgreSQL every lease is judged by the server's ``clock_timestamp()``, a
wall clock. When the database host's clock steps forward (an NTP/chrony step after drift,
a VM resumed or live-migrated and corrected), every lease in flight is at once "expired"
and the next claim, even by the very worker that is still sending, takes the send over:

- on a channel that may not re-send, the action goes ``unknown / worker_lost_mid_send``
  and the receiver's 200 that arrives a moment later is refused by the lease fence (a
  confirmed action ends in review: the checker's ``receipt_thrown_away``);
- on a channel that may re-send, it is sent again while the first send is in flight
  (the checker's ``concurrent_sends``).

One reach process is enough: its own claim loop does it. The fault checker skews only
workers' clocks (libfaketime), never the database server's, and restarts the database
without touching its clock.

The database server runs under libfaketime reading its offset from a file
(``FAKETIME_TIMESTAMP_FILE``, uncached), which the test rewrites from "+0" to "+90s" while
the send is in flight: the step an NTP daemon makes.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.private_postgres import PrivatePostgres
from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import state_name
from tests.faults.cluster import LIBFAKETIME, _require_libfaketime
from tests.reach.peers import HttpReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ANSWER_AFTER_S = 4.0  # the receiver's work, well inside the read timeout (8 s)
STEP = "+90s"  # more than the 30 s lease


class SteppedPostgres(PrivatePostgres):
    """A private PostgreSQL whose wall clock is offset by what ``clock_file`` says."""

    def __init__(self) -> None:
        _require_libfaketime()
        super().__init__()
        self.clock_file = self.root / "faketime"
        self.clock_file.write_text("+0\n")
        os.chmod(self.root, 0o755)
        os.chmod(self.clock_file, 0o644)

    def _run(self, *args: str) -> None:
        command = [str(self._bin / args[0]), *args[1:]]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        env = dict(
            os.environ,
            LD_PRELOAD=LIBFAKETIME,
            FAKETIME_TIMESTAMP_FILE=str(self.clock_file),
            FAKETIME_NO_CACHE="1",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
        )
        subprocess.run(command, check=True, capture_output=True, timeout=120, env=env)

    def step(self, offset: str) -> None:
        self.clock_file.write_text(f"{offset}\n")


@pytest.fixture
def stepped() -> Iterator[SteppedPostgres]:
    server = SteppedPostgres()
    server.init()
    try:
        yield server
    finally:
        server.destroy()


class Working(HttpReceiver):
    """Records each POST on arrival, works ``ANSWER_AFTER_S``, then answers 200."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.arrived = threading.Event()
        self.spans: list[tuple[float, float]] = []

    def _deliver(self, handler: Any, body: bytes) -> None:
        start = time.monotonic()
        self.arrived.set()
        time.sleep(ANSWER_AFTER_S)
        super()._deliver(handler, body)
        with self._lock:
            self.spans.append((start, time.monotonic()))


def _run(tmp_path: Path, server: SteppedPostgres, dedupe: bool) -> tuple[Any, Working]:
    database_url = server.create_database("reachstore")
    with Working(dedupe=dedupe) as receiver:
        extra = "receiver_deduplicates = true\n" if dedupe else ""
        config = write_config(
            tmp_path / "reach.toml", webhook_channel("orders", receiver.url, extra=extra)
        )
        with reach_process(tmp_path, database_url, config) as reach:
            reply = submit(reach.stub, "orders", {"charge": "order-1"})
            assert receiver.arrived.wait(10), "nothing was sent"
            server.step(STEP)  # the database host's clock steps forward mid-send
            action = settle(reach.stub, reply.task.actions[0].action_id, 40)
    return action, receiver


def test_a_database_clock_step_does_not_throw_a_receipt_away(
    tmp_path: Path, stepped: SteppedPostgres
) -> None:
    action, receiver = _run(tmp_path, stepped, dedupe=False)
    print(f"{receiver.total()} POST(s)\n{describe(action)}")
    assert receiver.total() == 1
    assert state_name(action) == "succeeded", (
        f"the receiver confirmed the only send (200), yet\n{describe(action)}"
    )


def test_a_database_clock_step_does_not_send_twice_at_once(
    tmp_path: Path, stepped: SteppedPostgres
) -> None:
    action, receiver = _run(tmp_path, stepped, dedupe=True)
    spans = sorted(receiver.spans)
    overlaps = [(s, t) for (s, e), (t, _) in zip(spans, spans[1:], strict=False) if t < e]
    print(f"{len(spans)} POST(s); overlapping pairs: {len(overlaps)}\n{describe(action)}")
    assert not overlaps, f"a second send started while the first was in flight: {spans}"

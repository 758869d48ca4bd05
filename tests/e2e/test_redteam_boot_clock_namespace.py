"""Red team: on SQLite the lease clock is "/proc/uptime, which no process can fake or
step" (docs/AT_MOST_ONCE.md §3, ``reachstore_server/storage/clock.py``). A Linux time namespace
does exactly that: ``unshare --time --boottime <offset>`` (unprivileged inside a user
namespace; it is also how CRIU restores a migrated container, and what LXC's lxcfs does to
``/proc/uptime``) gives a process a boot clock of its own, while its wall clock stays
right, so libfaketime's ``FAKETIME_DONT_FAKE_MONOTONIC`` skew is not needed at all.

Worker B runs in a time namespace whose boot clock is 120 s off; worker A runs normally.
Both read "the database's clock" as the agreed offset plus their own ``/proc/uptime``, so
they disagree by 120 s, far more than the 30 s lease: A sees every lease B takes as long
expired and takes B's sends over while they are in flight.

- On a channel that may not re-send, A marks B's in-flight action ``unknown /
  worker_lost_mid_send``; the receiver answers B 200 a moment later, and that answer is
  refused by the lease fence: a confirmed action goes to review (the checker's
  ``receipt_thrown_away``).
- On a channel whose receiver de-duplicates, A re-sends while B's request is still in
  flight (the checker's ``concurrent_sends``).

The fault checker's only clock fault is libfaketime with the monotonic and boot clocks
left alone, which is exactly the clock this design already ignores.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from tests.e2e.redteam import describe, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import ReachProcess, state_name
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

BOOT_OFFSET_S = -120
ANSWER_AFTER_S = 6.0  # the receiver's work: well inside the read timeout (8 s)


class TimeNamespaced(ReachProcess):
    """A reach process in a time namespace of its own (``unshare --time``), its boot clock
    ``offset_s`` off; wall clock and everything else as usual. unshare execs the program,
    so the process is reach itself (signals reach it directly)."""

    def __init__(self, *args: Any, offset_s: int) -> None:
        super().__init__(*args)
        self.offset_s = offset_s

    def command(self) -> list[str]:
        return ["unshare", "--time", "--boottime", str(self.offset_s), "--", *super().command()]


class Working(HttpReceiver):
    """Records each POST when it arrives (``arrived``), works ``ANSWER_AFTER_S``, then
    answers as the base receiver does (an effect, 200)."""

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


def _time_namespaces() -> bool:
    try:
        done = subprocess.run(
            ["unshare", "--time", "--boottime", "1", "--", "true"], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _run(tmp_path: Path, dedupe: bool) -> tuple[pb.Action, Working]:
    if not _time_namespaces():
        pytest.skip("this machine does not let us make a time namespace (unshare --time)")
    database_url = f"sqlite:///{tmp_path / 'reach.db'}"
    receiver = Working(dedupe=dedupe)
    with receiver:
        extra = "receiver_deduplicates = true\n" if dedupe else ""
        config = write_config(
            tmp_path / "reach.toml", webhook_channel("orders", receiver.url, extra=extra)
        )
        b = TimeNamespaced(tmp_path, database_url, config, "worker-b", offset_s=BOOT_OFFSET_S)
        a = ReachProcess(tmp_path, database_url, config, "worker-a")
        try:
            b.start()
            reply = submit(b.stub, "orders", {"charge": "order-1"})
            assert receiver.arrived.wait(10), "worker B did not send"
            a.start()  # the second worker of the deployment comes up
            action = settle(a.stub, reply.task.actions[0].action_id, 40)
        finally:
            a.stop()
            b.stop()
    return action, receiver


def test_a_worker_with_another_boot_clock_does_not_throw_a_receipt_away(tmp_path: Path) -> None:
    action, receiver = _run(tmp_path, dedupe=False)
    print(f"{receiver.total()} POST(s), {receiver.effects_total()} effect(s)\n{describe(action)}")
    assert receiver.total() == 1  # not re-sent: at most once holds
    assert state_name(action) == "succeeded", (
        f"the receiver confirmed the only send (200), yet\n{describe(action)}"
    )


def test_a_worker_with_another_boot_clock_does_not_send_concurrently(tmp_path: Path) -> None:
    action, receiver = _run(tmp_path, dedupe=True)
    spans = sorted(receiver.spans)
    overlaps = [(s, t) for (s, e), (t, _) in zip(spans, spans[1:], strict=False) if t < e]
    print(f"{len(spans)} POST(s); overlapping pairs: {len(overlaps)}\n{describe(action)}")
    assert not overlaps, f"a second send started while the first was in flight: {spans}"

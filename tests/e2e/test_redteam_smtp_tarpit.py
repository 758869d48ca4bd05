"""Red team: a slow SMTP relay (a tarpit, which anti-spam relays really are: they answer a
line at a time, slower and slower) wedges the whole reach process. Every channel stops:
no task can be submitted, nothing is sent or recorded, for as long as the relay likes.

The e-mail channel runs smtplib in ``asyncio.to_thread`` and its docstring accepts that "a
cancelled submit cannot stop its worker thread, which ends on its own at the latest one
timeout later". That is not so: ``timeout_s`` bounds each socket read, and a relay that
sends a line of its (multi-line) greeting every half second never lets one time out, so
the thread never ends. The executor gives up waiting at ``send_timeout_s``, but the thread
stays, and it is one of the few threads of the event loop's default executor (``min(32,
cores + 4)``), which the store uses too: every claim, every settle, every reservation is a
``to_thread`` call. A few dozen e-mail actions to such a relay take every thread; after
that a webhook action to a healthy receiver is never reserved, sent or recorded, actions
in flight on other channels lose their leases (their receipts are thrown away), and the
process still looks alive. Every reach worker that claims one of those e-mail actions is
wedged in turn.

The fault checker has no e-mail channel, and no receiver of it is slow per line.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import grpc
import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import PG_MARKED, action_spec, state_name
from tests.reach.peers import LOCALHOST, HttpReceiver

pytestmark = pytest.mark.e2e

MAIL_ACTIONS = 45  # more than any default executor has threads (32 at most)


class Tarpit:
    """Accepts SMTP connections and sends one line of a multi-line 220 greeting every
    ``gap_s`` until stopped: each read gets its line well within any timeout."""

    def __init__(self, gap_s: float = 0.5) -> None:
        self._gap = gap_s
        self._listener = socket.create_server((LOCALHOST, 0), backlog=128)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self.connections = 0
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Tarpit:
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(5)

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            thread = threading.Thread(target=self._greet, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _greet(self, conn: socket.socket) -> None:
        with contextlib.closing(conn):
            while not self._stop.wait(self._gap):
                try:
                    conn.sendall(b"220-relay.test busy, please wait\r\n")
                except OSError:
                    return


@pytest.mark.parametrize("database_url", PG_MARKED[:1], indirect=True)
def test_a_slow_smtp_relay_does_not_stop_the_other_channels(
    tmp_path: Path, database_url: str
) -> None:
    with Tarpit() as tarpit, HttpReceiver() as receiver:
        config = write_config(
            tmp_path / "reach.toml",
            f"""
[channels.mail]
kind = "email"
description = "e-mail through the company relay"
action_types = ["notify"]

[channels.mail.email]
host = "{LOCALHOST}"
port = {tarpit.port}
sender = "shop@example.com"
timeout_s = 2
send_timeout_s = 4
""",
            webhook_channel("orders", receiver.url),
        )
        with reach_process(tmp_path, database_url, config) as reach:
            mails = [
                action_spec(
                    f"m{i}", "mail", {"to": "a@example.com", "subject": f"n{i}", "body": "hi"}
                )
                for i in range(MAIL_ACTIONS)
            ]
            reach.stub.SubmitTask(
                pb.SubmitTaskRequest(entity_id="customer-1", actions=mails), timeout=15
            )
            # Until every e-mail action has had its session, or none started for longer
            # than a send may take (no thread is left to start one).
            deadline, seen, quiet_since = time.monotonic() + 60, 0, time.monotonic()
            while tarpit.connections < MAIL_ACTIONS and time.monotonic() < deadline:
                if tarpit.connections != seen:
                    seen, quiet_since = tarpit.connections, time.monotonic()
                elif time.monotonic() - quiet_since > 8:
                    break
                time.sleep(0.5)
            # Now an unrelated action to a healthy webhook receiver.
            started = time.monotonic()
            try:
                reply = submit(reach.stub, "orders", {"charge": "order-1"})
            except grpc.RpcError as exc:
                pytest.fail(
                    f"after {tarpit.connections} e-mail sessions to a slow relay, SubmitTask "
                    f"of a webhook action got {exc.code().name} after "
                    f"{time.monotonic() - started:.0f} s: the process is wedged"
                )
            action = settle(reach.stub, reply.task.actions[0].action_id, 20)
        delivered = receiver.total()

    print(f"{tarpit.connections} tarpit sessions; webhook {state_name(action)}")
    assert state_name(action) == "succeeded" and delivered == 1, describe(action)

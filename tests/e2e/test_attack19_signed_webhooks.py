"""Attacks on signed webhooks end to end: a real reach process on a real database, a
receiver verifying every delivery with ``standardwebhooks``, and what a caller and an
operator can read afterwards (GetAction, the service's log) searched for secrets."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import state_name
from tests.reach.peers import HttpReceiver, VerifyingReceiver

pytestmark = pytest.mark.e2e

SECRET = "whsec_" + base64.b64encode(b"e2e attack: a 32 byte secret...").decode()
SIGNED = 'signing_secret_env = "E2E_SIGNING"\ntoken_env = "E2E_TOKEN"\n'


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_bearer_token_ending_in_a_newline_stops_reach_at_start_without_showing_it(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token comes from a file with its trailing newline. Such a header cannot be sent,
    so every action would fail, with the HTTP library's message (which quotes the header)
    stored where callers read it. Reach refuses the value when it starts instead: it exits
    with a message naming the setting and its variable, and the token is nowhere in what
    it printed; the receiver hears nothing."""
    token = "tok-" + secrets.token_hex(16)
    env = {
        **os.environ,
        "E2E_SIGNING": SECRET,
        "E2E_TOKEN": token + "\n",
        "REACHSTORE_DATABASE_URL": database_url,
        "REACHSTORE_LISTEN": "127.0.0.1:0",
        "REACHSTORE_PII_SECRET": "e2e-pii-secret-that-is-long-enough",
        "REACHSTORE_DATA_DIR": str(tmp_path / "data"),
    }
    with VerifyingReceiver(SECRET) as hooks:
        config = write_config(
            tmp_path / "reach.toml", webhook_channel("signed", hooks.url, webhook_extra=SIGNED)
        )
        env["REACHSTORE_REACH_CONFIG"] = str(config)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "reachstore_server.cli",
                "migrate",
                "--database-url",
                database_url,
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=60,
        )
        done = subprocess.run(
            [sys.executable, "-m", "reachstore_server.cli", "serve", "reach"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    printed = done.stdout + done.stderr
    assert done.returncode != 0, printed
    assert "channels.signed.webhook.token_env" in printed and "E2E_TOKEN" in printed, printed
    assert "Traceback" not in printed, printed
    assert token not in printed
    assert hooks.records == [] and hooks.refused == []


class _AlertKeys(HttpReceiver):
    """An alert receiver that keeps each delivery's ``Idempotency-Key`` and answers 200."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []

    def _deliver(self, handler: Any, body: bytes) -> None:
        with self._lock:
            self.keys.append(handler.headers.get("Idempotency-Key", ""))
        handler.answer(200, {"ok": True})


def test_alerts_from_two_databases_never_share_a_webhook_id(tmp_path: Path) -> None:
    """An alert's key (its ``webhook-id`` when signed) is what a receiver de-duplicates by.
    Two deployments, or one whose database was made anew, number their alerts from 1 again:
    if the key were the row's number, the second deployment's first alert would be taken
    for a repeat of the first's, and dropped, by the very receiver that must hear of it."""
    keys: list[str] = []
    with HttpReceiver(default="drop_after_effect") as orders, _AlertKeys() as alerts:
        for n in (1, 2):
            workdir = tmp_path / f"deployment-{n}"
            workdir.mkdir()
            config = write_config(
                workdir / "reach.toml",
                webhook_channel(
                    "orders", orders.url, extra="[channels.orders.unknown]\nbase_s = 0.2\n"
                ),
                webhook_channel("alerts", alerts.url),
                engine='alert_channel = "alerts"',
            )
            database = f"sqlite:///{workdir / 'reachstore.db'}"
            with reach_process(workdir, database, config) as reach:
                reply = submit(reach.stub, "orders", {"charge": f"order-{n}"})
                action = settle(reach.stub, reply.task.actions[0].action_id, 20)
                assert state_name(action) == "needs_review", describe(action)
                deadline = time.monotonic() + 25
                while len(alerts.keys) < n and time.monotonic() < deadline:
                    time.sleep(0.2)
            keys = list(alerts.keys)
            assert len(keys) == n, keys

    assert keys[0] != keys[1], keys

"""Attacks on signed webhooks end to end: a real reach process on a real database, a
receiver verifying every delivery with ``standardwebhooks``, and what a caller and an
operator can read afterwards (GetAction, the service's log) searched for secrets."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import pytest

from tests.e2e.redteam import describe, reach_process, settle, submit, webhook_channel, write_config
from tests.e2e.test_reach_crash import state_name
from tests.reach.peers import VerifyingReceiver

pytestmark = pytest.mark.e2e

SECRET = "whsec_" + base64.b64encode(b"e2e attack: a 32 byte secret...").decode()
SIGNED = 'signing_secret_env = "E2E_SIGNING"\ntoken_env = "E2E_TOKEN"\n'


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_bearer_token_ending_in_a_newline_is_not_handed_to_callers(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token comes from a file with its trailing newline. Nothing is sent (the header
    is illegal), and the failure is reported: its message must not quote the token to
    whoever may read the action."""
    token = "tok-" + secrets.token_hex(16)
    monkeypatch.setenv("E2E_SIGNING", SECRET)
    monkeypatch.setenv("E2E_TOKEN", token + "\n")
    with VerifyingReceiver(SECRET) as hooks:
        config = write_config(
            tmp_path / "reach.toml", webhook_channel("signed", hooks.url, webhook_extra=SIGNED)
        )
        with reach_process(tmp_path, database_url, config) as reach:
            reply = submit(reach.stub, "signed", {"order": "o-1"})
            action = settle(reach.stub, reply.task.actions[0].action_id, timeout=30)
            log = reach.log_path.read_text(errors="replace")

    assert hooks.records == [] and hooks.refused == []  # nothing reached the receiver
    assert state_name(action) not in ("succeeded", "ready", "submitting"), describe(action)
    assert token not in str(action), str(action)
    assert token not in log

"""`reachstore keys ... --json`: one JSON document per command, for scripts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e


def _keys(data_dir: Path, *args: str) -> Any:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reachstore_server.cli",
            "keys",
            *args,
            "--data-dir",
            str(data_dir),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_create_list_and_revoke_speak_json(tmp_path: Path) -> None:
    made = _keys(
        tmp_path,
        "create",
        "--scopes",
        "read,reach",
        "--channels",
        "hook-*",
        "--groups",
        "ops",
        "--name",
        "agent",
    )
    key = made["key"]
    assert made["secret"].startswith(f"rsk_{key['key_id']}_")
    assert key["scopes"] == ["reach", "read"] and key["channels"] == ["hook-*"]
    assert key["groups"] == ["ops"] and key["revoked_at"] == ""
    listed = _keys(tmp_path, "list")["keys"]
    assert [k["key_id"] for k in listed] == [key["key_id"]]
    assert "secret" not in json.dumps(listed)
    revoked = _keys(tmp_path, "revoke", key["key_id"])["key"]
    assert revoked["revoked_at"] != ""

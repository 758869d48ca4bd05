"""What the attack tests share: keys made the way an operator makes them (the command
line), clients that present them, and the comparison that proves a refusal outside a
key's grants reads exactly like an answer about something that does not exist."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import grpc
import httpx

from tests.e2e.system import RunningSystem


def cli_key(system: RunningSystem, tenant: str, scopes: str, *extra: str) -> dict[str, Any]:
    """``reachstore keys create --json``: ``{"key": {...}, "secret": "rsk_..."}``. With
    ``scopes`` empty no ``--scopes`` is passed (``--service`` keys choose their own)."""
    args = ["--tenant", tenant, *(["--scopes", scopes] if scopes else []), *extra]
    done = cli(system, "keys", "create", *args, "--json")
    assert done.returncode == 0, done.stderr
    made: dict[str, Any] = json.loads(done.stdout)
    return made


def cli(system: RunningSystem, *args: str) -> subprocess.CompletedProcess[str]:
    """One `reachstore` command on the system's data folder (not checked)."""
    return subprocess.run(
        [sys.executable, "-m", "reachstore_server.cli", *args, "--data-dir", str(system.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def http_client(system: RunningSystem, key: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=system.http_url, timeout=30, headers=headers)


def audit_channel(system: RunningSystem) -> grpc.Channel:
    """The audit service of an `up` listens on the gRPC base port + 3."""
    return grpc.insecure_channel(f"127.0.0.1:{system.grpc_port_base + 3}")


def bearer(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]


def error_of(reply: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert reply.status_code == status, (
        f"expected {status} {code}, got {reply.status_code}: " + (reply.text[:400])
    )
    error: dict[str, Any] = reply.json()["error"]
    assert error["code"] == code, error
    return error


def without(error: dict[str, Any], *names: str) -> dict[str, Any]:
    """The error body with the per-request parts (request id, message, the named
    structured_data entries) taken out, for comparing two refusals."""
    kept = {k: v for k, v in error.items() if k not in ("request_id", "message")}
    kept["structured_data"] = {
        k: v for k, v in error.get("structured_data", {}).items() if k not in names
    }
    return kept


def same_refusal(hidden: httpx.Response, missing: httpx.Response, *names: str) -> None:
    """Outside its grants a thing must look exactly like a missing one: same status, same
    error code and body shape (identifiers aside)."""
    assert hidden.status_code == missing.status_code, (
        f"hidden answered {hidden.status_code}, missing {missing.status_code}: "
        f"{hidden.text[:300]} | {missing.text[:300]}"
    )
    assert without(hidden.json()["error"], *names) == without(missing.json()["error"], *names)

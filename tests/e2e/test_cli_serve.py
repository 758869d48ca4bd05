"""`reachstore serve COMPONENT`: one component in its own process, configured by an env
file and the environment."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from reachstore_server.audit.signing import write_key_pair
from tests.e2e.processes import ROOT
from tests.e2e.system import free_port_block

pytestmark = pytest.mark.e2e


def _migrate(env_file: Path) -> None:
    """The deployment's migrate step, from the same env file: a component refuses a
    database whose schema is not at head."""
    subprocess.run(
        [sys.executable, "-m", "reachstore_server.cli", "migrate", "--env-file", str(env_file)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )


def _serve(env_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reachstore_server.cli",
            "serve",
            "audit",
            "--env-file",
            str(env_file),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _signing_key(folder: Path) -> Path:
    """An audit signing key in a file, as a mounted secret would be."""
    path = folder / "secrets" / "audit_signing.pem"
    write_key_pair(path, folder / "secrets" / "audit_signing.pub")
    return path


def test_serve_runs_one_component_from_an_env_file(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port_block(1)}"
    env_file = tmp_path / "audit.env"
    env_file.write_text(
        "# one audit replica\n"
        f"REACHSTORE_LISTEN={address}\n"
        f"REACHSTORE_DATABASE_URL=sqlite:///{tmp_path / 'audit.db'}\n"
        f"REACHSTORE_AUDIT_SIGNING_KEY_FILE={_signing_key(tmp_path)}\n",
        encoding="utf-8",
    )
    _migrate(env_file)
    process = _serve(env_file)
    try:
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 30
            while True:
                try:
                    reply = health.Check(
                        health_pb2.HealthCheckRequest(service="reachstore.audit.v1.AuditService"),
                        timeout=1,
                        wait_for_ready=True,
                    )
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.RpcError:
                    pass
                assert process.poll() is None, "the audit service exited early"
                assert time.monotonic() < deadline, "the audit service did not become ready"
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
        assert process.returncode == 0, output
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("REACHSTORE_NOT_A_SETTING=1", "REACHSTORE_NOT_A_SETTING is not a reachstore setting"),
        ("just words", "expected KEY=VALUE"),
        ("REACHSTORE_AUDIT_CHECKPOINT_S=soon", "REACHSTORE_AUDIT_CHECKPOINT_S"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path, line: str, named: str) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text(
        line + f"\nREACHSTORE_AUDIT_SIGNING_KEY_FILE={_signing_key(tmp_path)}\n", encoding="utf-8"
    )
    process = _serve(env_file)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output
    assert named in output and "Traceback" not in output

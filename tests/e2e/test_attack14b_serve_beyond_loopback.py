"""A component run on its own must not serve the network in plain text either.

`up --require-keys --host 0.0.0.0` refuses to start without a certificate (keys would
cross the network in clear) unless told `--insecure` (docs/SECURITY.md, "TLS"), and
`up` refuses any non-loopback host without keys. `reachstore serve COMPONENT` is what a
scaled-out deployment runs instead of `up` (README, "Configuration"; the shipped
`deploy/k8s/reachstore.yaml` and `deploy/docker-compose.yml` run every component so,
on 0.0.0.0 with keys required). Run that way, on a wildcard address with keys required
and no certificate, each component must refuse to start the way `up` does, naming TLS,
instead of taking API keys in plain text from anyone on the network. And the
deployments the project ships must configure TLS for what they expose.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.e2e.system import free_port_block

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SECRET = "attack14b-serve-secret-0123456789"


def _answers_plain_text(component: str, port: int) -> bool:
    if component == "bridge":
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=2
            )
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("component", ["query", "ingest", "audit", "bridge"])
def test_serve_refuses_keys_in_plain_text_beyond_loopback(tmp_path: Path, component: str) -> None:
    base = free_port_block(5)
    env = {
        **os.environ,
        "REACHSTORE_DATA_DIR": str(tmp_path / "data"),
        "REACHSTORE_LISTEN": f"0.0.0.0:{base}",
        "REACHSTORE_REQUIRE_KEYS": "true",
        "REACHSTORE_PII_SECRET": SECRET,
        "REACHSTORE_AUDIT_KEY": SECRET,
        "REACHSTORE_QUERY_ADDR": f"127.0.0.1:{base + 1}",
        "REACHSTORE_INGEST_ADDR": f"127.0.0.1:{base + 2}",
        "REACHSTORE_REACH_ADDR": f"127.0.0.1:{base + 3}",
        "REACHSTORE_AUDIT_ADDR": f"127.0.0.1:{base + 4}",
    }
    for variable in [v for v in env if v.startswith("REACHSTORE_TLS_")]:
        del env[variable]
    (tmp_path / "data").mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "reachstore_server.cli", "serve", component],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    served = False
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and process.poll() is None:
            if _answers_plain_text(component, base):
                served = True
                break
            time.sleep(0.3)
    finally:
        if process.poll() is None:
            process.terminate()
        try:
            output, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
    assert not served, (
        f"`reachstore serve {component}` on 0.0.0.0 with keys required and no certificate "
        "answered plain text: API keys would cross the network in clear"
    )
    assert process.returncode == 2, output[-2000:]
    assert "TLS" in output, output[-2000:]


@pytest.mark.parametrize("manifest", ["deploy/k8s/reachstore.yaml", "deploy/docker-compose.yml"])
def test_the_shipped_deployments_serve_tls_beyond_loopback(manifest: str) -> None:
    text = (ROOT / manifest).read_text()
    assert "0.0.0.0" in text and "REACHSTORE_REQUIRE_KEYS" in text  # keys, every address
    for setting in ("REACHSTORE_TLS_CERT_FILE", "REACHSTORE_TLS_KEY_FILE"):
        assert setting in text, (
            f"{manifest} runs every component on 0.0.0.0 with API keys and without "
            f"{setting}: keys and data cross the network in plain text"
        )

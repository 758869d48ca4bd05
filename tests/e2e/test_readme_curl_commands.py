"""The README's partial-answer curl command and its variants, verbatim, against `reachstore up`
started with its default ports (8420 for HTTP), as a new user would run them."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.system import RunningSystem, wait_ports_free

# `reachstore up`'s default ports (50051-50060, 8420) lie in the kernel's ephemeral range,
# where another worker's outgoing connection can hold one for a moment: this file runs in
# the pass after the parallel one (docs/OPERATIONS.md, "Test suite").
pytestmark = pytest.mark.alone

QUESTION = "语义存储把什么放在离 Agent 更近的地方？"

STATUS_ONLY = f"""curl -sS -o /dev/null -w '%{{http_code}}\\n' -H 'Content-Type: application/json' \\
  -d '{{"namespaces": ["demo", "nope"], "query": "{QUESTION}", "top_k": 2}}' \\
  http://127.0.0.1:8420/api/v1/query"""

AGENT_FIELDS = f"""curl -sS -H 'Content-Type: application/json' \\
  -d '{{"namespaces": ["demo", "nope"], "query": "{QUESTION}", "top_k": 2}}' \\
  http://127.0.0.1:8420/api/v1/query \\
  | python3 -c 'import json,sys; d=json.load(sys.stdin); m=d["meta"]; f=m["namespaces_failed"][0]; print(m["coverage_ratio"], len(d["results"]), f["namespace"], f["retryable"], f["category"])'"""

ALL_MISSING = f"""curl -sS -w '\\n%{{http_code}}\\n' -H 'Content-Type: application/json' \\
  -d '{{"namespaces": ["nope", "nope-2"], "query": "{QUESTION}", "top_k": 2}}' \\
  http://127.0.0.1:8420/api/v1/query \\
  | python3 -c 'import json,sys; body,status=sys.stdin.read().strip().rsplit("\\n",1); d=json.loads(body); print(status, d["meta"]["coverage_ratio"], len(d["results"]))'"""

SINGULAR = f"""curl -sS -o /dev/null -w '%{{http_code}}\\n' -H 'Content-Type: application/json' \\
  -d '{{"namespace": "demo", "query": "{QUESTION}", "top_k": 2}}' \\
  http://127.0.0.1:8420/api/v1/query"""


@pytest.fixture(scope="module")
def default_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", 8420)) == 0:
            pytest.fail("port 8420 is taken: stop the local reachstore before running this test")
    wait_ports_free([*range(50051, 50061), 8420], seconds=60)
    system = RunningSystem(tmp_path_factory.mktemp("default"), grpc_port_base=50051, http_port=8420)
    system.start()
    yield system
    assert system.stop() == 0


def _run(command: str, cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=60, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_demo_plus_nope_is_200(default_system: RunningSystem, tmp_path: Path) -> None:
    assert _run(STATUS_ONLY, tmp_path) == "200"


def test_demo_plus_nope_prints_the_agent_fields(
    default_system: RunningSystem, tmp_path: Path
) -> None:
    assert _run(AGENT_FIELDS, tmp_path) == "0.5 1 nope False permanent"


def test_two_missing_namespaces_are_200_with_nothing(
    default_system: RunningSystem, tmp_path: Path
) -> None:
    assert _run(ALL_MISSING, tmp_path) == "200 0.0 0"


def test_the_singular_namespace_field_is_400(default_system: RunningSystem, tmp_path: Path) -> None:
    assert _run(SINGULAR, tmp_path) == "400"

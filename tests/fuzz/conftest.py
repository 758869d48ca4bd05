"""One real `reachstore up` with keys required, shared by every fuzz test.

The system runs with call-rate limits off (the fuzzers send far more than an agent would
and must reach the handlers, not the limiter), one reach channel whose receiver does not
exist (so submitted actions run the planning checks and then fail to send) and short
HTTP request deadlines, so slow clients are cut off within the test's time.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.system import RunningSystem

# Every scope there is: the fuzzers reach every route past authentication.
ALL_SCOPES = "read,write,admin,reach,operator,auditor,internal"
HOME = "fuzz-home-7c1f"
HEAD_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 4.0

REACH_CONFIG = """
[channels.fuzz-hook]
kind = "webhook"
description = "A receiver that is never there."
action_types = ["ping"]
idempotent = true
idempotency_params = ["ticket"]
parameters = { type = "object", properties = { ticket = { type = "string", maxLength = 64 } } }

[[channels.fuzz-hook.rules]]
expr = "!has(params.group) || params.group in caller.groups"
message = "the group must be one of the caller's groups"

[channels.fuzz-hook.webhook]
url = "http://127.0.0.1:9/hook"
"""


def make_key(data_dir: Path, tenant: str, scopes: str) -> str:
    """A key made the way an operator makes one: with the command line, on the store."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reachstore_server.cli",
            "keys",
            "create",
            "--data-dir",
            str(data_dir),
            "--tenant",
            tenant,
            "--scopes",
            scopes,
            "--groups",
            "ops",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1].rsplit(" ", 1)[-1]


@pytest.fixture(scope="session")
def fuzz_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    data_dir = tmp_path_factory.mktemp("fuzz")
    config = data_dir / "reach.toml"
    config.write_text(REACH_CONFIG)
    env = {
        "REACHSTORE_REQUIRE_KEYS": "true",
        "REACHSTORE_LIMIT_KEY_QUERY_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_QUERY_RATE": "0",
        "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
        "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
        "REACHSTORE_HTTP_HEAD_TIMEOUT_S": str(HEAD_TIMEOUT_S),
        "REACHSTORE_HTTP_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
    }
    system = RunningSystem(data_dir, env, extra_args=("--reach-config", str(config)))
    system.start()
    yield system
    assert system.stop() == 0, "".join(system.output[-40:])


@pytest.fixture(scope="session")
def fuzz_key(fuzz_system: RunningSystem) -> str:
    key = make_key(fuzz_system.data_dir, "fuzz", ALL_SCOPES)
    # A namespace of the tenant that the fuzzers never name (they may well delete `demo`):
    # the normal calls that show a service still serves ask for it.
    reply = httpx.post(
        f"{fuzz_system.http_url}/api/v1/namespaces",
        json={"name": HOME},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    return key


@pytest.fixture(scope="session")
def fuzz_http(fuzz_system: RunningSystem, fuzz_key: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {fuzz_key}"}
    with httpx.Client(base_url=fuzz_system.http_url, timeout=30.0, headers=headers) as client:
        yield client

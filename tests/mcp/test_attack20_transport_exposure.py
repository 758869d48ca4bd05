"""The HTTP transport exposed beyond its caller (these pass: they pin behaviour no other
test covers).

- ``--listen`` beyond loopback without keys required, or with keys but without TLS, must
  not start: the keyless caller, or keys in clear, would be open to the network.
- A page in the developer's browser (DNS rebinding: a Host that is not loopback; or a
  cross-site Origin) must be refused before any tool runs — the keyless local caller of a
  development system is otherwise one fetch away from every web page.
Neither needs a running system: both are refused before the services are called.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.e2e

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "page", "version": "1"},
    },
}


def _mcp(*extra: str) -> list[str]:
    # Services that are not there: nothing here may get as far as calling them.
    return [
        sys.executable,
        "-m",
        "reachstore_server.cli",
        "mcp",
        "--grpc-port-base",
        "1",
        "--transport",
        "http",
        *extra,
    ]


def _plain_env(**extra: str) -> dict[str, str]:
    dropped = ("REACHSTORE_INSECURE", "REACHSTORE_REQUIRE_KEYS", "REACHSTORE_TLS_CERT_FILE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**env, **extra}


@pytest.mark.parametrize(
    "extra_env", [{}, {"REACHSTORE_REQUIRE_KEYS": "true"}], ids=["keyless", "keys_no_tls"]
)
def test_listening_beyond_loopback_without_keys_and_tls_is_refused(
    extra_env: dict[str, str],
) -> None:
    done = subprocess.run(
        _mcp("--listen", "0.0.0.0:0"),
        env=_plain_env(**extra_env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "beyond loopback" in done.stderr
    assert "reachstore mcp: http" not in done.stderr


@pytest.fixture(scope="module")
def loopback_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log: Path = tmp_path_factory.mktemp("mcp-exposure") / "stderr.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            _mcp("--listen", "127.0.0.1:0"),
            env=_plain_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None:
            found = re.search(r"^reachstore mcp: (\S+)$", log.read_text(), re.MULTILINE)
            url = found.group(1) if found else None
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        address = httpx.URL(url)
        while True:
            try:
                socket.create_connection((address.host, address.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "attacker.example"}, 421),
        ({"Host": "attacker.example:8421"}, 421),
        ({"Host": "localhost.attacker.example:8421"}, 421),
        ({"Origin": "http://attacker.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Origin": "http://localhost.attacker.example"}, 403),
    ],
    ids=["host", "host_port", "host_prefix", "origin", "origin_null", "origin_prefix"],
)
def test_a_web_page_is_refused_before_any_tool_runs(
    loopback_url: str, headers: dict[str, str], status: int
) -> None:
    response = httpx.post(
        loopback_url,
        json=INITIALIZE,
        headers={"Accept": "application/json, text/event-stream", **headers},
        timeout=30,
    )
    assert response.status_code == status, response.text


def test_a_form_post_from_a_page_is_refused_for_its_content_type(loopback_url: str) -> None:
    """A ``text/plain`` POST needs no CORS preflight: it must not reach the handlers."""
    response = httpx.post(
        loopback_url,
        content=httpx.Request("POST", loopback_url, json=INITIALIZE).content,
        headers={"Accept": "application/json, text/event-stream", "Content-Type": "text/plain"},
        timeout=30,
    )
    assert response.status_code in (400, 415), response.text

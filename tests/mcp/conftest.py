"""MCP fixtures: one real `reachstore up --require-keys` per module, with reach channels
pointing at a real webhook receiver and a namespace slowed by the fault setting, keys made
with the command line, and `reachstore mcp --transport http` beside it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from reachstore import Client as Sdk
from tests.e2e.system import RunningSystem
from tests.e2e.test_auth import make_key
from tests.mcp.mcp_support import mcp_command, start_system
from tests.reach.peers import HttpReceiver


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpReceiver]:
    peer = HttpReceiver().start()
    try:
        yield peer
    finally:
        peer.stop()


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory, receiver: HttpReceiver
) -> Iterator[RunningSystem]:
    running = start_system(tmp_path_factory.mktemp("mcp"), receiver)
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def keys(system: RunningSystem) -> dict[str, str]:
    return {
        "agent": make_key(system, "acme", "read,write,reach"),
        "hook_only": make_key(system, "acme", "read,reach", "--channels", "hook"),
        "reader": make_key(system, "acme", "read"),
        "expired": make_key(system, "acme", "read,reach", "--ttl-seconds", "1"),
    }


@pytest.fixture(scope="module")
def corpus(system: RunningSystem, keys: dict[str, str]) -> None:
    """Two namespaces of the agent's tenant: `fast`, and `slow` (the injected fault)."""
    with Sdk.local("127.0.0.1", system.grpc_port_base, api_key=keys["agent"]) as sdk:
        for name, text in (("fast", "Rivers flow into the sea."), ("slow", "Rivers feed lakes.")):
            sdk.create_namespace(name)
            task = sdk.add_document(name, text, document_id=name)
            assert sdk.wait_for_task(task).state == "completed"


@pytest.fixture(scope="module")
def mcp_url(system: RunningSystem, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`reachstore mcp --transport http` on a free port; its URL from its stderr."""
    log = tmp_path_factory.mktemp("mcp-http") / "stderr.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [*mcp_command(system), "--transport", "http", "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={k: v for k, v in os.environ.items() if k != "REACHSTORE_API_KEY"},
        )
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            found = re.search(r"^reachstore mcp: (\S+)$", log.read_text(), re.MULTILINE)
            url = found.group(1) if found else None
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            if url is None:
                time.sleep(0.05)
        _wait_listening(url)
        yield url
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0, log.read_text()


def _wait_listening(url: str) -> None:
    """Until the port takes connections (an HTTP GET would open an event stream)."""
    address = httpx.URL(url)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection((address.host, address.port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)

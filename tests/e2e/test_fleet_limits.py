"""A key's call rate holds for the whole deployment: two bridges in front of two query
processes on PostgreSQL (``reachstore up --query-processes 2``, whose bridge spreads its
calls over both, and a second bridge of its own), one key limited to 10 calls/s. Counted
per process, the key would get about twice its rate; shared in the database
(``reachstore_server/storage/rate_buckets.py``), about its rate."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.processes import ServiceProcess
from tests.e2e.system import RunningSystem
from tests.e2e.test_auth import make_key

pytestmark = pytest.mark.e2e

RATE, BURST, SECONDS = 10, 10, 4.0


@pytest.fixture
def two_by_two(
    tmp_path: Path, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RunningSystem, str]]:
    monkeypatch.setenv("REACHSTORE_DATABASE_URL", pg_database)  # `up` and `keys create`
    limits = {
        "REACHSTORE_REQUIRE_KEYS": "true",
        "REACHSTORE_LIMIT_KEY_QUERY_RATE": str(RATE),
        "REACHSTORE_LIMIT_KEY_QUERY_BURST": str(BURST),
    }
    system = RunningSystem(tmp_path / "data", limits, extra_args=("--query-processes", "2"))
    system.start()
    port = ServiceProcess.free_port()
    second = subprocess.Popen(
        [sys.executable, "-m", "reachstore_server.cli", "serve", "bridge"],
        env={
            **os.environ,
            **limits,
            "REACHSTORE_LISTEN": f"127.0.0.1:{port}",
            "REACHSTORE_QUERY_ADDR": system.query_addr,
            "REACHSTORE_INGEST_ADDR": system.ingest_addr,
            "REACHSTORE_REACH_ADDR": system.reach_addr,
            "REACHSTORE_AUDIT_ADDR": f"127.0.0.1:{system.grpc_port_base + 3}",
        },
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and second.poll() is None, "second bridge"
            time.sleep(0.3)
        yield system, url
    finally:
        second.terminate()
        second.wait(timeout=30)
        assert system.stop() == 0


def test_a_key_gets_its_rate_through_two_bridges_and_two_query_processes(
    two_by_two: tuple[RunningSystem, str],
) -> None:
    system, second_url = two_by_two
    key = make_key(system, "fleet", "read")
    statuses: list[int] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + SECONDS

    def hammer(url: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            while time.monotonic() < stop_at:
                reply = http.post("/api/v1/query", json={"namespaces": ["x"], "query": "y"})
                with lock:
                    statuses.append(reply.status_code)

    threads = [
        threading.Thread(target=hammer, args=(url,))
        for url in (system.http_url, second_url)
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    admitted, refused = statuses.count(200), statuses.count(429)
    assert admitted + refused == len(statuses), sorted(set(statuses))
    ceiling = BURST + RATE * SECONDS  # 50: one process's share, and now the fleet's
    assert refused > 0
    assert 0.7 * ceiling <= admitted <= ceiling + 2, (admitted, refused)

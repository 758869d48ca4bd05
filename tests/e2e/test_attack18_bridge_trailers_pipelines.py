"""What a REST caller sends besides bodies must not pile up in the bridge either
(reachstore_server/bridge/slow_clients.py).

- Trailer fields after a chunked body: uvicorn added every one to the request's headers,
  and 8 callers sending them without end for 15 s grew a bridge from 70 MiB to 2,437 MiB.
- Requests pipelined ahead of answers never read: uvicorn parsed and queued every one, and
  20 callers that sent 1 MiB of ``GET /healthz`` each held 60 MiB per connection, for good.

Each caller here runs for 6 s against a real bridge, while the bridge's RSS is sampled;
the connections must be closed by the bridge, and its memory stay within tens of MiB.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.system import RunningSystem
from tests.e2e.test_attack18_large_bodies import _rss_mib, _sample_rss

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

CALLERS = 8
SECONDS = 6.0
GROWTH_MIB = 64


def _trailers(host: str, port: int, stop: threading.Event, ends: list[str]) -> None:
    head = (
        f"POST /api/v1/namespaces HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    block = b"x-t: a\r\n" * 8192  # 64 KiB of trailer fields at a time
    with socket.create_connection((host, port), timeout=10) as sock:
        try:
            sock.sendall(head + b'11\r\n{"name": "trail"}\r\n0\r\n')
            while not stop.is_set():
                sock.sendall(block)
            ends.append("still open")
        except OSError:
            ends.append("closed by the bridge")


def _pipelined(host: str, port: int, stop: threading.Event, ends: list[str]) -> None:
    requests = f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode() * 25_000
    with socket.create_connection((host, port), timeout=10) as sock:
        try:
            sock.sendall(requests)  # 1 MiB ahead, no answer read
            sock.settimeout(SECONDS)
            stop.wait(SECONDS)
            # Closed by the bridge: reading drains what it answered, then ends.
            while sock.recv(65_536):
                pass
            ends.append("closed by the bridge")
        except TimeoutError:
            ends.append("still open")
        except OSError:
            ends.append("closed by the bridge")


@pytest.mark.parametrize("caller", [_trailers, _pipelined], ids=["trailers", "pipelined"])
def test_a_caller_cannot_make_the_bridge_hold_what_it_sends(tmp_path: Path, caller) -> None:
    system = RunningSystem(tmp_path)
    system.start()
    try:
        pid = system.pid("bridge")
        url = httpx.URL(system.http_url)
        assert url.port is not None
        before = _rss_mib(pid)
        stop = threading.Event()
        peak = [before]
        sampler = threading.Thread(target=_sample_rss, args=(pid, stop, peak))
        sampler.start()
        ends: list[str] = []
        threads = [
            threading.Thread(target=caller, args=(url.host, url.port, stop, ends))
            for _ in range(CALLERS)
        ]
        try:
            for thread in threads:
                thread.start()
            time.sleep(SECONDS)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=SECONDS + 20)
            sampler.join()
        time.sleep(1.0)
        after = _rss_mib(pid)
        seen = f"bridge RSS {before:.0f} MiB, peak {peak[0]:.0f}, {after:.0f} after; {ends}"
        print(seen)
        assert ends == ["closed by the bridge"] * CALLERS, seen
        assert peak[0] - before <= GROWTH_MIB, seen
        with httpx.Client(base_url=system.http_url, timeout=10) as http:
            assert http.get("/api/v1/namespaces").status_code == 200
    finally:
        system.stop()

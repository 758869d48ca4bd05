"""Large REST bodies sent all but their last bytes, then held, must not sit in the bridge's
memory beyond a bound (reachstore_server/bridge/body_budget.py, docs/OPERATIONS.md "Load
shedding").

The bridge reads a body into memory as it comes, and a body has 60 s to arrive
(``REACHSTORE_HTTP_BODY_TIMEOUT_S``) on each of up to 2,000 connections: at 20 MiB a
body, a few callers could make it hold gigabytes. Here 64 connections each send the head of
a ``documents:batchCreate`` with a 19 MB body, and 18 MB of it, then hold the connection
for 8 s, while a third caller creates a namespace (a small body) and lists namespaces,
every 100 ms. The bridge's memory may grow by what its body budget allows, not by what the
callers sent; the small calls are answered at once: before the budget, the bridge grew from
70 MiB to 1,173 MiB; with it, it peaked at 316 MiB, and every small call was answered 200
within 0.3 s.
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

CALLERS = 64
DECLARED, SENT = 19_000_000, 18_000_000
HOLD_S = 8.0
# The body budget (256 MiB) and what the allocator and the parser hold beside it.
GROWTH_MIB = 256 * 1.5
# A small call's own time, on a machine busy with the large bodies.
SMALL_CALL_S = 1.5


def _stall(host: str, port: int, answers: list[str]) -> None:
    head = (
        "POST /api/v1/namespaces/big/documents:batchCreate HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {DECLARED}\r\n\r\n"
    ).encode()
    body = b'{"documents": [{"document_id": "d", "text": "' + b"a" * (SENT - 50)
    with socket.create_connection((host, port), timeout=HOLD_S + 20) as sock:
        try:
            sock.sendall(head + body)
        except OSError:  # refused before it had all been sent: the bridge closed it
            pass
        sock.settimeout(HOLD_S)
        try:
            answer = sock.recv(64)
        except TimeoutError:
            answer = b"held"
        except OSError:
            answer = b"closed"
        answers.append(answer.split(b"\r\n")[0].decode(errors="replace"))


def _small_calls(url: str, stop: threading.Event, ended: list[tuple[int, float]]) -> None:
    with httpx.Client(base_url=url, timeout=30) as http:
        while not stop.is_set():
            started = time.time()
            # A small body takes no room in the budget; a request without one neither.
            status = http.post("/api/v1/namespaces", json={"name": "policy"}).status_code
            ended.append((status, time.time() - started))
            started = time.time()
            status = http.get("/api/v1/namespaces").status_code
            ended.append((status, time.time() - started))
            stop.wait(0.1)


def test_stalled_large_bodies_are_held_within_a_budget(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path)
    system.start()
    try:
        pid = system.pid("bridge")
        before = _rss_mib(pid)
        host, port = httpx.URL(system.http_url).host, httpx.URL(system.http_url).port
        assert port is not None
        stop = threading.Event()
        small: list[tuple[int, float]] = []
        peak = [before]
        watchers = [
            threading.Thread(target=_small_calls, args=(system.http_url, stop, small)),
            threading.Thread(target=_sample_rss, args=(pid, stop, peak)),
        ]
        for watcher in watchers:
            watcher.start()
        answers: list[str] = []
        callers = [
            threading.Thread(target=_stall, args=(host, port, answers)) for _ in range(CALLERS)
        ]
        try:
            for caller in callers:
                caller.start()
            for caller in callers:
                caller.join(timeout=HOLD_S + 60)
        finally:
            stop.set()
            for watcher in watchers:
                watcher.join()
        statuses = sorted({status for status, _ in small})
        seen = (
            f"bridge RSS {before:.0f} MiB before, peak {peak[0]:.0f}; callers' answers "
            f"{sorted(set(answers))}; {len(small)} small calls ended {statuses}, slowest "
            f"{max(took for _, took in small):.2f} s"
        )
        print(seen)
        assert len(answers) == CALLERS, seen
        assert peak[0] - before <= GROWTH_MIB, seen
        # Created, then found created (409), and listed: none waits for the large bodies.
        assert set(statuses) <= {200, 409}, seen
        assert max(took for _, took in small) <= SMALL_CALL_S, seen
    finally:
        system.stop()


def test_heads_that_declare_large_bodies_and_send_none_hold_no_room(tmp_path: Path) -> None:
    """13 heads declaring 20 MB bodies each, and not a byte of them: room reserved from the
    declared lengths was the whole budget, and every real upload was refused (503) while
    they waited, at no cost to their sender."""
    system = RunningSystem(tmp_path)
    system.start()
    url = httpx.URL(system.http_url)
    assert url.port is not None
    head = (
        "POST /api/v1/namespaces/big/documents:batchCreate HTTP/1.1\r\n"
        f"Host: {url.host}:{url.port}\r\nContent-Type: application/json\r\n"
        "Content-Length: 20648000\r\n\r\n"
    ).encode()
    idle = [socket.create_connection((url.host, url.port), timeout=30) for _ in range(13)]
    try:
        for sock in idle:
            sock.sendall(head)
        time.sleep(0.5)
        documents = [{"document_id": f"d{i}", "text": "x" * 10_000} for i in range(100)]
        with httpx.Client(base_url=system.http_url, timeout=60) as http:
            assert http.post("/api/v1/namespaces", json={"name": "big"}).status_code == 200
            reply = http.post(
                "/api/v1/namespaces/big/documents:batchCreate", json={"documents": documents}
            )
        assert reply.status_code == 200, reply.text
    finally:
        for sock in idle:
            sock.close()
        system.stop()

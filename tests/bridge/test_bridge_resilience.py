"""The bridge when things go wrong behind it, how fast it answers, and its entry point."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from grpc_health.v1 import health_pb2

from reachstore_server.bridge.backends import QUERY_SERVICE

if TYPE_CHECKING:
    from conftest import Backend, BridgeServer, LoopThread

QUERY = "reachstore.query.v1.QueryService"
INGEST = "reachstore.ingest.v1.IngestService"
REPO = Path(__file__).resolve().parents[2]


def _error(response: httpx.Response) -> dict[str, Any]:
    error = response.json()["error"]
    assert error["request_id"] == response.headers["x-request-id"]
    return error


def test_backend_down_gives_503_with_retry_after(
    loop: LoopThread, private_backend: Backend, start_bridge: Any
) -> None:
    bridge = start_bridge(private_backend.settings(), deadline_s=5.0)
    body = {"namespaces": ["demo"], "query": "q"}
    with httpx.Client(base_url=bridge.url, timeout=10) as http:
        assert http.post("/api/v1/query", json=body).status_code == 200
        loop.run(private_backend.server.stop(None))
        started = time.monotonic()
        response = http.post("/api/v1/query", json=body)
        elapsed = time.monotonic() - started
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    error = _error(response)
    assert (error["code"], error["category"], error["retryable"], error["retry_after_ms"]) == (
        "SERVICE_UNAVAILABLE",
        "transient",
        True,
        1000,
    )
    assert error["structured_data"] == {"service": QUERY, "grpc_code": "UNAVAILABLE"}
    assert elapsed < 5.0  # refused at once, not after the deadline


def test_readyz_is_503_naming_services_when_backend_is_stopped(
    loop: LoopThread, private_backend: Backend, start_bridge: Any
) -> None:
    bridge = start_bridge(private_backend.settings(), readiness_timeout_s=1.0)
    assert httpx.get(bridge.url + "/readyz", timeout=10).status_code == 200
    loop.run(private_backend.server.stop(None))
    response = httpx.get(bridge.url + "/readyz", timeout=10)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    error = _error(response)
    assert error["code"] == "SERVICE_UNAVAILABLE"
    assert error["structured_data"] == {
        "services": {QUERY: "unreachable", INGEST: "unreachable"},
        "down": [QUERY, INGEST],
    }
    assert QUERY in error["message"] and INGEST in error["message"]
    # The bridge process itself is still up.
    assert httpx.get(bridge.url + "/healthz", timeout=10).status_code == 200


def test_readyz_names_the_one_service_not_serving(
    loop: LoopThread, private_backend: Backend, start_bridge: Any
) -> None:
    bridge = start_bridge(private_backend.settings())
    loop.run(private_backend.health.set(INGEST, health_pb2.HealthCheckResponse.NOT_SERVING))
    response = httpx.get(bridge.url + "/readyz", timeout=10)
    assert response.status_code == 503
    error = _error(response)
    assert error["structured_data"]["down"] == [INGEST]
    assert error["structured_data"]["services"] == {QUERY: "serving", INGEST: "not_serving"}


def test_deadline_gives_504_with_retry_after(backend: Backend, start_bridge: Any) -> None:
    bridge = start_bridge(backend.settings(), deadline_s=0.3)
    started = time.monotonic()
    response = httpx.post(bridge.url + "/api/v1/query", json={"query": "hang"}, timeout=10)
    elapsed = time.monotonic() - started
    assert response.status_code == 504
    assert response.headers["retry-after"] == "1"
    error = _error(response)
    assert (error["code"], error["category"]) == ("DEADLINE_EXCEEDED", "timeout")
    assert elapsed < 5.0


def test_services_left_out_of_the_bridge_have_no_routes(
    backend: Backend, start_bridge: Any
) -> None:
    bridge = start_bridge(backend.settings(), services=[QUERY_SERVICE])
    response = httpx.get(bridge.url + "/api/v1/tasks/t-1", timeout=10)
    assert response.status_code == 404
    assert _error(response)["code"] == "ROUTE_NOT_FOUND"


def test_unexpected_bridge_failure_gives_internal_error_body(
    backend: Backend, start_bridge: Any, sample_file: Any
) -> None:
    # SampleService has a route but no configured address: a deployment mistake that
    # raises inside the handler. The caller still gets the error shape, not a 500 page.
    sample = sample_file.services_by_name["SampleService"]
    bridge = start_bridge(backend.settings(), services=[QUERY_SERVICE, sample])
    response = httpx.get(bridge.url + "/x/1/abc", timeout=10)
    assert response.status_code == 500
    assert "retry-after" not in response.headers
    error = _error(response)
    assert (error["code"], error["category"], error["retryable"]) == (
        "INTERNAL",
        "permanent",
        False,
    )
    assert error["structured_data"] == {"request_id": error["request_id"]}
    assert "Traceback" not in response.text and "LookupError" not in response.text


# --- latency --------------------------------------------------------------------------------


def _read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    found = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    assert found is not None
    length = int(found.group(1))
    while len(body) < length:
        body += sock.recv(65536)
    return head


@pytest.mark.alone  # a median in milliseconds: another worker's load moves it
def test_small_requests_take_about_a_millisecond_not_40(bridge: BridgeServer) -> None:
    host, port = bridge.url.removeprefix("http://").split(":")
    body = b'{"namespaces": ["demo"], "query": "q"}'
    request = (
        b"POST /api/v1/query HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        # One send per request from our side, so only the server's writes are measured.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        timings = []
        for _ in range(30):
            started = time.perf_counter()
            sock.sendall(request)
            head = _read_response(sock)
            timings.append(time.perf_counter() - started)
            assert head.startswith(b"HTTP/1.1 200")
    # A Nagle/delayed-ACK stall would put every request at >= 40 ms.
    assert statistics.median(timings) < 0.015, timings


# --- the entry point --------------------------------------------------------------------------


def _lines(stream: Any, into: queue.Queue[bytes]) -> None:
    for line in iter(stream.readline, b""):
        into.put(line)
    into.put(b"")


def test_main_logs_json_to_stderr_only_and_stops_cleanly_on_sigterm(backend: Backend) -> None:
    env = {
        **os.environ,
        "REACHSTORE_LISTEN": "127.0.0.1:0",
        "REACHSTORE_QUERY_ADDR": backend.address,
        "REACHSTORE_INGEST_ADDR": backend.address,
        "REACHSTORE_REACH_ADDR": backend.address,
        "REACHSTORE_AUDIT_ADDR": backend.address,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "reachstore_server.bridge.main"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines: queue.Queue[bytes] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(process.stderr, lines), daemon=True)
    reader.start()
    seen: list[bytes] = []
    try:
        port = None
        while port is None:
            line = lines.get(timeout=30)  # readiness: the bridge logs its bound address
            assert line, f"bridge exited early: {b''.join(seen)!r}"
            seen.append(line)
            found = re.search(rb"bridge listening on 127\.0\.0\.1:(\d+)", line)
            port = int(found.group(1)) if found else None
        response = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert response.status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(10)
    while (line := lines.get(timeout=1)) != b"":
        seen.append(line)
    assert process.stdout is not None
    assert process.stdout.read() == b""
    process.stdout.close()
    assert process.stderr is not None
    process.stderr.close()
    records = [json.loads(line) for line in seen]
    assert all(record["component"] == "bridge" for record in records)
    assert any("Shutting down" in record["msg"] for record in records)


def test_no_replica_answering_gives_503_at_once(
    private_backend: Backend, start_bridge: Any
) -> None:
    """Several replicas configured, none listening: a whole-request transient error with
    its retry advice, well before the deadline — never a hang."""
    import dataclasses
    import socket

    closed = []
    for _ in range(2):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            closed.append(f"127.0.0.1:{sock.getsockname()[1]}")
    settings = dataclasses.replace(private_backend.settings(), query_addr=",".join(closed))
    bridge = start_bridge(settings, deadline_s=5.0)
    with httpx.Client(base_url=bridge.url, timeout=10) as http:
        started = time.monotonic()
        response = http.post("/api/v1/query", json={"namespaces": ["demo"], "query": "q"})
        elapsed = time.monotonic() - started
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    error = _error(response)
    assert (error["code"], error["category"], error["retry_after_ms"]) == (
        "SERVICE_UNAVAILABLE",
        "transient",
        1000,
    )
    assert elapsed < 5.0

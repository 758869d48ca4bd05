"""The reach benchmark's webhook receiver, and the ceiling measured against it.

The receiver is a plain ``ThreadingHTTPServer`` that answers every POST at once with
200 ``{"id": <Idempotency-Key>}`` and counts deliveries by that header. It runs as its own
process (``ReceiverProcess`` starts it: ``python bench/_reach_receiver.py``) so that its
threads do not share a GIL with the benchmark's client threads. It prints ``port <n>`` once
it listens, and serves:

- ``POST <any other path>``: a delivery; 200 ``{"id": ...}`` in one write, keep-alive.
- ``GET /_stats``: ``{"posts": n, "keys": {key: count}}`` since the last reset.
- ``POST /_reset``: forgets every delivery.

``measure_ceiling`` is the rate at which one keep-alive client gets POSTs of the body reach
sends accepted by this same receiver: the most any reach run can deliver through it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

HOST = "127.0.0.1"
DELIVERY_PATH = "/hook"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # reach opens up to engine.workers connections at once

    def __init__(self) -> None:
        super().__init__((HOST, 0), _Handler)
        self._lock = threading.Lock()
        self._keys: Counter[str] = Counter()
        self._posts = 0

    def record(self, key: str) -> None:
        with self._lock:
            self._posts += 1
            self._keys[key] += 1

    def reset(self) -> None:
        with self._lock:
            self._posts = 0
            self._keys = Counter()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"posts": self._posts, "keys": dict(self._keys)}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: each client keeps its connection
    disable_nagle_algorithm = True
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/_reset":
            self.server.reset()
            self._answer(b"{}")
            return
        key = self.headers.get("Idempotency-Key", "")
        self.server.record(key)
        self._answer(json.dumps({"id": key or "-"}).encode())

    def do_GET(self) -> None:  # noqa: N802
        if self.path != "/_stats":
            self._answer(b'{"error": "not found"}', "404 Not Found")
            return
        self._answer(json.dumps(self.server.stats()).encode())

    def _answer(self, body: bytes, status: str = "200 OK") -> None:
        # Status line, headers and body in one write: a second small write would wait for
        # the client's delayed ACK (Nagle is off too, for the same reason).
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.wfile.write(head.encode("ascii") + body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # one line per request would cost more than answering it


def serve() -> None:
    server = _Server()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"port {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


class ReceiverProcess:
    """Starts the receiver in its own process; ``stop`` (or leaving the ``with``) ends it."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def delivery_url(self) -> str:
        return self.base_url + DELIVERY_PATH

    def start(self) -> ReceiverProcess:
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # Ctrl-C reaches the benchmark, which stops it in order
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the receiver did not start (said {line!r})")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> ReceiverProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> None:
        httpx.post(self.base_url + "/_reset", timeout=10, trust_env=False).raise_for_status()

    def stats(self) -> dict[str, Any]:
        response = httpx.get(self.base_url + "/_stats", timeout=30, trust_env=False)
        response.raise_for_status()
        return response.json()


def delivery_headers(key: str) -> dict[str, str]:
    """The headers reach's webhook channel sends with a delivery (the trace id is fixed)."""
    return {
        "Content-Type": "application/json",
        "Idempotency-Key": key,
        "X-Reachstore-Action-Id": key[:32],
        "X-Reachstore-Action-Type": "notify",
        "traceparent": f"00-{'0' * 31}1-{'0' * 15}1-01",
    }


def delivery_body(n: int) -> bytes:
    """The body reach sends for params ``{"n": n}``: a protobuf Struct holds numbers as
    doubles, and the channel writes compact JSON."""
    return json.dumps({"n": float(n)}, separators=(",", ":")).encode()


def measure_ceiling(receiver: ReceiverProcess, posts: int, warmup: int) -> dict[str, Any]:
    """One keep-alive ``httpx.Client`` posting deliveries back to back; the receiver must
    count every one of them."""
    body = delivery_body(1)
    receiver.reset()
    seconds_each: list[float] = []
    with httpx.Client(
        trust_env=False, timeout=10, headers={"User-Agent": "reachstore-bench"}
    ) as client:

        def post(i: int) -> None:
            headers = delivery_headers(f"ceiling-{i}")
            response = client.post(receiver.delivery_url, content=body, headers=headers)
            if response.status_code != 200:
                raise RuntimeError(f"the receiver answered {response.status_code}")

        for i in range(warmup):
            post(i)
        started = time.perf_counter()
        for i in range(warmup, warmup + posts):
            t = time.perf_counter()
            post(i)
            seconds_each.append(time.perf_counter() - t)
        seconds = time.perf_counter() - started
    counted = receiver.stats()["posts"]
    receiver.reset()
    if counted != warmup + posts:
        raise RuntimeError(f"the receiver counted {counted} of {warmup + posts} ceiling posts")
    return {
        "posts": posts,
        "warmup": warmup,
        "seconds": seconds,
        "posts_per_s": posts / seconds,
        "seconds_each": seconds_each,
    }


if __name__ == "__main__":
    serve()

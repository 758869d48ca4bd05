"""Ways around the bound on answers callers do not read
(reachstore_server/bridge/unsent_answers.py, docs/OPERATIONS.md "The bridge drops answers
its callers do not read"), found when that bound was first built on the transport's
``pause_writing`` alone:

1. The budget cut off the connection stalled longest, which was an honest slow reader that
   started first: 120 callers that never read cut off a caller reading the same answer at
   256 KiB/s (a 2 Mbit/s link) after 4.0 of its 6.3 MB, on every run. The kernel had taken
   2.8 MiB of its answer at once, so the bridge's own count did not move for seconds.
2. Unsent bytes below the transport's high-water mark (64 KiB) were never timed: a caller
   that fills the socket buffers and then leaves under 64 KiB waiting was never cut off,
   and its connection counted against REACHSTORE_HTTP_MAX_CONNECTIONS for as long as it
   stayed: 20 such callers kept every other caller at 503 TOO_MANY_CONNECTIONS for 60 s.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.system import RunningSystem
from tests.e2e.tls_certs import write_cert_set

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

WRITE_TIMEOUT_S = 3
TEXT = "\x01" * (1024 * 1024 - 16)
PATH = "/api/v1/namespaces/kb/documents/big"
GROWTH_MIB = 600  # the bound tests/e2e/test_attack18_bridge_unread_answers.py holds plain HTTP to


def _start(tmp_path: Path, env: dict[str, str], args: tuple[str, ...] = (), verify: object = True):
    (tmp_path / "sys").mkdir()
    system = RunningSystem(tmp_path / "sys", extra_env=env, extra_args=args)
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=120, verify=verify) as http:
            http.post("/api/v1/namespaces", json={"name": "kb"})
            for doc_id, text in (("big", TEXT), ("m30", "\x01" * 5000)):
                reply = http.post(
                    "/api/v1/namespaces/kb/documents:batchCreate",
                    json={
                        "documents": [{"document_id": doc_id, "text": text}],
                        "on_duplicate": "overwrite",
                    },
                )
                assert reply.status_code == 200, reply.text
            deadline = time.monotonic() + 150
            for doc_id in ("big", "m30"):
                while http.get(f"/api/v1/namespaces/kb/documents/{doc_id}").status_code != 200:
                    assert time.monotonic() < deadline
                    time.sleep(0.5)
    except BaseException:
        system.stop()
        raise
    return system


def _request(system: RunningSystem, path: str = PATH) -> bytes:
    url = httpx.URL(system.http_url)
    return f"GET {path} HTTP/1.1\r\nHost: {url.host}:{url.port}\r\n\r\n".encode()


def _connect(system: RunningSystem, rcvbuf: int, context: ssl.SSLContext | None = None):
    url = httpx.URL(system.http_url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect((url.host, url.port))
    return context.wrap_socket(sock, server_hostname="localhost") if context else sock


@pytest.mark.parametrize("over", ["http", "tls"])
def test_the_budget_does_not_cut_off_an_honest_slow_reader(tmp_path: Path, over: str) -> None:
    # Over TLS the reader's whole encrypted answer waits in the process from the first
    # moment (unsent_answers.TlsWrites never pauses), where a plain transport pauses.
    context: ssl.SSLContext | None = None
    args: tuple[str, ...] = ()
    if over == "tls":
        certs = write_cert_set(tmp_path / "certs")
        context = ssl.create_default_context(cafile=certs.ca)
        args = certs.up_args()
    system = _start(tmp_path, {}, args, context or True)  # the default write timeout, 30 s
    try:
        got: list[int] = []

        def reads_slowly() -> None:
            """Reads the answer at 256 KiB/s (a 2 Mbit/s link), without a pause, to its end."""
            received = 0
            try:
                sock = _connect(system, 65_536, context)
                sock.sendall(_request(system))
                while data := sock.recv(65_536):
                    received += len(data)
                    if received >= 6 * len(TEXT):
                        break
                    time.sleep(len(data) / (256 * 1024))
                sock.close()
            except OSError:
                pass
            got.append(received)

        honest = threading.Thread(target=reads_slowly)
        honest.start()
        time.sleep(1.5)
        flood = []
        for _ in range(120):
            sock = _connect(system, 4096, context)
            sock.sendall(_request(system))
            flood.append(sock)
        honest.join(timeout=120)
        for sock in flood:
            sock.close()
        seen = (
            f"the honest reader got {got} bytes of an answer over {6 * len(TEXT)}; cut off "
            f"over the budget {sum('bytes unsent in all' in line for line in system.output)}"
        )
        print(seen)
        assert got and got[0] >= 6 * len(TEXT), seen
    finally:
        system.stop()


def _send_queue(port: int, client_port: int) -> int | None:
    lines = subprocess.run(
        ["ss", "-tnH", f"( sport = :{port} and dport = :{client_port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in lines.splitlines():
        return int(line.split()[2])
    return None


def test_unsent_bytes_below_the_high_water_mark_do_not_hold_a_connection(tmp_path: Path) -> None:
    cap = 20
    system = _start(
        tmp_path,
        {
            "REACHSTORE_HTTP_WRITE_TIMEOUT_S": str(WRITE_TIMEOUT_S),
            "REACHSTORE_HTTP_MAX_CONNECTIONS": str(cap),
        },
    )
    try:
        port = httpx.URL(system.http_url).port
        assert port
        answer = len(httpx.get(system.http_url + "/api/v1/namespaces/kb/documents/m30").content)
        held: list[socket.socket] = []

        def fills_then_stops() -> None:
            """Asks for 30 KB answers, one at a time, until the socket buffers take no more
            of one: that one waits in the bridge, under the 64 KiB high-water mark."""
            sock = _connect(system, 4096)
            client_port = sock.getsockname()[1]
            last = 0
            for asked in range(1, 400):
                sock.sendall(_request(system, "/api/v1/namespaces/kb/documents/m30"))
                time.sleep(0.6)
                queued = _send_queue(port, client_port) or 0
                if asked > 3 and queued - last < answer // 2:
                    time.sleep(1.0)
                    if (_send_queue(port, client_port) or 0) - last < answer // 2:
                        break
                    queued = _send_queue(port, client_port) or 0
                last = queued
            held.append(sock)

        callers = [threading.Thread(target=fills_then_stops) for _ in range(cap)]
        for thread in callers:
            thread.start()
        for thread in callers:
            thread.join(timeout=150)
        # Keep-alive (5 s) and the write timeout (3 s) are long past.
        time.sleep(5 + WRITE_TIMEOUT_S + 12)
        with httpx.Client(base_url=system.http_url, timeout=10) as http:
            reply = http.get("/api/v1/namespaces")
        for sock in held:
            sock.close()
        seen = (
            f"{len(held)} callers stopped reading with under 64 KiB unsent; 20 s later a "
            f"caller got {reply.status_code} {reply.text[:80]}"
        )
        print(seen)
        assert reply.status_code == 200, seen
    finally:
        system.stop()

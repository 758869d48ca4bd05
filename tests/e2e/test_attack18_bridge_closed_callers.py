"""A caller that asks for a large answer, then closes its own sending side and never reads,
must not keep that answer in the bridge (docs/OPERATIONS.md "The bridge drops answers its
callers do not read", reachstore_server/bridge/unsent_answers.py).

Over TLS the caller sends a TLS close_notify alert as soon as the answer begins (a normal,
polite thing for a TLS client to do: "I will send no more"), and then never reads and never
closes its TCP socket. asyncio's SSL protocol then marks the bridge's TLS transport closing
(``_start_shutdown`` sets ``_closed``), answers with its own close_notify, cancels its
shutdown timeout and asks the socket transport beneath to close, which waits, without a
deadline, until the unsent encrypted answer drains. ``UnsentAnswers.sweep`` counts a
connection whose transport ``is_closing()`` as having nothing unsent, so it is never timed,
never counted against the budget and never cut off: its answer stays in the process, and its
connection stays in uvicorn's set (against REACHSTORE_HTTP_MAX_CONNECTIONS), for as long as
the caller keeps its socket.

Over plain HTTP the same is done with a TCP half-close (shutdown(SHUT_WR)): uvicorn's
``eof_received`` returns None, so asyncio closes the transport, which then waits for its
buffer to drain; the handler waits with it, holding its own copy of the answer.

Callers are started 50 ms apart so that the budget (which only ever sees the few answers not
yet past the close) never has to act: each caller gets its answer, closes its side, and sits.
Before the fix, 150 such callers held 612 MiB of a bridge over TLS (300 held 1.1 GiB) and
551 MiB over plain HTTP, every answer kept whole, for as long as they kept their sockets;
and 20 of them held every connection a bridge capped at 20 allowed: other callers got 503
``TOO_MANY_CONNECTIONS``, over TLS still 50 s later.
"""

from __future__ import annotations

import math
import select
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.system import RunningSystem
from tests.e2e.test_attack18_large_bodies import _rss_mib, _sample_rss
from tests.e2e.tls_certs import write_cert_set

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

CALLERS = 150
WRITE_TIMEOUT_S = 3
TEXT = "\x01" * (1024 * 1024 - 16)
ANSWER_BYTES = 6 * len(TEXT)
PATH = "/api/v1/namespaces/kb/documents/big"
GROWTH_MIB = 600  # the bound tests/e2e/test_attack18_bridge_unread_answers.py holds


def _request(host: str, port: int) -> bytes:
    return f"GET {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


class _Caller:
    """One raw connection; over TLS the TLS layer is a MemoryBIO pair, so that nothing is
    ever read from the socket unless asked for."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(60)
        self.sock.connect((host, port))
        self.tls = None
        if tls is not None:
            self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            self.tls = tls.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")
            while True:
                try:
                    self.tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    self._flush()
                    data = self.sock.recv(65_536)
                    if not data:
                        raise ConnectionError("closed in the handshake") from None
                    self.incoming.write(data)
            self._flush()

    def _flush(self) -> None:
        assert self.tls is not None
        if self.outgoing.pending:
            self.sock.sendall(self.outgoing.read())

    def send(self, data: bytes) -> None:
        if self.tls is None:
            self.sock.sendall(data)
        else:
            self.tls.write(data)
            self._flush()

    def wait_answer_begun(self) -> None:
        """Until a couple of KiB have come (over TLS 1.3 the session tickets come first, and
        a close_notify sent before the answer is written makes the bridge drop it)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            select.select([self.sock], [], [], 1)
            if len(self.sock.recv(65_536, socket.MSG_PEEK)) >= 2048:
                return
            time.sleep(0.01)

    def close_sending_side(self) -> None:
        if self.tls is None:
            self.sock.shutdown(socket.SHUT_WR)
            return
        try:
            self.tls.unwrap()  # writes close_notify; the peer's is not there yet
        except ssl.SSLWantReadError:
            pass
        self._flush()

    def drain_raw(self) -> int:
        """Reads raw bytes until the connection ends or the whole answer has come."""
        received = 0
        self.sock.settimeout(15)
        try:
            while data := self.sock.recv(65_536):
                received += len(data)
                if received >= ANSWER_BYTES:
                    break
        except OSError:
            pass
        return received


def _store(http: httpx.Client) -> None:
    """Stores the 1 MiB document and waits (the machine may be busy) until it is served."""
    http.post("/api/v1/namespaces", json={"name": "kb"})
    reply = http.post(
        "/api/v1/namespaces/kb/documents:batchCreate",
        json={"documents": [{"document_id": "big", "text": TEXT}], "on_duplicate": "overwrite"},
    )
    assert reply.status_code == 200, reply.text
    deadline = time.monotonic() + 300
    while (reply := http.get(PATH)).status_code != 200:
        assert time.monotonic() < deadline, reply.text[:300]
        time.sleep(0.5)
    assert len(reply.content) > 5 * 1024 * 1024


def _start(
    tmp_path: Path, over: str, env: dict[str, str]
) -> tuple[RunningSystem, ssl.SSLContext | None]:
    """A running system with the short write timeout (and ``env``), over plain HTTP or TLS;
    over TLS, the context its callers trust it with."""
    tls: ssl.SSLContext | None = None
    args: tuple[str, ...] = ()
    if over == "tls":
        certs = write_cert_set(tmp_path / "certs")
        tls = ssl.create_default_context(cafile=certs.ca)
        args = certs.up_args()
    (tmp_path / "sys").mkdir()
    system = RunningSystem(
        tmp_path / "sys",
        extra_env={"REACHSTORE_HTTP_WRITE_TIMEOUT_S": str(WRITE_TIMEOUT_S), **env},
        extra_args=args,
    )
    system.start()
    return system, tls


def _send_queues(port: int) -> list[int]:
    out = subprocess.run(
        ["ss", "-tnH", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(line.split()[2]) for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("over", ["tls", "http"])
def test_callers_that_close_their_side_do_not_keep_their_answers(tmp_path: Path, over: str) -> None:
    system, tls = _start(tmp_path, over, {})
    verify: ssl.SSLContext | bool = tls or True
    callers: list[_Caller] = []
    try:
        with httpx.Client(base_url=system.http_url, timeout=120, verify=verify) as http:
            _store(http)
        pid = system.pid("bridge")
        url = httpx.URL(system.http_url)
        assert url.host and url.port
        before = _rss_mib(pid)
        stop = threading.Event()
        peak = [before]
        sampler = threading.Thread(target=_sample_rss, args=(pid, stop, peak))
        sampler.start()
        small: list[float] = []
        try:
            for _ in range(CALLERS):
                caller = _Caller(url.host, url.port, tls)
                caller.send(_request(url.host, url.port))
                # The answer has begun: the bridge has written all of it by now.
                caller.wait_answer_begun()
                caller.close_sending_side()
                callers.append(caller)
                time.sleep(0.05)
            # Every write timeout and every sweep has long had its chance.
            time.sleep(WRITE_TIMEOUT_S * 4)
            held = _rss_mib(pid)
            queues = _send_queues(url.port)
            with httpx.Client(base_url=system.http_url, timeout=10, verify=verify) as http:
                for _ in range(3):
                    started = time.monotonic()
                    try:
                        answered = http.get("/api/v1/namespaces").status_code == 200
                    except httpx.TransportError:
                        answered = False
                    small.append(time.monotonic() - started if answered else math.inf)
        finally:
            stop.set()
            sampler.join()
        # A caller the bridge kept still gets the whole answer when it finally reads.
        kept = 0
        for caller in callers:
            kept += caller.drain_raw() >= ANSWER_BYTES
            caller.sock.close()
        callers.clear()
        time.sleep(2.0)
        after = _rss_mib(pid)
        waiting = [q for q in queues if q > 0]
        seen = (
            f"over {over}: bridge RSS {before:.0f} MiB before, peak {peak[0]:.0f}, "
            f"{held:.0f} held {WRITE_TIMEOUT_S * 4} s after the last caller closed its side, "
            f"{after:.0f} after they hung up; {kept} of {CALLERS} callers still had their "
            f"whole answer kept; {len(waiting)} bridge sockets with a send queue "
            f"({sum(waiting) / 2**20:.0f} MiB in the kernel); small calls at most "
            f"{max(small):.2f} s; cut off over the budget "
            f"{sum('bytes unsent in all' in line for line in system.output)}, at the write "
            f"timeout {sum('took nothing for' in line for line in system.output)}"
        )
        print(seen)
        assert kept == 0, seen
        # Cut off, a connection is reset: the kernel does not go on holding its answer.
        assert sum(waiting) <= 16 * 2**20, seen
        assert held - before <= GROWTH_MIB / 2, seen
        assert peak[0] - before <= GROWTH_MIB, seen
    finally:
        for caller in callers:
            caller.sock.close()
        system.stop()


CAP = 20
# How long the capped bridge's callers sit before a fresh caller tries: keep-alive (5 s), the
# write timeout and the sweeps are long past.
HOLD_S = 20.0


@pytest.mark.parametrize("over", ["tls", "http"])
def test_closing_callers_do_not_hold_the_connection_cap(tmp_path: Path, over: str) -> None:
    system, tls = _start(tmp_path, over, {"REACHSTORE_HTTP_MAX_CONNECTIONS": str(CAP)})
    verify: ssl.SSLContext | bool = tls or True
    callers: list[_Caller] = []
    try:
        with httpx.Client(base_url=system.http_url, timeout=120, verify=verify) as http:
            _store(http)
        url = httpx.URL(system.http_url)
        assert url.host and url.port
        for _ in range(CAP):
            caller = _Caller(url.host, url.port, tls)
            caller.send(_request(url.host, url.port))
            caller.wait_answer_begun()
            caller.close_sending_side()
            callers.append(caller)
        # Keep-alive (5 s), the write timeout (3 s) and the sweeps are long past.
        time.sleep(HOLD_S)
        with httpx.Client(base_url=system.http_url, timeout=10, verify=verify) as http:
            reply = http.get("/api/v1/namespaces")
        seen = (
            f"over {over}: {CAP} callers closed their sending side and stopped reading; "
            f"{HOLD_S:g} s later a caller got {reply.status_code} {reply.text[:100]}; cut off "
            f"at the write timeout {sum('took nothing for' in line for line in system.output)}"
        )
        print(seen)
        assert reply.status_code == 200, seen
    finally:
        for caller in callers:
            caller.sock.close()
        system.stop()

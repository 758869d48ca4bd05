"""Answers a REST caller never reads must not pile up in the bridge
(reachstore_server/bridge/unsent_answers.py).

A request is a few dozen bytes; its answer can be megabytes (a document of 1 MiB of
control characters is 6 MiB of JSON, each escaped as ``\\u0001``). A caller that asks and
then never reads leaves the answer in the bridge: the transport keeps what the socket did
not take, and the handler keeps its own copy while it waits for the transport to drain.
Before the bound, 200 such callers grew a bridge from 82 MiB to 801 MiB, held for as long as
they kept their connections open.

Here the bridge's write timeout is 3 s: each of the callers' connections must be closed
within it, the bridge's memory stay within the bound of unread answers, and small calls
beside the flood must be answered, over plain HTTP and over TLS. (Over TLS each answer has
an encrypted copy as well, and 100 such callers peaked a bridge at 1.1 GiB while plain
HTTP stayed within the bound.) (A caller that reads slowly beside such a flood is
tried in tests/e2e/test_attack18_bridge_unread_answers_bypass.py.)
"""

from __future__ import annotations

import math
import select
import socket
import ssl
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ingest
from tests.e2e.system import RunningSystem
from tests.e2e.test_attack18_large_bodies import _rss_mib, _sample_rss
from tests.e2e.tls_certs import write_cert_set

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

CALLERS = 200
WRITE_TIMEOUT_S = 3
TEXT = "\x01" * (1024 * 1024 - 16)
ANSWER_BYTES = 6 * len(TEXT)
PATH = "/api/v1/namespaces/kb/documents/big"
# The unread-answer budget (256 MiB) held in the transports' buffers plus the handlers'
# copies of the same answers, and the allocator's slack.
GROWTH_MIB = 600


def _request(host: str, port: int) -> bytes:
    return f"GET {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


def _never_reads(host: str, port: int, ends: list[str], tls: ssl.SSLContext | None) -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    received = 0
    try:
        sock.connect((host, port))
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="localhost")
        sock.sendall(_request(host, port))
        # The answer has begun (the bridge may take seconds to build 200 of them); from
        # then on nothing is read for three times the write timeout.
        select.select([sock], [], [], 60)
        time.sleep(WRITE_TIMEOUT_S * 3)
        # Read now: a bridge that closed the connection sent only what the kernel took
        # before; one that kept it sends the whole answer.
        while data := sock.recv(65_536):
            received += len(data)
            if received >= ANSWER_BYTES:
                break
    except OSError:
        pass
    finally:
        sock.close()
    ends.append("kept the whole answer" if received >= ANSWER_BYTES else "closed by the bridge")


@pytest.mark.parametrize("over", ["http", "tls"])
def test_answers_never_read_are_not_kept(tmp_path: Path, over: str) -> None:
    tls: ssl.SSLContext | None = None
    args: tuple[str, ...] = ()
    verify: ssl.SSLContext | bool = True
    if over == "tls":
        certs = write_cert_set(tmp_path / "certs")
        tls = ssl.create_default_context(cafile=certs.ca)
        verify = tls
        args = certs.up_args()
    (tmp_path / "sys").mkdir()
    system = RunningSystem(
        tmp_path / "sys",
        extra_env={"REACHSTORE_HTTP_WRITE_TIMEOUT_S": str(WRITE_TIMEOUT_S)},
        extra_args=args,
    )
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=120, verify=verify) as http:
            ingest(http, "kb", [{"document_id": "big", "text": TEXT}])
            reply = http.get(PATH)
            assert reply.status_code == 200, reply.text[:500]
            assert len(reply.content) > 5 * 1024 * 1024, len(reply.content)
        pid = system.pid("bridge")
        url = httpx.URL(system.http_url)
        assert url.host and url.port
        before = _rss_mib(pid)
        stop = threading.Event()
        peak = [before]
        sampler = threading.Thread(target=_sample_rss, args=(pid, stop, peak))
        sampler.start()
        ends: list[str] = []
        callers = [
            threading.Thread(target=_never_reads, args=(url.host, url.port, ends, tls))
            for _ in range(CALLERS)
        ]
        small: list[float] = []
        try:
            for thread in callers:
                thread.start()
            with httpx.Client(base_url=system.http_url, timeout=10, verify=verify) as http:
                for _ in range(10):
                    started = time.monotonic()
                    try:
                        answered = http.get("/api/v1/namespaces").status_code == 200
                    except httpx.TransportError:
                        answered = False
                    small.append(time.monotonic() - started if answered else math.inf)
                    time.sleep(0.5)
            for thread in callers:
                thread.join(timeout=60)
        finally:
            stop.set()
            sampler.join()
        time.sleep(1.0)
        after = _rss_mib(pid)
        seen = (
            f"bridge RSS {before:.0f} MiB, peak {peak[0]:.0f}, {after:.0f} after; "
            f"{ends.count('closed by the bridge')} of {CALLERS} closed; "
            f"small calls took at most {max(small):.2f} s; cut off over the budget "
            f"{sum('bytes unsent in all' in line for line in system.output)}, at the write "
            f"timeout {sum('took nothing for' in line for line in system.output)}"
        )
        print(seen)
        assert ends == ["closed by the bridge"] * CALLERS, seen
        assert peak[0] - before <= GROWTH_MIB, seen
        assert after - before <= GROWTH_MIB / 2, seen
        # Building 200 answers of 6 MiB keeps the loop busy for seconds: what is asked here
        # is that small calls are still answered, not how fast.
        assert max(small) < 10.0, seen
    finally:
        system.stop()

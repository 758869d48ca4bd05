"""Which connections the bridge cuts off for answers not read
(reachstore_server/bridge/unsent_answers.py), swept at chosen times. The transports here
only report a size; tests/e2e/test_attack18_bridge_unread_answers*.py run the real ones."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path
from typing import Any

from reachstore_server.bridge.unsent_answers import TlsWrites, UnsentAnswers, unsent_bytes
from tests.e2e.tls_certs import write_cert_set

MIB = 1024 * 1024


class _Transport:
    def __init__(self, unsent: int) -> None:
        self.unsent = unsent
        self.aborted = False

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def is_closing(self) -> bool:
        return self.aborted

    def get_extra_info(self, name: str) -> Any:
        return None  # no socket: nothing in the kernel

    def abort(self) -> None:
        self.aborted = True


class _Connection:
    def __init__(self, name: str, unsent: int) -> None:
        self.client = (name, 0)
        self.transport = _Transport(unsent)


def test_a_caller_that_takes_nothing_is_cut_off_after_the_timeout() -> None:
    answers = UnsentAnswers(timeout_s=3, budget_bytes=100 * MIB)
    still, reading = _Connection("still", 10), _Connection("reading", 6 * MIB)
    for now in (0.0, 1.0, 2.0, 2.9):
        reading.transport.unsent -= MIB
        answers.sweep([still, reading], now)
    assert not still.transport.aborted
    reading.transport.unsent -= MIB
    answers.sweep([still, reading], 3.0)
    assert still.transport.aborted  # however few bytes it left
    assert not reading.transport.aborted
    assert answers.cut_off == {"timeout": 1, "budget": 0}


def test_over_the_budget_those_that_took_nothing_go_before_an_older_reader() -> None:
    answers = UnsentAnswers(timeout_s=30, budget_bytes=13 * MIB)
    reader = _Connection("reader", 6 * MIB)
    answers.sweep([reader], 0.0)
    reader.transport.unsent -= 1
    answers.sweep([reader], 1.0)  # it took a byte: it reads
    flood = [_Connection(f"flood{n}", 6 * MIB) for n in range(3)]
    answers.sweep([reader, *flood], 2.0)
    assert not reader.transport.aborted
    assert [c.transport.aborted for c in flood] == [True, True, False]
    assert answers.cut_off == {"timeout": 0, "budget": 2}


def test_a_connection_that_sent_everything_is_forgotten() -> None:
    answers = UnsentAnswers(timeout_s=3, budget_bytes=100 * MIB)
    done = _Connection("done", MIB)
    answers.sweep([done], 0.0)
    done.transport.unsent = 0
    answers.sweep([done], 1.0)
    done.transport.unsent = MIB  # the next answer on the same connection starts afresh
    answers.sweep([done], 3.5)
    answers.sweep([done], 6.0)
    assert not done.transport.aborted
    answers.sweep([done], 6.5)
    assert done.transport.aborted


def test_over_tls_a_large_answer_waits_where_it_is_counted(tmp_path: Path) -> None:
    """A real asyncio TLS connection whose client reads nothing: a 6 MiB answer written
    through ``TlsWrites`` leaves nothing in the TLS layer's own buffer (an OpenSSL buffer
    that would keep its size as long as the connection lasts), all of it unsent in the
    transport beneath, where ``unsent_bytes`` counts it; and it looks at the budget."""
    certs = write_cert_set(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(certs.path("server.pem"), certs.path("server.key"))
    client_tls = ssl.create_default_context(cafile=certs.ca)
    answer = b"\x01" * (6 * MIB)

    async def run() -> tuple[int, int, int, bool]:
        loop = asyncio.get_running_loop()
        looked: list[int] = []
        made: asyncio.Future[Any] = loop.create_future()

        class Writer(asyncio.Protocol):
            def connection_made(self, transport: Any) -> None:
                made.set_result(TlsWrites(transport, lambda: looked.append(1)))

        server = await loop.create_server(Writer, "127.0.0.1", 0, ssl=server_tls)
        port = server.sockets[0].getsockname()[1]

        def caller() -> ssl.SSLSocket:
            """Shakes hands, asks nothing and reads nothing."""
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", port))
            return client_tls.wrap_socket(sock, server_hostname="localhost")

        client = await loop.run_in_executor(None, caller)
        transport = await made
        transport.write(answer)
        await asyncio.sleep(0.2)
        own = transport.get_write_buffer_size()
        counted = unsent_bytes(transport)
        paused = transport._ssl_protocol._transport._protocol_paused
        client.close()
        transport.abort()
        server.close()
        await server.wait_closed()
        return own, counted, len(looked), paused

    own, counted, looked, paused = asyncio.run(run())
    assert own == 0, f"{own} bytes left in the TLS layer"
    assert counted > 2 * MIB, f"only {counted} bytes counted as unsent"
    assert looked == 1
    assert not paused

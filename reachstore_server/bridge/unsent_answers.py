"""Answers the bridge has written and its callers have not taken: how long and how much of
them it keeps.

A request is a few dozen bytes and its answer can be megabytes (a 1 MiB document of control
characters is 6 MiB of JSON). A caller that asks and then does not read leaves the answer
in the bridge: the bytes the socket did not take wait in the transport, and the handler
keeps its own copy while it waits for them to drain. 200 such callers grew a bridge from
82 MiB to 801 MiB, held for as long as they kept their connections
(tests/e2e/test_attack18_bridge_unread_answers.py). So every connection's unsent bytes are
looked at every ``SWEEP_S`` (and whenever a transport passes its high-water mark):

- a connection whose caller has taken none of its unsent bytes for ``timeout_s`` is cut
  off (aborted, which drops the bytes and tells the handler its caller left), however few
  they are: a caller that stops reading once the socket buffers are full leaves a few
  KiB, and 20 such callers held every connection a bridge allowed, for good;
- when more than ``budget_bytes`` wait unsent across the process, connections are cut
  off until they fit: first those whose callers have taken none of their answer, then
  those that went longest without taking any, so a caller that keeps reading, however
  slowly, is the last to go. Cut off by age alone, a caller reading at 256 KiB/s was cut
  off by 120 callers that asked after it and read nothing.

Over TLS the transport the bridge writes to reports only what its TLS layer holds, and the
encrypted answer waits in the socket transport beneath it (asyncio's sslproto.py): that
one is counted too. Two things more were needed over TLS (``TlsWrites``); without them
200 callers over TLS that read nothing grew a bridge to 1.8-2.1 GiB and left it at 0.7-1.2
GiB until they hung up, against a peak of 0.55 GiB over plain HTTP:

- a TLS transport never tells the bridge that a write passed its high-water mark: its
  TLS layer hands each write, encrypted, to the transport beneath at once, so its own
  count stays under the mark. So its large writes are followed by a look at the budget,
  as a plain transport's pause is;
- the TLS layer encrypts into an OpenSSL memory buffer, which keeps its largest size for
  as long as the connection lasts, uncounted: 6 MiB per caller ever sent a 6 MiB answer.
  So answers go to it in pieces of ``LARGE_WRITE_BYTES``, and the transport beneath is
  never paused (while it is, the TLS layer keeps encrypting into that buffer instead of
  handing on, and it grows to the answer's size anyway): the encrypted bytes wait beneath,
  where they are counted and their memory shrinks as they are sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import socket
import struct
import termios
import time
from collections.abc import Callable, Collection
from typing import Any

log = logging.getLogger(__name__)

# How often every connection's unsent bytes are looked at.
SWEEP_S = 0.25
# Bytes of answers waiting for their callers to read them, across the process: room for
# a few dozen of the largest answers, and for thousands of ordinary ones, which the kernel's
# socket buffers mostly take anyway. The process holds more than this for them: over
# plain HTTP each handler keeps its copy of the answer until it is sent, so about twice
# this at worst (over TLS the handler's copy goes at once, ``TlsWrites``).
UNREAD_BUDGET_BYTES = 256 * 1024 * 1024


# Over TLS: the piece an answer is encrypted in, and the size of write followed by a look
# at the budget. asyncio's high-water mark, past which a plain transport pauses its writer.
LARGE_WRITE_BYTES = 64 * 1024


class TlsWrites:
    """A TLS transport written to in pieces, whose large writes call ``after_large_write``
    once written, and whose transport beneath never pauses (the module's docstring says
    why); for everything else it is the transport itself."""

    def __init__(self, transport: Any, after_large_write: Callable[[], None]) -> None:
        self._transport = transport
        self._after_large_write = after_large_write
        transport._ssl_protocol._transport.set_write_buffer_limits(high=_NEVER)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        for start in range(0, len(view), LARGE_WRITE_BYTES):
            self._transport.write(view[start : start + LARGE_WRITE_BYTES])
        if len(view) >= LARGE_WRITE_BYTES:
            self._after_large_write()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


# A high-water mark no buffer reaches: what waits is bounded by the budget instead.
_NEVER = 1 << 62


def is_tls(transport: Any) -> bool:
    return getattr(transport, "_ssl_protocol", None) is not None


def unsent_bytes(transport: Any) -> int:
    """Bytes written to ``transport`` that its socket has not taken yet."""
    size: int = transport.get_write_buffer_size()
    # A TLS transport's own count leaves out the encrypted bytes in the transport beneath.
    beneath = getattr(getattr(transport, "_ssl_protocol", None), "_transport", None)
    if beneath is not None:
        size += beneath.get_write_buffer_size()
    return size


def _in_the_kernel(transport: Any) -> int:
    """Bytes the socket has taken and its peer has not yet acknowledged (Linux's
    ``SIOCOUTQ``; 0 where it cannot be asked). The kernel takes megabytes of an answer at
    once, so whether a caller reads shows there long before the transport's count moves."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return int(struct.unpack("i", queued)[0])


@dataclasses.dataclass
class _Stall:
    unsent: int  # in this process
    pending: int  # in this process and in the kernel: it shrinks as the caller reads
    since: float  # when its caller last took any of it (or when it began)
    taken: bool = False  # whether its caller has taken any of it yet


class UnsentAnswers:
    """The unsent bytes of one bridge process's connections; used on its event loop.
    A connection is anything with ``transport`` and ``client`` (uvicorn's protocols)."""

    def __init__(self, timeout_s: float, budget_bytes: int = UNREAD_BUDGET_BYTES) -> None:
        self.timeout_s = timeout_s
        self.budget_bytes = budget_bytes
        self._stalls: dict[Any, _Stall] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.cut_off = {"timeout": 0, "budget": 0}

    def follow(self, connections: Collection[Any], loop: asyncio.AbstractEventLoop) -> None:
        """Sweeps ``connections`` every ``SWEEP_S`` until none is left."""
        if self._timer is None:
            self._timer = loop.call_later(SWEEP_S, self._tick, connections, loop)

    def _tick(self, connections: Collection[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self.sweep(connections)
        if connections:
            self.follow(connections, loop)

    def forget(self, connection: Any) -> None:
        self._stalls.pop(connection, None)

    def sweep(self, connections: Collection[Any], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for connection in list(connections):
            transport = connection.transport
            # A closing transport counts too: it waits, without a deadline, for its unsent
            # bytes to drain, and a caller that closes its side (a TLS close_notify, a TCP
            # half-close) and reads nothing kept its answer, and its connection, for good.
            unsent = 0 if transport is None else unsent_bytes(transport)
            stall = self._stalls.get(connection)
            if not unsent:
                self._stalls.pop(connection, None)
                continue
            pending = unsent + _in_the_kernel(transport)
            if stall is None:
                self._stalls[connection] = _Stall(unsent, pending, now)
            elif pending < stall.pending:
                self._stalls[connection] = _Stall(unsent, pending, now, taken=True)
            else:
                stall.unsent, stall.pending = unsent, pending
        for connection, stall in list(self._stalls.items()):
            if now - stall.since >= self.timeout_s:
                self._cut(connection, "timeout", f"took nothing for {self.timeout_s:g} s")
        total = sum(stall.unsent for stall in self._stalls.values())
        if total <= self.budget_bytes:
            return
        # Callers that have taken nothing go first: while the loop builds a flood of answers
        # it sends nothing, and a caller reading all along looked as stalled as the rest.
        order = sorted(self._stalls.items(), key=lambda item: (item[1].taken, item[1].since))
        for connection, stall in order:
            self._cut(connection, "budget", f"over {self.budget_bytes} bytes unsent in all")
            total -= stall.unsent
            if total <= self.budget_bytes:
                return

    def _cut(self, connection: Any, why: str, detail: str) -> None:
        self._stalls.pop(connection, None)
        self.cut_off[why] += 1
        log.info("answer not read by %s (%s): cutting off", connection.client, detail)
        _reset_on_close(connection.transport)
        connection.transport.abort()


def _reset_on_close(transport: Any) -> None:
    """Makes closing the socket reset the connection and drop what the kernel still holds
    for it: closed plainly, the kernel keeps trying to deliver a cut-off caller's answer
    (up to its send buffer, megabytes), and 150 callers that read nothing held 427 MiB of
    kernel memory after the bridge had let them go."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

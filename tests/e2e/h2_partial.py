"""A caller that opens gRPC calls and never finishes sending their requests, written with
plain HTTP/2 frames (RFC 9113) over a socket: a gRPC client library only sends whole
messages.

Each call declares a request of ``declared`` bytes in its 5-byte gRPC prefix, then sends
all of it but the last byte, as fast as the service's flow-control windows allow, and
waits. A service that reads the request into memory as it comes holds nearly ``declared``
bytes for each such call; one that does not read it holds at most one window (64 KiB).
A call the service ends (a refusal, or its own read timeout) is replaced by a new one, so
the caller keeps ``streams`` calls open on its connection for as long as it runs.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1
_INITIAL_WINDOW = 65_535
_MAX_FRAME = 16_384


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream) + payload


def _literal(name: str, value: str) -> bytes:
    """An HPACK literal header field without indexing, new name, no Huffman coding
    (RFC 7541 6.2.2); names and values here are shorter than 127 bytes."""
    encoded_name, encoded_value = name.encode(), value.encode()
    assert len(encoded_name) < 127 and len(encoded_value) < 127
    return (
        bytes([0, len(encoded_name)]) + encoded_name + bytes([len(encoded_value)]) + encoded_value
    )


class PartialCaller:
    """One connection to ``address`` (host:port) keeping ``streams`` unfinished calls of
    ``path`` open, until ``stop`` is set."""

    def __init__(self, address: str, path: str, streams: int, declared: int) -> None:
        host, port = address.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)))
        self._headers = b"".join(
            _literal(name, value)
            for name, value in (
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", address),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            )
        )
        self._streams, self._declared = streams, declared
        self._lock = threading.Condition()
        self._next_id = 1
        self._open: dict[int, int] = {}  # stream -> bytes of the request still to send
        self._windows: dict[int, int] = {}
        self._connection_window = _INITIAL_WINDOW
        self._stream_window = _INITIAL_WINDOW
        self.opened = 0
        self.ended = 0  # calls the service ended (trailers or RST_STREAM)
        self.sent = 0
        self.goaway = False

    def run(self, stop: threading.Event) -> None:
        self._sock.sendall(_PREFACE + _frame(_SETTINGS, 0, 0, b""))
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        try:
            while not stop.is_set() and not self.goaway:
                with self._lock:
                    while len(self._open) < self._streams:
                        self._open_call()
                    self._send_what_windows_allow()
                    self._lock.wait(0.05)
        except OSError:
            pass
        finally:
            self._sock.close()

    def _open_call(self) -> None:
        stream, self._next_id = self._next_id, self._next_id + 2
        self._sock.sendall(_frame(_HEADERS, _END_HEADERS, stream, self._headers))
        self._open[stream] = 5 + self._declared - 1  # the prefix, and all but one byte
        self._windows[stream] = self._stream_window
        self.opened += 1

    def _send_what_windows_allow(self) -> None:
        for stream, left in list(self._open.items()):
            room = min(left, self._windows[stream], self._connection_window, _MAX_FRAME)
            while room > 0:
                first = left == 5 + self._declared - 1
                body = (b"\x00" + struct.pack(">I", self._declared)) if first else b""
                payload = (body + b"\x00" * room)[:room]
                self._sock.sendall(_frame(_DATA, 0, stream, payload))
                left -= room
                self._windows[stream] -= room
                self._connection_window -= room
                self.sent += room
                room = min(left, self._windows[stream], self._connection_window, _MAX_FRAME)
            self._open[stream] = left

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = self._sock.recv(65_536)
                if not chunk:
                    self.goaway = True
                    return
                buffer += chunk
                while len(buffer) >= 9:
                    length = int.from_bytes(buffer[:3], "big")
                    if len(buffer) < 9 + length:
                        break
                    kind, flags, stream = buffer[3], buffer[4], int.from_bytes(buffer[5:9], "big")
                    payload, buffer = buffer[9 : 9 + length], buffer[9 + length :]
                    self._on_frame(kind, flags, stream & 0x7FFF_FFFF, payload)
        except OSError:
            self.goaway = True
        finally:
            with self._lock:
                self._lock.notify_all()

    def _on_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        with self._lock:
            if kind == _SETTINGS and not flags & _ACK:
                for at in range(0, len(payload), 6):
                    key, value = struct.unpack(">HI", payload[at : at + 6])
                    if key == 0x4:  # SETTINGS_INITIAL_WINDOW_SIZE
                        for open_stream in self._windows:
                            self._windows[open_stream] += value - self._stream_window
                        self._stream_window = value
                self._sock.sendall(_frame(_SETTINGS, _ACK, 0, b""))
            elif kind == _PING and not flags & _ACK:
                self._sock.sendall(_frame(_PING, _ACK, 0, payload))
            elif kind == _WINDOW_UPDATE:
                grant = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
                if stream == 0:
                    self._connection_window += grant
                elif stream in self._windows:
                    self._windows[stream] += grant
            elif kind == _RST_STREAM or (kind == _HEADERS and flags & _END_STREAM):
                if self._open.pop(stream, None) is not None:
                    self._windows.pop(stream, None)
                    self.ended += 1
            elif kind == _GOAWAY:
                self.goaway = True
            self._lock.notify_all()


def keep_open(address: str, path: str, streams: int, declared: int, seconds: float) -> dict:
    """Runs one caller for ``seconds``; what it did."""
    caller = PartialCaller(address, path, streams, declared)
    stop = threading.Event()
    thread = threading.Thread(target=caller.run, args=(stop,), daemon=True)
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join(timeout=10)
    return {
        "opened": caller.opened,
        "ended": caller.ended,
        "sent_mib": caller.sent / 2**20,
        "goaway": caller.goaway,
    }

"""How much a flood of HTTP/2 header frames grows a gRPC process (docs/LIMITS.md, "What
gRPC itself does not bound").

gRPC parses a call's headers in its own HTTP/2 layer, before any code of ours runs, and
no option it offers bounds what a flood of them costs. Two floods, each from ``--conns``
connections for ``--seconds``, while the process's RSS is sampled:

- ``continuation``: one HEADERS frame without END_HEADERS, then CONTINUATION frames of
  15 KB of headers, without end;
- ``headers``: a new stream per frame, each with 15 KB of headers (over the 8 KiB gRPC
  accepts, so each is refused), as fast as the connection takes them.

Usage: ``.venv/bin/python scripts/probe_h2_header_floods.py --port PORT --pid PID
[--mode continuation|headers] [--conns 50] [--seconds 15]`` against a running service
(``reachstore up`` prints its ports; ``pgrep -f 'reachstore_server.reach'`` its pid).
Run it after upgrading grpcio to see whether the figures in docs/LIMITS.md still hold.
"""

from __future__ import annotations

import argparse
import socket
import struct
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, SETTINGS, CONTINUATION = 0x1, 0x4, 0x9
END_HEADERS = 0x4


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _hpack_length(n: int) -> bytes:
    """An HPACK string length with a 7-bit prefix (no Huffman coding)."""
    if n < 127:
        return bytes([n])
    out = [127]
    n -= 127
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    return bytes([*out, n])


def literal(name: bytes, value: bytes) -> bytes:
    """A header field as an HPACK literal without indexing, with a new name."""
    return b"\x00" + _hpack_length(len(name)) + name + _hpack_length(len(value)) + value


REQUEST = b"".join(
    literal(name, value)
    for name, value in (
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/grpc.health.v1.Health/Check"),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
    )
)
PADDING = b"".join(literal(b"x-pad-%d" % i, b"a" * 1000) for i in range(15))


def flood(port: int, mode: str, until: float) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(PREFACE + frame(SETTINGS, 0, 0, b""))
            if mode == "continuation":
                sock.sendall(frame(HEADERS, 0, 1, REQUEST))
                while time.monotonic() < until:
                    sock.sendall(frame(CONTINUATION, 0, 1, PADDING))
            else:
                stream = 1
                while time.monotonic() < until:
                    sock.sendall(frame(HEADERS, END_HEADERS, stream, REQUEST + PADDING))
                    stream += 2
    except OSError:
        pass  # the server closed the connection: that is one way to bound it


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--mode", choices=("continuation", "headers"), default="headers")
    parser.add_argument("--conns", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    before = peak = rss_mib(args.pid)
    until = time.monotonic() + args.seconds
    threads = [
        threading.Thread(target=flood, args=(args.port, args.mode, until), daemon=True)
        for _ in range(args.conns)
    ]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        peak = max(peak, rss_mib(args.pid))
        time.sleep(0.2)
    time.sleep(3)
    print(
        f"{args.mode} flood, {args.conns} connections, {args.seconds:g} s: RSS {before:.0f} MiB, "
        f"peak {peak:.0f}, {rss_mib(args.pid):.0f} three seconds after"
    )


if __name__ == "__main__":
    main()

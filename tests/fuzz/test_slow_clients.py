"""Slow-loris clients against the real bridge: they are cut off, everyone else is served.

Hundreds of connections trickle a request head (or, after a quick head, a body) one byte
at a time, and a few never send anything. Meanwhile a normal client keeps asking for
/healthz and running real queries. The normal requests must all succeed promptly, and
every trickling connection must be closed by the bridge soon after its deadline (the
fixture runs the bridge with a 2 s head and 4 s body deadline), with a 408 saying why.
A second test runs a bridge with a small connection cap and shows the 503 beyond it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import queue
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest

from tests.e2e.system import RunningSystem
from tests.fuzz.conftest import BODY_TIMEOUT_S, HEAD_TIMEOUT_S, HOME

REPO = Path(__file__).resolve().parents[2]
HEAD_TRICKLERS = 240
BODY_TRICKLERS = 60
SILENT = 20
TRICKLE_EVERY_S = 0.5
# How late after its deadline a trickling connection may still be open: timers fire on
# the bridge's event loop, which also serves everyone else.
CLOSE_SLACK_S = 2.0
# Generous for a shared 2-core machine; measured: p50 ~12 ms, slowest ~270 ms.
NORMAL_MAX_LATENCY_S = 2.0


@dataclasses.dataclass
class Trickler:
    kind: str
    opened: float = 0.0
    closed: float | None = None
    received: bytes = b""


async def _trickle(host: str, port: int, trickler: Trickler, stop: asyncio.Event) -> None:
    # Taken before connecting: the bridge's clock for this connection starts at its accept,
    # never earlier, so the measured life is never shorter than the real one.
    trickler.opened = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    if trickler.kind == "head":
        writer.write(b"POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    elif trickler.kind == "body":
        writer.write(
            b"POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
        )
    try:
        while not stop.is_set():
            try:
                chunk = await asyncio.wait_for(reader.read(65536), TRICKLE_EVERY_S)
            except TimeoutError:
                if trickler.kind != "silent":
                    writer.write(b"a" if trickler.kind == "head" else b" ")
                    await writer.drain()
                continue
            if not chunk:
                break
            trickler.received += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        if not stop.is_set():
            trickler.closed = time.monotonic()
        writer.close()


async def _normal_load(
    base_url: str, key: str, stop: asyncio.Event, latencies: list[float], failures: list[str]
) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    query = {"namespaces": [HOME], "query": "what is stored here?", "top_k": 2}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=10) as client:
        while not stop.is_set():
            for method, path, body in (("GET", "/healthz", None), ("POST", "/api/v1/query", query)):
                started = time.monotonic()
                try:
                    reply = await client.request(method, path, json=body)
                except httpx.HTTPError as exc:
                    failures.append(f"{method} {path}: {exc!r}")
                    continue
                latencies.append(time.monotonic() - started)
                if reply.status_code != 200:
                    failures.append(f"{method} {path}: {reply.status_code} {reply.text[:200]}")
            await asyncio.sleep(0.05)


async def _scenario(
    system: RunningSystem, key: str
) -> tuple[list[Trickler], list[float], list[str]]:
    port = system.http_port
    stop = asyncio.Event()
    tricklers = (
        [Trickler("head") for _ in range(HEAD_TRICKLERS)]
        + [Trickler("body") for _ in range(BODY_TRICKLERS)]
        + [Trickler("silent") for _ in range(SILENT)]
    )
    latencies: list[float] = []
    failures: list[str] = []
    load = asyncio.create_task(_normal_load(system.http_url, key, stop, latencies, failures))
    tasks = [asyncio.create_task(_trickle("127.0.0.1", port, t, stop)) for t in tricklers]
    # Long enough for every deadline to pass, with the slack, while the load keeps going.
    await asyncio.sleep(max(HEAD_TIMEOUT_S, BODY_TIMEOUT_S) + CLOSE_SLACK_S + 1.0)
    stop.set()
    await asyncio.gather(load, *tasks)
    return tricklers, latencies, failures


@pytest.mark.alone  # counts requests served in a fixed time: another worker's load halves it
def test_trickling_connections_are_cut_off_and_normal_requests_keep_flowing(
    fuzz_system: RunningSystem, fuzz_key: str
) -> None:
    tricklers, latencies, failures = asyncio.run(_scenario(fuzz_system, fuzz_key))

    assert not failures, failures[:5]
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(
        f"normal requests: {len(latencies)}, p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms, while {len(tricklers)} connections trickled"
    )
    assert len(latencies) >= 20
    assert latencies[-1] < NORMAL_MAX_LATENCY_S

    for t in tricklers:
        deadline = BODY_TIMEOUT_S if t.kind == "body" else HEAD_TIMEOUT_S
        assert t.closed is not None, f"a {t.kind} trickler is still open"
        lived = t.closed - t.opened
        assert deadline - 0.1 <= lived <= deadline + CLOSE_SLACK_S, (t.kind, lived)
        status_line, _, rest = t.received.partition(b"\r\n")
        assert status_line == b"HTTP/1.1 408 Request Timeout", (t.kind, t.received[:200])
        body = json.loads(rest.partition(b"\r\n\r\n")[2])
        assert body["error"]["code"] == "REQUEST_TOO_SLOW"
        assert body["error"]["structured_data"]["part"] == ("body" if t.kind == "body" else "head")
    lifetimes = {
        kind: max(t.closed - t.opened for t in tricklers if t.kind == kind and t.closed)
        for kind in ("head", "body", "silent")
    }
    print("longest life of a trickling connection:", {k: round(v, 2) for k, v in lifetimes.items()})


def _lines(stream: IO[bytes], into: queue.Queue[bytes]) -> None:
    for line in stream:
        into.put(line)
    into.put(b"")


@pytest.fixture
def capped_bridge(fuzz_system: RunningSystem) -> Iterator[int]:
    """A second bridge in front of the same services, serving at most 30 connections."""
    env = {
        **os.environ,
        "REACHSTORE_LISTEN": "127.0.0.1:0",
        "REACHSTORE_QUERY_ADDR": fuzz_system.query_addr,
        "REACHSTORE_INGEST_ADDR": fuzz_system.ingest_addr,
        "REACHSTORE_REACH_ADDR": fuzz_system.reach_addr,
        "REACHSTORE_AUDIT_ADDR": f"127.0.0.1:{fuzz_system.grpc_port_base + 3}",
        "REACHSTORE_HTTP_MAX_CONNECTIONS": "30",
        "REACHSTORE_HTTP_HEAD_TIMEOUT_S": "3",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "reachstore_server.bridge.main"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=_lines, args=(process.stderr, lines), daemon=True).start()
    try:
        port = None
        while port is None:
            line = lines.get(timeout=30)
            assert line, "the bridge exited early"
            found = re.search(rb"bridge listening on 127\.0\.0\.1:(\d+)", line)
            port = int(found.group(1)) if found else None
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


async def _over_the_cap(port: int) -> tuple[int, dict[str, object], int]:
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(30)]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        refused = await client.get("/healthz")
        for _, writer in held:
            writer.close()
        await asyncio.sleep(0.3)
        served = await client.get("/healthz")
    return refused.status_code, refused.json(), served.status_code


def test_connections_beyond_the_cap_get_a_clear_503(capped_bridge: int) -> None:
    refused, body, served = asyncio.run(_over_the_cap(capped_bridge))
    assert refused == 503
    assert body["error"]["code"] == "TOO_MANY_CONNECTIONS"  # type: ignore[index]
    assert body["error"]["retryable"] is True  # type: ignore[index]
    assert served == 200


async def _huge_head(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: bridge\r\nX-Big: " + b"b" * 200_000 + b"\r\n\r\n")
    try:
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 10)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


def test_a_head_larger_than_the_cap_is_refused(fuzz_system: RunningSystem) -> None:
    # Sent at full speed: the deadline alone would let it fill memory first.
    answer = asyncio.run(_huge_head(fuzz_system.http_port))
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 431 Request Header Fields Too Large", answer[:200]
    error = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "HEADERS_TOO_LARGE"
    assert error["structured_data"]["limit_bytes"] == 64 * 1024

"""A body within the size limit but made of millions of tiny values must not stall the
bridge (docs/LIMITS.md, "JSON values in an HTTP body").

The bridge parses a body and builds the request message on its one event loop before any
service sees it, and ingest refuses more than 100 documents only then: a 17 MiB batch of
six million empty objects (``{}``) took the bridge's loop for seconds, during which no
other caller was answered. Here a real bridge is sent that batch while another caller
looks up namespaces every 100 ms: the batch must be refused naming the limit, and the
look-ups answered as usual.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.system import RunningSystem

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

BATCH = b'{"documents": [' + b",".join([b"{}"] * 6_000_000) + b"]}"


def _look_ups(url: str, stop: threading.Event, waits: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=30) as http:
        while not stop.is_set():
            started = time.monotonic()
            assert http.get("/api/v1/namespaces").status_code == 200
            waits.append(time.monotonic() - started)
            stop.wait(0.1)


def test_a_body_of_millions_of_values_is_refused_without_stalling_the_bridge(
    tmp_path: Path,
) -> None:
    system = RunningSystem(tmp_path)
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=60) as http:
            assert http.post("/api/v1/namespaces", json={"name": "kb"}).status_code == 200
            stop = threading.Event()
            waits: list[float] = []
            looker = threading.Thread(target=_look_ups, args=(system.http_url, stop, waits))
            looker.start()
            try:
                time.sleep(0.5)
                started = time.monotonic()
                reply = http.post(
                    "/api/v1/namespaces/kb/documents:batchCreate",
                    content=BATCH,
                    headers={"Content-Type": "application/json"},
                )
                took = time.monotonic() - started
                time.sleep(0.5)
            finally:
                stop.set()
                looker.join(timeout=60)
        seen = (
            f"batch of {len(BATCH) >> 20} MiB answered {reply.status_code} in {took:.2f} s: "
            f"{reply.text[:300]}; look-ups waited at most {max(waits):.2f} s ({len(waits)})"
        )
        print(seen)
        assert reply.status_code == 413, seen
        error = reply.json()["error"]
        assert error["structured_data"]["limit_values"] > 0, seen
        assert max(waits) < 1.5, seen
    finally:
        system.stop()

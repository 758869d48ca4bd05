"""A body within the size limit but made of millions of tiny values must not hold the
bridge's event loop (docs/LIMITS.md, "JSON values in an HTTP body"; docs/OPERATIONS.md, "A
body may hold at most 200,000 JSON values").

The bridge parses a body and builds the request message on its one event loop before any
service sees it:

- a 17 MiB batch of six million empty objects took the loop for 13.9 s (ingest refuses
  more than 100 documents only after that), and other callers waited 7.6 s;
- once objects were counted as the parser made them, arrays still were not: the parser
  decodes every array and scalar before any hook runs, and ten million empty arrays,
  500 deep, took the loop for 4-8 s; one object of 1.7 million members (the hook runs
  once per object, after its members), 3.3-3.9 s;
- the values of a ``Struct`` are built by protobuf in Python, about 9 us each.

Here a real bridge is sent each body while another caller looks up namespaces every
100 ms: the body must be refused naming the limit, and the look-ups answered as usual.
"""

from __future__ import annotations

import itertools
import string
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.e2e.system import RunningSystem

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

_ROOM = 20 * 1024 * 1024 - 100  # within the bridge's 20 MiB body limit


def _empty_objects() -> bytes:
    """Six million empty objects as documents, 17 MiB."""
    return b'{"documents": [' + b",".join([b"{}"] * 6_000_000) + b"]}"


def _nested_arrays() -> bytes:
    """Ten million empty arrays, 500 deep, in 20 MiB: not one object."""
    depth = 500
    chunk = b"[" * depth + b"]" * depth
    return b'{"a":[' + b",".join([chunk] * (_ROOM // (2 * depth + 1))) + b"]}"


def _one_wide_object() -> bytes:
    """One object of 1.7 million members (each an empty array), 18 MiB."""
    symbols = "!#$%&()*+-./:;<=>?@^_`|~"
    alphabet = [c.encode() for c in string.ascii_letters + string.digits + symbols]
    keys = (b"".join(p) for p in itertools.product(alphabet, repeat=4))
    return b"{" + b",".join(b'"' + next(keys) + b'":[]' for _ in range(_ROOM // 11)) + b"}"


def _look_ups(url: str, stop: threading.Event, waits: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=60) as http:
        while not stop.is_set():
            started = time.monotonic()
            assert http.get("/api/v1/namespaces").status_code == 200
            waits.append(time.monotonic() - started)
            stop.wait(0.1)


@pytest.mark.parametrize(
    "make_body",
    [_empty_objects, _nested_arrays, _one_wide_object],
    ids=["objects", "arrays", "members"],
)
def test_a_body_of_millions_of_values_is_refused_without_stalling_the_bridge(
    tmp_path: Path, make_body: Callable[[], bytes]
) -> None:
    body = make_body()
    assert len(body) <= 20 * 1024 * 1024
    system = RunningSystem(tmp_path)
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=120) as http:
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
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                took = time.monotonic() - started
                time.sleep(0.5)
            finally:
                stop.set()
                looker.join(timeout=60)
        seen = (
            f"body of {len(body) >> 20} MiB answered {reply.status_code} in {took:.2f} s: "
            f"{reply.text[:200]}; look-ups waited at most {max(waits):.2f} s ({len(waits)})"
        )
        print(seen)
        assert reply.status_code == 413, seen
        assert reply.json()["error"]["structured_data"]["limit_values"] > 0, seen
        assert max(waits) < 1.5, seen
    finally:
        system.stop()


def test_struct_values_within_the_limit_are_built_without_stalling_the_bridge(
    tmp_path: Path,
) -> None:
    """Values of a Struct (reach ``params``) are built by protobuf in Python, about 9 us
    each: eight bodies of 200,000 such values at once held the loop for 5.2 s. They are
    built in a worker thread, and the loop answers others meanwhile."""
    params = b",".join(b'"p%d":0' % n for n in range(199_990))
    body = b'{"entity_id": "E-1", "actions": [{"params": {' + params + b"}}]}"
    system = RunningSystem(tmp_path)
    system.start()
    try:
        stop = threading.Event()
        waits: list[float] = []
        looker = threading.Thread(target=_look_ups, args=(system.http_url, stop, waits))
        looker.start()
        statuses: list[int] = []

        def post() -> None:
            with httpx.Client(base_url=system.http_url, timeout=120) as http:
                reply = http.post(
                    "/api/v1/reach/tasks",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                statuses.append(reply.status_code)

        try:
            time.sleep(0.5)
            posters = [threading.Thread(target=post) for _ in range(8)]
            for poster in posters:
                poster.start()
            for poster in posters:
                poster.join(timeout=120)
            time.sleep(0.5)
        finally:
            stop.set()
            looker.join(timeout=60)
        seen = (
            f"8 bodies of 200,000 Struct values: {statuses}; "
            f"look-ups waited at most {max(waits):.2f} s"
        )
        print(seen)
        # Refused by the reach service (no channel is named), or shed: never a 500.
        assert len(statuses) == 8 and set(statuses) <= {400, 403, 503}, seen
        assert max(waits) < 1.5, seen
    finally:
        system.stop()

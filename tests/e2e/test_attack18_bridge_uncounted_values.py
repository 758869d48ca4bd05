"""A body within the size limit must not hold the bridge's event loop for long before it is
refused (docs/LIMITS.md, "JSON values in an HTTP body"; docs/OPERATIONS.md, "A body may
hold at most 200,000 JSON values").

The cap is enforced by ``object_pairs_hook`` (reachstore_server/bridge/http_body.py), which
the JSON parser calls once per *object*, and only after that object's members are all
parsed; arrays, scalars and the members of one object are counted by ``_walk`` after
``json.loads`` has decoded the whole body. So a 20 MiB body made of arrays (``[[[...]]]``,
no object at all), or of one object with 1.7 million members, is decoded in full on the
loop before anything counts it: ten million lists took the loop for 4-5 s and the bridge
to 1 GiB, and every other caller waited that long.

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


@pytest.mark.parametrize("make_body", [_nested_arrays, _one_wide_object], ids=["arrays", "members"])
def test_a_body_of_uncounted_values_is_refused_without_stalling_the_bridge(
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
                    "/api/v1/namespaces/kb/documents",
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

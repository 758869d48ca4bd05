"""Requests declared large and never finished must not be held in memory as they come
(reachstore_server/common/request_reads.py, docs/OPERATIONS.md "Load shedding").

A gRPC client only sends whole messages; this caller (tests/e2e/h2_partial.py) writes
HTTP/2 frames itself. It keeps 64 calls open on each of four connections, one connection
per method: a read (``GetNamespace``), a call that adds work (``BatchCreateDocuments``),
and the two streaming methods every service serves (health's ``Watch``, reflection). Every
call declares an 8 MiB request and sends all of it but the last byte; this for 10 s,
twice, while a third caller looks up a namespace every 100 ms.

gRPC used to read the requests of reads and of streaming calls as they came, and none of
those calls ever ended: a real ingest process grew from 221 MiB to 1,908 MiB in the first
round and 3,327 MiB in the second (peak 3,458 MiB), and kept it. Now at most admission's
concurrency (16) of each kind are read at once, the rest wait unread and are refused, and
a request that has not arrived within ``READ_S`` ends its call: a peak of 638 MiB, 518 and
484 MiB after the rounds. The price: while such a caller holds every place, a small read
waits for a place up to admission's wait (1 s) and is refused more often than served
(docs/OPERATIONS.md).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import grpc
import pytest

from reachstore.ingest.v1 import ingest_service_pb2 as pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from tests import wire_format
from tests.e2e.h2_partial import keep_open
from tests.e2e.system import RunningSystem
from tests.e2e.test_attack18_large_bodies import _rss_mib, _sample_rss

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

# A read, a call that adds work, and the two streaming methods every service serves
# (gRPC reads a streaming call's messages as they come too): one connection each.
METHODS = (
    "/reachstore.ingest.v1.IngestService/GetNamespace",
    "/reachstore.ingest.v1.IngestService/BatchCreateDocuments",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
)
STREAMS = 64
DECLARED = 8 * 2**20
ROUNDS, SECONDS = 2, 10.0
# 16 requests of each kind read at once, each nearly 8 MiB (256 MiB), and one window of
# 64 KiB for each call waiting: room for the allocator, which keeps what it freed, besides.
# Before: each read grew the process by 8 MiB per call (3 x 64 x 8 MiB = 1.5 GiB).
GROWTH_MIB = 512
# A refusal waits admission's longest wait (1 s) for a place; a lookup's own time besides.
SMALL_CALL_S = 2.5


def _small_calls(address: str, stop: threading.Event, ended: list[tuple[str, float]]) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.IngestServiceStub(channel)
        while not stop.is_set():
            started = time.time()
            try:
                stub.GetNamespace(pb.GetNamespaceRequest(name="absent"), timeout=30)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
            ended.append((code, time.time() - started))
            stop.wait(0.1)


def _attack(address: str) -> list[dict]:
    """One round: every caller for ``SECONDS``; what each did."""
    callers: list[dict] = []
    threads = [
        threading.Thread(
            target=lambda m=method: callers.append(
                keep_open(address, m, STREAMS, DECLARED, SECONDS)
            )
        )
        for method in METHODS
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=SECONDS + 30)
    assert len(callers) == len(threads), callers
    return callers


def test_requests_never_finished_are_not_held_as_they_come(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path)
    system.start()
    try:
        pid = system.pid("ingest")
        before = _rss_mib(pid)
        stop = threading.Event()
        small: list[tuple[str, float]] = []
        peak = [before]
        watchers = [
            threading.Thread(target=_small_calls, args=(system.ingest_addr, stop, small)),
            threading.Thread(target=_sample_rss, args=(pid, stop, peak)),
        ]
        for watcher in watchers:
            watcher.start()
        rounds = []
        try:
            for _ in range(ROUNDS):
                callers = _attack(system.ingest_addr)
                time.sleep(3.0)  # the calls the callers left are ended, their memory freed
                rounds.append((callers, _rss_mib(pid)))
        finally:
            stop.set()
            for watcher in watchers:
                watcher.join()
        codes = {code for code, _ in small}
        seen = (
            f"ingest RSS {before:.0f} MiB before, peak {peak[0]:.0f}, after each round "
            f"{[round(after) for _, after in rounds]}; {len(small)} small calls ended "
            f"{sorted(codes)}, slowest {max(took for _, took in small):.2f} s; "
            f"callers {rounds}"
        )
        print(seen)
        for callers, _ in rounds:
            assert all(c["opened"] >= STREAMS for c in callers), seen
            # The service ends calls whose requests do not come.
            assert all(c["ended"] > 0 for c in callers), seen
        # Bounded while it lasts, and a second round adds nothing to what the first left.
        assert peak[0] - before <= GROWTH_MIB, seen
        # Each small call is answered (NOT_FOUND: the namespace is absent) or refused for
        # overload, in bounded time; never left hanging, never an error of its own.
        assert codes <= {"NOT_FOUND", "UNAVAILABLE"}, seen
        assert max(took for _, took in small) <= SMALL_CALL_S, seen
    finally:
        system.stop()


def test_a_streaming_call_cannot_keep_a_large_request(tmp_path: Path) -> None:
    """Health's ``Watch`` lasts as long as its caller keeps it, and its request with it.
    Requests of 30 MiB of unknown fields, gzip-compressed to 30 KiB, were each read within
    a place and then held by their calls: 120 of them grew an ingest process from 222 MiB
    to 3,625 MiB, and it kept 2,090 MiB after they were cancelled. A streaming method's
    request is now refused beyond 64 KiB, naming the request."""
    system = RunningSystem(tmp_path)
    system.start()
    try:
        pid = system.pid("ingest")
        before = _rss_mib(pid)
        # Field 15, length-delimited: a field the request type does not have.
        size = 30 * 2**20
        payload = b"\x7a" + wire_format.varint(size) + b"\x00" * size

        async def watch_all() -> list[str]:
            options = [("grpc.max_send_message_length", -1)]
            async with grpc.aio.insecure_channel(system.ingest_addr, options=options) as channel:
                watch = channel.unary_stream(
                    "/grpc.health.v1.Health/Watch",
                    request_serializer=lambda raw: raw,
                    response_deserializer=lambda raw: raw,
                )

                async def one() -> str:
                    call = watch(payload, compression=grpc.Compression.Gzip, timeout=20)
                    try:
                        async for _ in call:
                            return "held"
                        return "ended"
                    except grpc.aio.AioRpcError as exc:
                        return exc.code().name

                return list(await asyncio.gather(*(one() for _ in range(60))))

        ended = asyncio.run(watch_all())
        after = _rss_mib(pid)
        seen = f"ingest RSS {before:.0f} MiB before, {after:.0f} after; {sorted(set(ended))}"
        print(seen)
        # Refused (or shed while the places were taken): never held by a running Watch.
        assert set(ended) <= {"INVALID_ARGUMENT", "UNAVAILABLE"}, seen
        assert "INVALID_ARGUMENT" in ended, seen
    finally:
        system.stop()

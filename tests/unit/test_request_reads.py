"""The requests of calls that add work are read by the guard within bounds
(reachstore_server/common/request_reads.py; docs/OPERATIONS.md, "Load shedding").

A real gRPC server with the guard in front of a small ingest servicer whose one admission
slot a test can hold. What proves a refused call was never read: a request over gRPC's
message limit fails RESOURCE_EXHAUSTED when gRPC reads it, so a call refused first must get
SERVICE_OVERLOADED instead. The service-level flood is
tests/e2e/test_attack18_large_bodies.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_status import rpc_status

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from reachstore_server.common import request_reads
from reachstore_server.common.admission import AdmissionLimits
from reachstore_server.common.grpc_server import MAX_MESSAGE_BYTES, create_server

SERVICE = "reachstore.ingest.v1.IngestService"
BATCH = f"/{SERVICE}/BatchCreateDocuments"


class _Ingest(pb_grpc.IngestServiceServicer):
    """Answers batches, except one for the namespace ``held``: that one is served until its
    caller gives up."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def BatchCreateDocuments(  # noqa: N802 - the generated name
        self, request: pb.BatchCreateDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.BatchCreateDocumentsResponse:
        self.seen.append(request.namespace)
        if request.namespace == "held":
            await asyncio.Event().wait()
        return pb.BatchCreateDocumentsResponse()

    async def GetNamespace(  # noqa: N802 - the generated name
        self, request: pb.GetNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetNamespaceResponse:
        self.seen.append("GetNamespace")
        return pb.GetNamespaceResponse()


async def _serving(servicer: _Ingest) -> tuple[grpc.aio.Server, str]:
    server, port, _ = create_server(
        [lambda s: pb_grpc.add_IngestServiceServicer_to_server(servicer, s)],
        [SERVICE],
        "127.0.0.1:0",
        admission=AdmissionLimits(concurrency=1, max_wait_s=0.2),
    )
    await server.start()
    return server, f"127.0.0.1:{port}"


def _failure(exc: grpc.aio.AioRpcError) -> pf_pb2.PartialFailure:
    status = rpc_status.from_call(exc)
    assert status is not None, exc
    for detail in status.details:
        failure = pf_pb2.PartialFailure()
        if detail.Unpack(failure):
            return failure
    raise AssertionError(f"no PartialFailure in {exc}")


def _oversized() -> pb.BatchCreateDocumentsRequest:
    text = "x" * (1 << 20)
    count = MAX_MESSAGE_BYTES // len(text) + 1
    return pb.BatchCreateDocumentsRequest(
        namespace="big",
        documents=[pb.DocumentInput(document_id=f"d{i}", text=text) for i in range(count)],
    )


def test_a_unary_call_is_served_with_its_request() -> None:
    async def run() -> None:
        servicer = _Ingest()
        server, address = await _serving(servicer)
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = pb_grpc.IngestServiceStub(channel)
                await stub.BatchCreateDocuments(
                    pb.BatchCreateDocumentsRequest(namespace="docs"), timeout=10
                )
            assert servicer.seen == ["docs"]
        finally:
            await server.stop(None)

    asyncio.run(run())


def _batches(channel: grpc.aio.Channel) -> Any:
    """BatchCreateDocuments as a client-streaming call, so a test controls when (and
    whether) the request is sent."""
    return channel.stream_unary(
        BATCH,
        request_serializer=pb.BatchCreateDocumentsRequest.SerializeToString,
        response_deserializer=pb.BatchCreateDocumentsResponse.FromString,
    )


async def _never(stop: asyncio.Event) -> AsyncIterator[pb.BatchCreateDocumentsRequest]:
    """A request that never arrives: the call stays open, its body never sent."""
    await stop.wait()
    return
    yield


def test_a_caller_that_never_sends_its_request_holds_no_slot_of_the_reads() -> None:
    """Attack: with the one slot of the service, a call that adds work and never sends its
    request. Read inside an admitted slot, it held the slot, and every read of the service
    was refused after waiting as long as it could (UNAVAILABLE in 1.0 s, 16 of 16 slots
    held by a client that sent nothing)."""

    async def run() -> None:
        servicer = _Ingest()
        server, address = await _serving(servicer)
        stop = asyncio.Event()
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stalled = asyncio.ensure_future(_batches(channel)(_never(stop), timeout=30))
                await asyncio.sleep(0.3)
                stub = pb_grpc.IngestServiceStub(channel)
                await stub.GetNamespace(pb.GetNamespaceRequest(name="docs"), timeout=5)
                # The place to read a request is taken: a large one is refused unread (read,
                # gRPC would refuse its size with RESOURCE_EXHAUSTED).
                options = [("grpc.max_send_message_length", 2 * MAX_MESSAGE_BYTES)]
                async with grpc.aio.insecure_channel(address, options=options) as large:
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await pb_grpc.IngestServiceStub(large).BatchCreateDocuments(
                            _oversized(), timeout=10
                        )
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
                failure = _failure(refused.value)
                assert failure.error_code == "SERVICE_OVERLOADED", failure
                assert failure.structured_data["reason"] == "requests_being_read"
                assert failure.retry_after_ms > 0
                stop.set()
                stalled.cancel()
            assert servicer.seen == ["GetNamespace"]
        finally:
            await server.stop(None)

    asyncio.run(run())


def test_a_request_that_does_not_arrive_in_time_ends_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(request_reads, "READ_S", 0.3)

    async def run() -> None:
        servicer = _Ingest()
        server, address = await _serving(servicer)
        stop = asyncio.Event()
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as slow:
                    await _batches(channel)(_never(stop), timeout=10)
                assert slow.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                failure = _failure(slow.value)
                assert failure.error_code == "REQUEST_TOO_SLOW", failure
                assert failure.structured_data["part"] == "message"
                # Its place is free again: the next batch is read and served.
                stub = pb_grpc.IngestServiceStub(channel)
                await stub.BatchCreateDocuments(
                    pb.BatchCreateDocumentsRequest(namespace="next"), timeout=5
                )
            stop.set()
            assert servicer.seen == ["next"]
        finally:
            await server.stop(None)

    asyncio.run(run())


def test_calls_abandoned_by_their_callers_do_not_make_the_method_look_slow() -> None:
    """Attack: calls held open (served slowly here) and then dropped by their callers. Their
    time counted as the method's cost, so after the attacker left every later call with a
    deadline under that time was refused at once, "its deadline is nearer than such a call
    takes", and the audit shippers (10 s deadlines) stopped for good."""

    async def run() -> None:
        servicer = _Ingest()
        server, address = await _serving(servicer)
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = pb_grpc.IngestServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as dropped:
                    await stub.BatchCreateDocuments(
                        pb.BatchCreateDocumentsRequest(namespace="held"), timeout=1.5
                    )
                assert dropped.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                await stub.BatchCreateDocuments(
                    pb.BatchCreateDocumentsRequest(namespace="after"), timeout=1.0
                )
            assert servicer.seen == ["held", "after"]
        finally:
            await server.stop(None)

    asyncio.run(run())


def test_a_call_without_its_request_message_names_what_is_missing() -> None:
    async def run() -> None:
        server, address = await _serving(_Ingest())
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                finished = asyncio.Event()
                finished.set()  # the call is half-closed at once, with no message
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await _batches(channel)(_never(finished), timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            failure = _failure(refused.value)
            assert failure.structured_data["field"] == "request", failure
        finally:
            await server.stop(None)

    asyncio.run(run())

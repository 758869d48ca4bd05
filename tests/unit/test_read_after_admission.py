"""A call that adds work is read only once admitted (reachstore_server/common/grpc_server.py,
``reads_after_admission``; docs/OPERATIONS.md, "Load shedding").

A real gRPC server with the guard in front of a small ingest servicer. What proves a refused
call was never read: a request over gRPC's message limit fails RESOURCE_EXHAUSTED when gRPC
reads it, so a call admission refuses first must get SERVICE_OVERLOADED instead. Before
requests were read after admission, gRPC had read (and refused) every such request before
admission saw the call. The service-level flood is tests/e2e/test_attack18_large_bodies.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_status import rpc_status

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from reachstore_server.common.admission import AdmissionLimits
from reachstore_server.common.grpc_server import MAX_MESSAGE_BYTES, create_server

SERVICE = "reachstore.ingest.v1.IngestService"
BATCH = f"/{SERVICE}/BatchCreateDocuments"


class _Ingest(pb_grpc.IngestServiceServicer):
    """Answers batches; holds each one until ``release`` is set, so a test can fill the
    service's one slot."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.release = asyncio.Event()
        self.release.set()

    async def BatchCreateDocuments(  # noqa: N802 - the generated name
        self, request: pb.BatchCreateDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.BatchCreateDocumentsResponse:
        self.seen.append(request.namespace)
        await self.release.wait()
        return pb.BatchCreateDocumentsResponse()


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


def test_a_refused_call_is_never_read() -> None:
    async def run() -> None:
        servicer = _Ingest()
        server, address = await _serving(servicer)
        options = [("grpc.max_send_message_length", 2 * MAX_MESSAGE_BYTES)]
        try:
            async with grpc.aio.insecure_channel(address, options=options) as channel:
                stub = pb_grpc.IngestServiceStub(channel)
                servicer.release.clear()
                holding = asyncio.ensure_future(
                    stub.BatchCreateDocuments(
                        pb.BatchCreateDocumentsRequest(namespace="first"), timeout=10
                    )
                )
                while servicer.seen != ["first"]:
                    await asyncio.sleep(0.01)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.BatchCreateDocuments(_oversized(), timeout=10)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
                assert _failure(refused.value).error_code == "SERVICE_OVERLOADED"
                servicer.release.set()
                await holding
                # Admitted, the same request is read, and gRPC refuses its size.
                with pytest.raises(grpc.aio.AioRpcError) as too_large:
                    await stub.BatchCreateDocuments(_oversized(), timeout=10)
                assert too_large.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert servicer.seen == ["first"]
        finally:
            await server.stop(None)

    asyncio.run(run())


def test_a_call_without_its_request_message_names_what_is_missing() -> None:
    async def run() -> None:
        server, address = await _serving(_Ingest())
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                call = channel.stream_unary(
                    BATCH,
                    request_serializer=pb.BatchCreateDocumentsRequest.SerializeToString,
                    response_deserializer=pb.BatchCreateDocumentsResponse.FromString,
                )

                async def nothing() -> AsyncIterator[pb.BatchCreateDocumentsRequest]:
                    return
                    yield

                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call(nothing(), timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            failure = _failure(refused.value)
            assert failure.structured_data["field"] == "request", failure
        finally:
            await server.stop(None)

    asyncio.run(run())

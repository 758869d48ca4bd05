"""Fixtures for the bridge tests: real gRPC servers with small servicers, real uvicorn.

Everything asynchronous runs on one background event loop (``LoopThread``); tests drive
it with plain synchronous httpx, the way an outside caller would. Servicers raise
``errors.ReachstoreError`` so rich statuses are produced by the real ``create_server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import grpc
import httpx
import pytest
import uvicorn
from google.protobuf import descriptor_pb2, descriptor_pool, text_format

from reachstore.admin.v1 import key_service_pb2_grpc as key_grpc
from reachstore.audit.v1 import audit_service_pb2_grpc as audit_grpc
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb2
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore.query.v1 import query_service_pb2 as query_pb2
from reachstore.query.v1 import query_service_pb2_grpc as query_grpc
from reachstore.reach.v1 import reach_service_pb2_grpc as reach_grpc
from reachstore_server.bridge.app import create_app
from reachstore_server.bridge.backends import (
    AUDIT_SERVICE,
    INGEST_SERVICE,
    KEY_SERVICE,
    QUERY_SERVICE,
    REACH_SERVICE,
)
from reachstore_server.bridge.main import bind_socket, uvicorn_config
from reachstore_server.common import errors
from reachstore_server.common.config import Settings
from reachstore_server.common.grpc_server import create_server, mark_serving

# The services the test backend hosts (key administration and reach are tested end to end).
BACKEND_SERVICES = (QUERY_SERVICE, INGEST_SERVICE)
SERVICE_NAMES = [
    QUERY_SERVICE.full_name,
    INGEST_SERVICE.full_name,
    KEY_SERVICE.full_name,
    REACH_SERVICE.full_name,
    AUDIT_SERVICE.full_name,
]


class LoopThread:
    """An asyncio loop in a daemon thread; ``run`` executes a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="bridge-tests", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 20.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


# --- servicers --------------------------------------------------------------------------


class Recorder:
    """What the servicers received, so tests can check what the bridge sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, dict[str, str]]] = []

    def record(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        metadata = {key: value for key, value in context.invocation_metadata() or ()}
        self.calls.append((method, request, metadata))

    def last(self, method: str) -> tuple[Any, dict[str, str]]:
        for name, request, metadata in reversed(self.calls):
            if name == method:
                return request, metadata
        raise AssertionError(f"{method} was never called")


class FakeQuery(query_grpc.QueryServiceServicer):
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def Query(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.recorder.record("Query", request, context)
        if request.query == "fail-whole":
            raise errors.ReachstoreError(
                errors.INCOMPLETE_RESULT,
                "1 of 2 namespaces did not answer and allow_partial is false",
                structured_data={"namespaces_failed": 1},
                details=[
                    errors.make_failure(
                        errors.NAMESPACE_TIMEOUT,
                        namespace="slow",
                        structured_data={"timeout_ms": 2000},
                    )
                ],
            )
        if request.query == "hang":
            await asyncio.Event().wait()  # never set: the caller's deadline ends the call
        if request.query == "no-details":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "plain status, no details")
        if request.query == "crash":
            raise RuntimeError("servicer bug")
        failed = [
            errors.make_failure(
                errors.NAMESPACE_UNAVAILABLE, namespace=name, structured_data={"namespace": name}
            )
            for name in request.namespaces
            if name == "nope"
        ]
        ok = [name for name in request.namespaces if name != "nope"]
        results = [
            query_pb2.QueryResult(
                namespace=name,
                document_id="doc-1",
                chunk_index=0,
                text="hello",
                score=0.75,
                metadata={"lang": "en"},
            )
            for name in ok
        ]
        meta = query_pb2.QueryMeta(
            coverage_ratio=len(ok) / len(request.namespaces) if request.namespaces else 0.0,
            namespaces_queried=list(request.namespaces),
            namespaces_succeeded=ok,
            namespaces_failed=failed,
        )
        return query_pb2.QueryResponse(results=results, meta=meta)

    async def GetDocument(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.recorder.record("GetDocument", request, context)
        document = query_pb2.Document(
            namespace=request.namespace,
            document_id=request.document_id,
            text="body",
            metadata={"k": "v"},
            chunk_count=1,
        )
        return query_pb2.GetDocumentResponse(document=document)

    async def ListDocuments(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.recorder.record("ListDocuments", request, context)
        return query_pb2.ListDocumentsResponse(next_page_token="")


def _task(task_id: str, **fields: Any) -> Any:
    return ingest_pb2.Task(
        task_id=task_id,
        namespace="demo",
        document_id="doc-1",
        created_at="2024-01-01T00:00:00Z",
        **fields,
    )


class FakeIngest(ingest_grpc.IngestServiceServicer):
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def CreateNamespace(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.recorder.record("CreateNamespace", request, context)
        if request.name == "busy":
            raise errors.ReachstoreError(
                errors.SERVICE_UNAVAILABLE, "store is busy", retry_after_ms=2500
            )
        if request.name == "exists":
            raise errors.ReachstoreError(
                errors.NAMESPACE_EXISTS, structured_data={"name": "exists"}
            )
        namespace = ingest_pb2.Namespace(
            name=request.name, embedding_model="m", dimension=512, document_count=2**40
        )
        return ingest_pb2.CreateNamespaceResponse(namespace=namespace)

    async def CreateDocument(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.recorder.record("CreateDocument", request, context)
        task = _task(
            "task-1",
            state=ingest_pb2.TASK_STATE_QUEUED,
            agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_POLL_AGAIN,
            poll_after_ms=500,
        )
        return ingest_pb2.CreateDocumentResponse(task=task)

    async def BatchCreateDocuments(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.recorder.record("BatchCreateDocuments", request, context)
        return ingest_pb2.BatchCreateDocumentsResponse(
            meta=ingest_pb2.BatchMeta(coverage_ratio=1.0)
        )

    async def GetTask(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.recorder.record("GetTask", request, context)
        if request.task_id == "missing":
            raise errors.ReachstoreError(
                errors.TASK_NOT_FOUND, structured_data={"task_id": "missing"}
            )
        task = _task(
            request.task_id,
            state=ingest_pb2.TASK_STATE_COMPLETED,
            percent=100,
            agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_DONE_FETCH_DOC,
        )
        return ingest_pb2.GetTaskResponse(task=task)

    async def CancelTask(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.recorder.record("CancelTask", request, context)
        return ingest_pb2.CancelTaskResponse(
            task=_task(request.task_id, state=ingest_pb2.TASK_STATE_CANCELLED)
        )


# --- servers ----------------------------------------------------------------------------


@dataclasses.dataclass
class Backend:
    server: grpc.aio.Server
    address: str
    health: Any
    recorder: Recorder

    def settings(self) -> Settings:
        return Settings.from_env(
            {
                "REACHSTORE_QUERY_ADDR": self.address,
                "REACHSTORE_INGEST_ADDR": self.address,
                "REACHSTORE_REACH_ADDR": self.address,
                "REACHSTORE_AUDIT_ADDR": self.address,
                "REACHSTORE_LISTEN": "127.0.0.1:0",
            }
        )


async def _start_backend() -> Backend:
    recorder = Recorder()
    registrars = [
        lambda server: query_grpc.add_QueryServiceServicer_to_server(FakeQuery(recorder), server),
        lambda server: ingest_grpc.add_IngestServiceServicer_to_server(
            FakeIngest(recorder), server
        ),
        # Hosted so that a bridge started with its default services finds every backend
        # serving; their methods answer UNIMPLEMENTED.
        lambda server: key_grpc.add_KeyServiceServicer_to_server(
            key_grpc.KeyServiceServicer(), server
        ),
        lambda server: reach_grpc.add_ReachServiceServicer_to_server(
            reach_grpc.ReachServiceServicer(), server
        ),
        lambda server: audit_grpc.add_AuditServiceServicer_to_server(
            audit_grpc.AuditServiceServicer(), server
        ),
    ]
    server, port, health = create_server(registrars, SERVICE_NAMES, "127.0.0.1:0")
    await server.start()
    await mark_serving(health, SERVICE_NAMES)
    return Backend(server, f"127.0.0.1:{port}", health, recorder)


@dataclasses.dataclass
class BridgeServer:
    url: str
    server: uvicorn.Server
    task: asyncio.Task[None]


async def _start_bridge(app: Any) -> BridgeServer:
    sock = bind_socket("127.0.0.1:0")
    server = uvicorn.Server(uvicorn_config(app, sock))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    host, port = sock.getsockname()[:2]
    return BridgeServer(f"http://{host}:{port}", server, task)


async def _stop_bridge(bridge: BridgeServer) -> None:
    bridge.server.should_exit = True
    await bridge.task


@pytest.fixture(scope="session")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="session")
def backend(loop: LoopThread) -> Iterator[Backend]:
    started = loop.run(_start_backend())
    yield started
    loop.run(started.server.stop(None))


BridgeFactory = Callable[..., BridgeServer]


@pytest.fixture
def start_bridge(loop: LoopThread) -> Iterator[BridgeFactory]:
    """Starts bridges (``create_app`` keyword arguments pass through); stops them after."""
    started: list[BridgeServer] = []

    def start(settings: Settings, **options: Any) -> BridgeServer:
        options.setdefault("services", BACKEND_SERVICES)
        bridge = loop.run(_start_bridge(create_app(settings, **options)))
        started.append(bridge)
        # Readiness: the socket is already listening, so the first answer proves uvicorn
        # and the app's lifespan are up. No sleeping.
        assert httpx.get(bridge.url + "/healthz", timeout=10).status_code == 200
        return bridge

    yield start
    for bridge in started:
        loop.run(_stop_bridge(bridge))


@pytest.fixture(scope="session")
def bridge(loop: LoopThread, backend: Backend) -> Iterator[BridgeServer]:
    app = create_app(backend.settings(), deadline_s=5.0, services=BACKEND_SERVICES)
    started = loop.run(_start_bridge(app))
    assert httpx.get(started.url + "/healthz", timeout=10).status_code == 200
    yield started
    loop.run(_stop_bridge(started))


@pytest.fixture
def client(bridge: BridgeServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=bridge.url, timeout=10) as http:
        yield http


@pytest.fixture
def private_backend(loop: LoopThread) -> Iterator[Backend]:
    """A backend a test may stop or mark unhealthy without disturbing the others."""
    started = loop.run(_start_backend())
    yield started
    loop.run(started.server.stop(None))


# --- a synthetic proto for codec corners the real contracts do not use ----------------

_SAMPLE_PROTO = """
name: "bridgetest/sample.proto"
package: "bridgetest"
dependency: "google/protobuf/struct.proto"
dependency: "google/api/annotations.proto"
syntax: "proto3"
message_type {
  name: "Sample"
  field { name: "u64" number: 1 label: LABEL_OPTIONAL type: TYPE_UINT64 }
  field { name: "f32" number: 2 label: LABEL_OPTIONAL type: TYPE_FLOAT }
  field { name: "raw" number: 3 label: LABEL_OPTIONAL type: TYPE_BYTES }
  field { name: "by_id" number: 4 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".bridgetest.Sample.ByIdEntry" }
  field { name: "flags" number: 5 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".bridgetest.Sample.FlagsEntry" }
  field { name: "text_choice" number: 6 label: LABEL_OPTIONAL type: TYPE_STRING oneof_index: 0 }
  field { name: "number_choice" number: 7 label: LABEL_OPTIONAL type: TYPE_INT32 oneof_index: 0 }
  field { name: "data" number: 8 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Struct" }
  field { name: "child" number: 9 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".bridgetest.Sample" }
  field { name: "mode" number: 10 label: LABEL_OPTIONAL type: TYPE_ENUM
          type_name: ".bridgetest.HTTPMode" }
  nested_type {
    name: "ByIdEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_INT32 }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING }
  }
  nested_type {
    name: "FlagsEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_BOOL }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE
            type_name: ".bridgetest.Sample" }
  }
  oneof_decl { name: "choice" }
}
enum_type {
  name: "HTTPMode"
  value { name: "HTTP_MODE_UNSPECIFIED" number: 0 }
  value { name: "HTTP_MODE_FAST_LANE" number: 1 }
}
service {
  name: "SampleService"
  method { name: "Nested" input_type: ".bridgetest.Sample" output_type: ".bridgetest.Sample"
           options { [google.api.http] { get: "/x/{child.u64}/{raw=**}" } } }
  method { name: "NoRule" input_type: ".bridgetest.Sample" output_type: ".bridgetest.Sample" }
}
service {
  name: "BrokenService"
  method { name: "Unsupported" input_type: ".bridgetest.Sample" output_type: ".bridgetest.Sample"
           options { [google.api.http] { get: "/x/{child=a/*}" } } }
}
"""


@pytest.fixture(scope="session")
def sample_file() -> Any:
    """The synthetic file descriptor (added once to the default pool)."""
    pool = descriptor_pool.Default()
    with contextlib.suppress(KeyError):
        return pool.FindFileByName("bridgetest/sample.proto")
    from google.api import annotations_pb2  # registers the http extension for parsing

    assert annotations_pb2.http is not None
    proto = text_format.Parse(_SAMPLE_PROTO, descriptor_pb2.FileDescriptorProto())
    return pool.AddSerializedFile(proto.SerializeToString())

"""The audit outbox cannot be jammed by what a `write` caller sends, nor by a row the audit
service refuses. Each attack comes from outside a real `reachstore up` (gRPC and HTTP
calls, or rows written straight into its database); then a later event must still reach
the trail."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import sqlalchemy
from google.protobuf import json_format

from reachstore.audit.v1 import audit_service_pb2 as audit_pb
from reachstore.audit.v1 import audit_service_pb2_grpc as audit_grpc
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore_server.audit.signing import PrivateKey
from tests.e2e.processes import ServiceProcess, shipper_key
from tests.e2e.system import RunningSystem

ARRIVAL_TIMEOUT_S = 60.0
# The most an event's stored parameters may take (the outbox caps drafts well below this).
MAX_PARAMS_JSON = 64 * 1024


@pytest.fixture(scope="module")
def jam(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    running = RunningSystem(tmp_path_factory.mktemp("outbox-jam"))
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def http(jam: RunningSystem) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=jam.http_url, timeout=60.0) as client:
        yield client


@pytest.fixture(scope="module")
def engine(jam: RunningSystem) -> Iterator[sqlalchemy.Engine]:
    made = sqlalchemy.create_engine(f"sqlite:///{jam.data_dir / 'reachstore.db'}")
    yield made
    made.dispose()


def _trace() -> str:
    return uuid.uuid4().hex


def _traceparent(trace: str) -> str:
    return f"00-{trace}-b7ad6b7169203331-01"


def _traced(trace: str) -> dict[str, str]:
    return {"traceparent": _traceparent(trace)}


def _arrived(http: httpx.Client, trace: str, timeout: float = ARRIVAL_TIMEOUT_S) -> list[Any]:
    """The trail's events of the call traced ``trace``, once at least one has arrived."""
    deadline = time.monotonic() + timeout
    while True:
        reply = http.get("/api/v1/audit/events", params={"trace_id": trace, "page_size": 100})
        assert reply.status_code == 200, reply.text
        events = reply.json()["events"]
        if events:
            return list(events)
        if time.monotonic() > deadline:
            raise AssertionError(f"no event of trace {trace} reached the trail in {timeout:.0f} s")
        time.sleep(0.25)


def _later_event_arrives(http: httpx.Client, name: str) -> None:
    trace = _trace()
    made = http.post("/api/v1/namespaces", json={"name": name}, headers=_traced(trace))
    assert made.status_code == 200, made.text
    [event] = _arrived(http, trace)
    assert (event["method"], event["result_status"]) == ("CreateNamespace", "ok")


def _outbox_rows(engine: sqlalchemy.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(sqlalchemy.text("SELECT * FROM audit_outbox ORDER BY id")).mappings()
        return [dict(r) for r in rows]


def _grpc_arrived(stub: audit_grpc.AuditServiceStub, trace: str) -> list[Any]:
    deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
    while True:
        events = stub.ListEvents(audit_pb.ListEventsRequest(trace_id=trace), timeout=30).events
        if events:
            return list(events)
        if time.monotonic() > deadline:
            raise AssertionError(f"no event of trace {trace} reached the trail")
        time.sleep(0.25)


def test_refused_batches_with_huge_maps_do_not_jam_the_outbox(tmp_path: Path) -> None:
    """The issue's attack: refused batches (the namespace does not exist) whose metadata
    maps are huge. Their drafts kept every key; a few such events waiting together (the
    audit service is down meanwhile) made one shipper batch larger than the 32 MiB gRPC
    message limit, refused, and sent again for ever in front of every later event."""
    audit_addr = f"127.0.0.1:{ServiceProcess.free_port()}"
    env = {
        "REACHSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'reachstore.db'}",
        "REACHSTORE_DATA_DIR": str(tmp_path / "data"),
        "REACHSTORE_AUDIT_ADDR": audit_addr,
        "REACHSTORE_AUDIT_SIGNING_KEY": PrivateKey.generate().pem(),
    }
    # Services started one by one ship with a deployment service key, as `up` does.
    env["REACHSTORE_AUDIT_SHIPPER_KEY"] = shipper_key(env)
    ingest = ServiceProcess(
        "reachstore_server.ingest.main",
        "reachstore.ingest.v1.IngestService",
        tmp_path,
        "ingest",
        env,
    ).start()
    audit = ServiceProcess(
        "reachstore_server.audit.main",
        "reachstore.audit.v1.AuditService",
        tmp_path,
        "audit",
        env,
        address=audit_addr,
    )
    try:
        traces = []
        with grpc.insecure_channel(
            ingest.address, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]
        ) as channel:
            stub = ingest_grpc.IngestServiceStub(channel)
            shapes = [(450_000, 1)] + [(20_000, 400)] * 4  # ~6.8 MB and ~8.4 MB per event
            for keys, width in shapes:
                request = ingest_pb.BatchCreateDocumentsRequest(namespace="nowhere")
                document = request.documents.add(document_id="d", text="hello")
                document.metadata.update({f"k{i:06d}": "v" * width for i in range(keys)})
                trace = _trace()
                traces.append(trace)
                with pytest.raises(grpc.RpcError) as refused:
                    stub.BatchCreateDocuments(
                        request, timeout=120, metadata=[("traceparent", _traceparent(trace))]
                    )
                assert refused.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
            later = _trace()
            stub.CreateNamespace(
                ingest_pb.CreateNamespaceRequest(name="after-the-maps"),
                timeout=30,
                metadata=[("traceparent", _traceparent(later))],
            )
        audit.start()
        trail = audit_grpc.AuditServiceStub(audit.channel)
        [event] = _grpc_arrived(trail, later)
        assert (event.method, event.result_status) == ("CreateNamespace", "ok")
        for trace in traces:
            [event] = _grpc_arrived(trail, trace)
            assert event.result_status == "NOT_FOUND"
            params = json_format.MessageToDict(event.params)
            assert len(json.dumps(params)) <= MAX_PARAMS_JSON, len(json.dumps(params))
            [document] = params["documents"]
            # A map keeps its first keys and says how many more there were.
            assert len(document["metadata"]) <= 101, len(document["metadata"])
            assert "more_keys" in json.dumps(document["metadata"])
    finally:
        audit.stop()
        ingest.stop()


def test_a_batch_with_one_nul_document_fails_that_document_and_the_outbox_flows(
    http: httpx.Client,
) -> None:
    http.post("/api/v1/namespaces", json={"name": "nul-docs"})
    documents = [{"document_id": f"d{i}", "text": f"document number {i}"} for i in range(100)]
    documents[3]["text"] = "before\u0000after"
    trace = _trace()
    reply = http.post(
        "/api/v1/namespaces/nul-docs/documents:batchCreate",
        json={"documents": documents},
        headers=_traced(trace),
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    [failure] = body["meta"]["failed"]
    assert (failure["batch_index"], failure["document_id"]) == (3, "d3"), failure
    assert failure["category"] == "permanent" and not failure["retryable"], failure
    assert failure["structured_data"]["field"] == "documents[3].text", failure
    outcomes = [r["outcome"] for r in body["results"]]
    assert outcomes.count("accepted") == 99 and outcomes[3] == "failed", outcomes
    assert body["meta"]["coverage_ratio"] == pytest.approx(0.99)
    # The call's own event reaches the trail (its NUL does not travel with it) ...
    [event] = _arrived(http, trace)
    assert event["method"] == "BatchCreateDocuments" and "\u0000" not in json.dumps(event)
    # ... and so does a later one.
    _later_event_arrives(http, "after-the-nul-batch")


CORPUS = Path(__file__).resolve().parents[3] / "shared" / "bench" / "corpus-10k.jsonl"
NUL_CHUNK = "pb-07fbe3bd845445cc"


def test_the_shared_corpus_batch_with_its_nul_chunk_loses_only_that_chunk(
    http: httpx.Client,
) -> None:
    """The benchmark ingests the corpus in batches of 100 per namespace, as shipped; the
    batch holding the corpus's one chunk with NUL characters was refused whole."""
    # The shared corpus lies beside every checkout CI runs; its absence is a failure.
    assert CORPUS.is_file(), f"the shared benchmark corpus is missing: {CORPUS}"
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    [chunk] = [r for r in rows if r["id"] == NUL_CHUNK]
    same = [r for r in rows if r["namespace"] == chunk["namespace"]]
    start = same.index(chunk) // 100 * 100
    batch = same[start : start + 100]
    http.post("/api/v1/namespaces", json={"name": "corpus-nul"})
    reply = http.post(
        "/api/v1/namespaces/corpus-nul/documents:batchCreate",
        json={"documents": [{"document_id": r["id"], "text": r["text"]} for r in batch]},
    )
    assert reply.status_code == 200, reply.text
    [failure] = reply.json()["meta"]["failed"]
    index = batch.index(chunk)
    assert failure["document_id"] == NUL_CHUNK and failure["batch_index"] == index
    assert failure["structured_data"]["field"] == f"documents[{index}].text"
    accepted = [r for r in reply.json()["results"] if r["outcome"] == "accepted"]
    assert len(accepted) == len(batch) - 1


def test_a_nul_in_the_batch_envelope_refuses_the_whole_batch(http: httpx.Client) -> None:
    trace = _trace()
    reply = http.post(
        "/api/v1/namespaces/nul%00docs/documents:batchCreate",
        json={"documents": [{"text": "fine"}]},
        headers=_traced(trace),
    )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["structured_data"]["field"] == "namespace"
    [event] = _arrived(http, trace)
    assert event["result_status"] == "INVALID_ARGUMENT"
    _later_event_arrives(http, "after-the-nul-envelope")


# Rows no audit service takes, written straight into the outbox as a bug, a crash in the
# middle of a write or an older release could have left them.
_GOOD = {
    "event_id": "",
    "time": "2026-12-01T00:00:00.000Z",
    "tenant": "default",
    "caller_key_id": "",
    "service": "ingest",
    "method": "Poisoned",
    "idempotency_key": "",
    "params": {},
    "result_status": "ok",
    "error_code": "",
    "category": "",
    "duration_ms": 1,
    "trace_id": "",
}
POISON = {
    "a NUL in its parameters": {**_GOOD, "params": {"note": "a\u0000b"}},
    "a time that is no time": {**_GOOD, "time": "yesterday"},
    "an unknown category": {**_GOOD, "category": "nonsense"},
    "no event id": {k: v for k, v in _GOOD.items() if k != "event_id"},
}


def _poison(engine: sqlalchemy.Engine) -> None:
    rows = [
        json.dumps({**e, "event_id": uuid.uuid4().hex} if "event_id" in e else e)
        for e in POISON.values()
    ]
    rows.append("{not json")
    with engine.begin() as conn:
        for text in rows:
            conn.execute(
                sqlalchemy.text(
                    "INSERT INTO audit_outbox (service, event_json, created_at, attempts) "
                    "VALUES ('ingest', :text, :now, 0)"
                ),
                {"text": text, "now": time.time()},
            )


def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        held = dict(part.split("=", 1) for part in line[len(name) + 1 : line.index("}")].split(","))
        if all(held.get(k) == f'"{v}"' for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_rows_the_audit_service_refuses_are_set_aside_and_later_events_flow(
    jam: RunningSystem, http: httpx.Client, engine: sqlalchemy.Engine
) -> None:
    _poison(engine)
    _later_event_arrives(http, "after-the-poison")
    # Set aside, not deleted: an operator can still read them, with the reason.
    deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
    while True:
        kept = [r for r in _outbox_rows(engine) if r.get("quarantined_at") is not None]
        if len(kept) >= len(POISON) + 1 or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert len(kept) == len(POISON) + 1, kept
    reasons = sorted(r["refusal"].split(":", 1)[0] for r in kept)
    # Refused by the audit service (the NUL, the time), or never sendable (the other three).
    assert reasons == ["INVALID_ARGUMENT"] * 2 + ["cannot be encoded as an event"] * 3, kept
    metrics = httpx.get(jam.metrics_url, timeout=10).text
    assert (
        _metric(metrics, "reachstore_audit_outbox_events", service="ingest", state="quarantined")
        == len(POISON) + 1
    )
    # The shipper is still running: one more event after all that.
    _later_event_arrives(http, "after-the-quarantine")

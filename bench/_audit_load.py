"""The audit service under test and its gRPC clients.

``AuditProcess`` is ``python -m reachstore_server.audit.main`` (``ServiceProcess`` of
``_reach_service.py``) with a signing key the benchmark also holds, so it can verify in
its own process what the service signed. No API keys are required, but the keyless
caller may neither append nor read other tenants' trails: once the service is up, the
process mints a deployment service key (``service_key``: appends for every tenant) and an
auditor key (``auditor_key``: verifies every tenant) in its database. Each append also
stores one event of its own, in the service tenant's chain.

``run_appends`` sends prepared ``AppendEventsRequest`` messages from ``concurrency``
threads over one channel, each thread taking the next request when its previous one was
acknowledged; a failed call is counted and sent again. ``append_twice`` and
``grpc_verify`` are the correctness checks.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
from _reach_load import machine_cpu_seconds
from _reach_service import ServiceProcess
from _stats import cpu_seconds, latency_stats

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore.audit.v1 import audit_service_pb2_grpc as pb_grpc
from reachstore_server.common.auth import SERVICE_TENANT
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.keys import KeySpec, KeyStore
from reachstore_server.storage.schema import migrate_to_head

CALL_TIMEOUT_SECONDS = 120.0
ATTEMPTS = 10  # calls per batch before the run fails
_REQUEST_ID = re.compile(r"[;,]? *request_id=[0-9a-f]+")
CHANNEL_OPTIONS = [("grpc.max_send_message_length", 16 * 2**20)]


class AuditProcess(ServiceProcess):
    """``reachstore_server.audit.main`` signing with ``audit_key`` (Ed25519, PEM)."""

    module = "reachstore_server.audit.main"
    name = "audit"

    def __init__(
        self,
        folder: Path,
        database_url: str,
        log_level: str,
        audit_key: str,
        witness_file: Path | None = None,
    ):
        super().__init__(folder, database_url, log_level)
        self.audit_key = audit_key
        self.witness_file = witness_file

    def own_settings(self) -> dict[str, str]:
        settings = {
            "REACHSTORE_AUDIT_SIGNING_KEY": self.audit_key,
            # Call-rate limits count calls, not events: the defaults (20 write calls/s per
            # key, 50 per tenant) would measure the limit, not the audit path.
            "REACHSTORE_LIMIT_KEY_WRITE_RATE": "0",
            "REACHSTORE_LIMIT_TENANT_WRITE_RATE": "0",
        }
        if self.witness_file is not None:
            settings["REACHSTORE_AUDIT_WITNESS_FILE"] = str(self.witness_file)
        return settings

    def start(self) -> AuditProcess:
        # The services refuse a database without the schema: build it as `reachstore
        # migrate` does, before the process starts.
        engine = make_engine(self.database_url)
        try:
            migrate_to_head(engine)
        finally:
            engine.dispose()
        super().start()
        engine = make_engine(self.database_url)
        try:
            keys = KeyStore(make_sessions(engine))
            _, self.service_key = keys.create(
                SERVICE_TENANT, KeySpec("bench: appends", ("internal",))
            )
            _, self.auditor_key = keys.create(
                "bench", KeySpec("bench: verifies", ("read", "auditor"))
            )
        finally:
            engine.dispose()
        return self


def bearer(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]


def _send(
    stub: pb_grpc.AuditServiceStub,
    request: pb.AppendEventsRequest,
    failures: list[str],
    api_key: str,
) -> int:
    """One batch, sent again after a failed call as a shipper would (the events stay in its
    outbox; ids make a resend safe), up to ``ATTEMPTS`` calls. Each failure's status and
    details go to ``failures``. Returns the events stored."""
    for _ in range(ATTEMPTS):
        try:
            reply = stub.AppendEvents(
                request, timeout=CALL_TIMEOUT_SECONDS, metadata=bearer(api_key)
            )
        except grpc.RpcError as exc:
            details = _REQUEST_ID.sub("", exc.details() or "")
            failures.append(f"{exc.code().name}: {details}")
            continue
        if reply.appended + reply.duplicates != len(request.events):
            raise RuntimeError(
                f"AppendEvents acknowledged {reply.appended} + {reply.duplicates} duplicates "
                f"of {len(request.events)} events"
            )
        return reply.appended
    raise RuntimeError(f"AppendEvents failed {ATTEMPTS} times in a row: {failures[-1]}")


def run_appends(
    address: str,
    requests: Sequence[pb.AppendEventsRequest],
    concurrency: int,
    pids: Mapping[str, int],
    api_key: str,
) -> dict[str, Any]:
    """Sends every request; events/s from the first call to the last reply, latency of a
    batch (first call to acknowledgement, resends included), CPU per 1000 events by
    process, failed calls. Fails unless every event was stored exactly once."""
    lock = threading.Lock()
    pending = iter(requests)
    samples: list[float] = []
    failures: list[str] = []
    stored = 0
    problems: list[BaseException] = []
    start = threading.Barrier(concurrency + 1)

    def worker(stub: pb_grpc.AuditServiceStub) -> None:
        nonlocal stored
        start.wait()
        while not problems:
            with lock:
                request = next(pending, None)
            if request is None:
                return
            t = time.perf_counter()
            try:
                appended = _send(stub, request, failures, api_key)
            except BaseException as exc:  # noqa: BLE001 - raised again by the caller
                problems.append(exc)
                return
            elapsed = time.perf_counter() - t
            with lock:
                samples.append(elapsed)
                stored += appended

    with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.AuditServiceStub(channel)
        threads = [
            threading.Thread(target=worker, args=(stub,), daemon=True) for _ in range(concurrency)
        ]
        for thread in threads:
            thread.start()
        cpu_before, machine_before = cpu_seconds(pids), machine_cpu_seconds()
        started = time.perf_counter()
        start.wait()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        cpu_after, machine_after = cpu_seconds(pids), machine_cpu_seconds()
    if problems:
        raise RuntimeError(f"AppendEvents failed: {problems[0]}") from problems[0]
    events = sum(len(r.events) for r in requests)
    if stored != events:
        raise RuntimeError(f"AppendEvents stored {stored} of {events} new events")
    cpu = {name: cpu_after[name] - cpu_before[name] for name in cpu_after}
    return {
        "events": events,
        "seconds": seconds,
        "events_per_s": events / seconds,
        "latency": latency_stats(samples),
        "samples": samples,
        "calls": len(requests) + len(failures),
        "failed_calls": len(failures),
        "failures": dict(Counter(failures)),
        "cpu_ms_per_1k_events": {name: 1e6 * s / events for name, s in cpu.items()},
        "busy_cores": {
            "ours": sum(cpu.values()) / seconds,
            "machine": (machine_after - machine_before) / seconds,
        },
    }


def append_twice(address: str, request: pb.AppendEventsRequest, api_key: str) -> dict[str, Any]:
    """Sends the same batch of new events twice: the first time all are stored, the second
    time all are acknowledged as duplicates and none stored."""
    with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.AuditServiceStub(channel)
        first = stub.AppendEvents(request, timeout=CALL_TIMEOUT_SECONDS, metadata=bearer(api_key))
        second = stub.AppendEvents(request, timeout=CALL_TIMEOUT_SECONDS, metadata=bearer(api_key))
    n = len(request.events)
    result = {
        "events": n,
        "first": {"appended": first.appended, "duplicates": first.duplicates},
        "second": {"appended": second.appended, "duplicates": second.duplicates},
    }
    result["ok"] = (first.appended, first.duplicates, second.appended, second.duplicates) == (
        n,
        0,
        0,
        n,
    )
    return result


def grpc_verify(address: str, api_key: str) -> dict[str, Any]:
    """``Verify(all_tenants=true)``, timed from the client."""
    with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.AuditServiceStub(channel)
        t = time.perf_counter()
        reply = stub.Verify(
            pb.VerifyRequest(all_tenants=True), timeout=600.0, metadata=bearer(api_key)
        )
        seconds = time.perf_counter() - t
    return {
        "ok": reply.ok,
        "events_checked": reply.events_checked,
        "checkpoints_checked": reply.checkpoints_checked,
        "tenants_checked": reply.tenants_checked,
        "first_break": reply.first_break.detail if not reply.ok else "",
        "seconds": seconds,
    }


def service_errors(log_path: Path) -> dict[str, int]:
    """How often each exception ended an error line of the service's JSON log (the last
    line of its traceback), so a failed call's cause shows without the whole log."""
    causes: Counter[str] = Counter()
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("level") in ("error", "critical"):
            exc = str(entry.get("exc") or entry.get("msg", ""))
            causes[exc.strip().splitlines()[-1][:300] if exc.strip() else "?"] += 1
    return dict(causes)

"""The audit benchmark's events, and the two measurements made inside the benchmark
process: the database's raw insert rate and ``AuditStore.append`` without gRPC.

An event looks like what the reach service records for a ``SubmitTask``: a caller key id,
service ``reach``, method ``SubmitTask``, an idempotency key, about 230 bytes of masked
parameters (a phone and a name as ``[kind:hex]`` tokens, an order number, an amount), a
32-hex trace id. Events go round robin over the tenants, so every batch holds events of
each tenant, as a service's outbox shipper sends them.

``EventSource.fields`` gives the stored fields of new events (what the audit service keeps
of an ``AuditEvent`` after masking; masking these parameters again changes nothing), and
``to_request`` the same events as an ``AppendEventsRequest``.

The raw insert ceiling writes rows of exactly those columns (plus position and two 64-hex
hashes, random: nothing is hashed or chained) into ``bench_raw_audit_events``, a copy of
``audit_events`` with the same columns, types, unique constraints and indexes, with
SQLAlchemy Core (``connection.execute(insert, rows)``: one executemany) in transactions of
the batch size, on an engine made as the services make theirs (``make_engine``: WAL and
``synchronous=NORMAL`` on SQLite).
"""

from __future__ import annotations

import datetime as dt
import itertools
import secrets
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from _reach_load import machine_cpu_seconds
from _stats import latency_stats
from google.protobuf import json_format
from sqlalchemy import Engine, MetaData, Table

from reachstore.audit.v1 import audit_service_pb2 as pb
from reachstore_server.audit.chain import HASHED_FIELDS, canonical_json
from reachstore_server.audit.store import AuditStore
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.storage.audit_models import AuditEventRow

RAW_TABLE = "bench_raw_audit_events"
STORED_FIELDS = tuple(f for f in HASHED_FIELDS if f != "prev_hash")


class EventSource:
    """New, unique events, round robin over ``tenants``."""

    def __init__(self, tenants: Sequence[str]) -> None:
        self.tenants = tuple(tenants)
        self._numbers = itertools.count(1)
        self._caller_key_ids = [secrets.token_hex(8) for _ in self.tenants]

    def fields(self, count: int) -> list[dict[str, Any]]:
        now = rfc3339(dt.datetime.now(dt.UTC))
        out = []
        for _ in range(count):
            n = next(self._numbers)
            t = n % len(self.tenants)
            order = f"ORD-2026-{n:08d}"
            params = {
                "channel": "sms-cn",
                "action_type": "notify",
                "entity": "order",
                "params": {
                    "phone": f"[phone:{secrets.token_hex(4)}]",
                    "customer_name": f"[field:{secrets.token_hex(4)}]",
                    "order_id": order,
                    "template": "order_shipped",
                    "amount": f"{(n % 997) + 0.5:.2f}",
                    "currency": "CNY",
                },
            }
            out.append(
                {
                    "event_id": uuid.uuid4().hex,
                    "time": now,
                    "tenant": self.tenants[t],
                    "caller_key_id": self._caller_key_ids[t],
                    "service": "reach",
                    "method": "SubmitTask",
                    "idempotency_key": f"notify:{order}",
                    "params_json": canonical_json(params),
                    "result_status": "ok",
                    "error_code": "",
                    "category": "",
                    "duration_ms": 3 + n % 40,
                    "trace_id": secrets.token_hex(16),
                }
            )
        return out


def to_request(events: Sequence[dict[str, Any]]) -> pb.AppendEventsRequest:
    request = pb.AppendEventsRequest()
    for e in events:
        message = request.events.add(
            **{k: e[k] for k in STORED_FIELDS if k not in ("params_json", "category")}
        )
        json_format.Parse(e["params_json"], message.params)
    return request


def raw_table() -> Table:
    """A copy of ``audit_events`` named ``RAW_TABLE``, its constraints and indexes renamed
    (PostgreSQL names them per schema). The append-only triggers are not copied; they fire
    on UPDATE and DELETE only."""
    table = AuditEventRow.__table__.to_metadata(MetaData(), name=RAW_TABLE)
    for item in [*table.indexes, *table.constraints]:
        if isinstance(item.name, str):
            item.name = item.name.replace("audit_events", RAW_TABLE)
    return table


def raw_rows(events: Sequence[dict[str, Any]], seqs: dict[str, int]) -> list[dict[str, Any]]:
    """``events`` as rows of the raw table: next position of their tenant in ``seqs``
    (updated), random hashes."""
    rows = []
    for e in events:
        seqs[e["tenant"]] = seqs.get(e["tenant"], 0) + 1
        rows.append(
            {
                **e,
                "seq": seqs[e["tenant"]],
                "prev_hash": secrets.token_hex(32),
                "hash": secrets.token_hex(32),
            }
        )
    return rows


def _timed_batches(
    items: Sequence[Any], batch: int, write: Callable[[Sequence[Any]], object]
) -> dict[str, Any]:
    """Calls ``write`` on consecutive slices of ``batch`` items; rate and latency."""
    samples = []
    cpu, machine = time.process_time(), machine_cpu_seconds()
    started = time.perf_counter()
    for i in range(0, len(items), batch):
        t = time.perf_counter()
        write(items[i : i + batch])
        samples.append(time.perf_counter() - t)
    seconds = time.perf_counter() - started
    cpu, machine = time.process_time() - cpu, machine_cpu_seconds() - machine
    return {
        "events": len(items),
        "seconds": seconds,
        "events_per_s": len(items) / seconds,
        "latency": latency_stats(samples),
        "samples": samples,
        "cpu_ms_per_1k_events": {"bench": 1e6 * cpu / len(items)},
        "busy_cores": {"ours": cpu / seconds, "machine": machine / seconds},
    }


def merged(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One measurement of several slices of the same row (``_timed_batches`` or
    ``run_appends`` results): events and seconds added up, latency over every sample, CPU
    per 1000 events weighted by events, busy cores by seconds."""
    events = sum(p["events"] for p in parts)
    seconds = sum(p["seconds"] for p in parts)
    samples = [s for p in parts for s in p["samples"]]
    result: dict[str, Any] = {
        "events": events,
        "seconds": seconds,
        "events_per_s": events / seconds,
        "latency": latency_stats(samples),
        "samples": samples,
        "cpu_ms_per_1k_events": {
            name: sum(p["cpu_ms_per_1k_events"][name] * p["events"] for p in parts) / events
            for name in parts[0]["cpu_ms_per_1k_events"]
        },
        "busy_cores": {
            name: sum(p["busy_cores"][name] * p["seconds"] for p in parts) / seconds
            for name in parts[0]["busy_cores"]
        },
    }
    if "calls" in parts[0]:
        result["calls"] = sum(p["calls"] for p in parts)
        result["failed_calls"] = sum(p["failed_calls"] for p in parts)
        failures: Counter[str] = Counter()
        for p in parts:
            failures.update(p["failures"])
        result["failures"] = dict(failures)
    return result


def measure_raw_insert(
    engine: Engine, table: Table, rows: Sequence[dict[str, Any]], batch: int
) -> dict[str, Any]:
    """Inserts ``rows`` in transactions of ``batch`` rows, one executemany each."""
    statement = table.insert()

    def write(chunk: Sequence[dict[str, Any]]) -> None:
        with engine.begin() as conn:
            conn.execute(statement, list(chunk))

    return _timed_batches(rows, batch, write)


def measure_store_append(
    store: AuditStore, events: Sequence[dict[str, Any]], batch: int
) -> dict[str, Any]:
    """``AuditStore.append`` of consecutive batches in this thread; fails unless each
    batch was stored whole."""

    def write(chunk: Sequence[dict[str, Any]]) -> None:
        appended, duplicates = store.append(chunk)
        if (appended, duplicates) != (len(chunk), 0):
            raise RuntimeError(
                f"AuditStore.append stored {appended} of {len(chunk)} new events "
                f"({duplicates} duplicates)"
            )

    return _timed_batches(events, batch, write)


def batches(events: Sequence[dict[str, Any]], batch: int) -> Iterator[Sequence[dict[str, Any]]]:
    for i in range(0, len(events), batch):
        yield events[i : i + batch]

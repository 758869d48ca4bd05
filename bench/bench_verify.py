"""Verify of one long chain on PostgreSQL, next to the raw read of the same rows.

Fills a fresh database with one tenant's chain of ``--events`` events (1,000,000 by
default; written with COPY, hashed by ``reachstore_server/audit/chain.py``, one signed checkpoint
at its head), then, in the same run:

- **raw read**: the hashed columns of every row through one psycopg server-side cursor,
  in chain order, doing nothing with them: what reading the chain as rows costs;
- **raw COPY read**: the same rows as ``COPY … TO STDOUT`` text, each line taken off the
  connection by libpq and dropped: what reading the chain costs at the least, and how
  verify's workers read it on PostgreSQL (``reachstore_server/audit/copy_walk.py``);
- **verify**: ``AuditStore.verify`` of the chain, as the audit service and
  ``reachstore audit verify`` run it (in parallel over the cores when the chain is long:
  ``reachstore_server/audit/parallel_walk.py``), also with ``REACHSTORE_AUDIT_VERIFY_PARALLEL_MIN``
  set above the chain's length, which walks it in one process.

Prints the seconds of each (medians of ``--repeat``), the ratio of verify to the raw read,
and whether verify found the chain whole. Not a test: nothing here passes or fails on time.

    .venv/bin/python bench/bench_verify.py [--events 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "clients" / "python")]

from bench._reach_service import postgres_database  # noqa: E402
from reachstore_server.audit.chain import GENESIS, HASHED_FIELDS, event_hash  # noqa: E402
from reachstore_server.audit.parallel_walk import MIN_EVENTS_SETTING  # noqa: E402
from reachstore_server.audit.signing import CheckpointKeys, PrivateKey  # noqa: E402
from reachstore_server.audit.store import AuditStore  # noqa: E402
from reachstore_server.storage.engine import make_engine, make_sessions  # noqa: E402
from reachstore_server.storage.schema import migrate_to_head  # noqa: E402

TENANT = "bench"
COLUMNS = (*HASHED_FIELDS, "seq", "hash")


def _events(count: int) -> Iterator[dict[str, object]]:
    prev = GENESIS
    start = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    for seq in range(1, count + 1):
        at = start + dt.timedelta(milliseconds=seq)
        event: dict[str, object] = {
            "event_id": uuid.uuid4().hex,
            "time": at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z",
            "tenant": TENANT,
            "caller_key_id": "0123456789abcdef",
            "service": "reach",
            "method": "SubmitTask",
            "idempotency_key": f"{TENANT}/e:{seq:032x}/notify/{seq:016x}/2026-12-01",
            "params_json": json.dumps(
                {"channel": "sms", "n": seq, "to": "[phone:1a2b3c4d]"},
                sort_keys=True,
                separators=(",", ":"),
            ),
            "result_status": "ok",
            "error_code": "",
            "category": "",
            "duration_ms": seq % 50,
            "trace_id": f"{seq:032x}",
            "prev_hash": prev,
        }
        event["hash"] = prev = event_hash(event)
        event["seq"] = seq
        yield event


def fill(url: str, count: int, key: PrivateKey) -> None:
    engine = make_engine(url)
    migrate_to_head(engine)
    engine.dispose()
    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq) as conn:
        with conn.cursor().copy(f"COPY audit_events ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for event in _events(count):
                copy.write_row([event[c] for c in COLUMNS])
        conn.commit()
        conn.execute("ANALYZE audit_events")
        conn.commit()
    engine = make_engine(url)
    AuditStore(make_sessions(engine)).checkpoint(key)
    engine.dispose()


def raw_read(url: str) -> tuple[float, int]:
    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    started = time.perf_counter()
    rows = 0
    with psycopg.connect(libpq) as conn, conn.cursor(name="raw") as cursor:
        cursor.itersize = 5000
        cursor.execute(
            f"SELECT {', '.join(COLUMNS)} FROM audit_events WHERE tenant = %s ORDER BY seq",
            (TENANT,),
        )
        for _ in cursor:
            rows += 1
    return time.perf_counter() - started, rows


def raw_copy_read(url: str) -> tuple[float, int]:
    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    started = time.perf_counter()
    rows = 0
    with psycopg.connect(libpq) as conn:
        select = f"SELECT {', '.join(COLUMNS)} FROM audit_events WHERE tenant = '{TENANT}'"
        conn.pgconn.send_query(f"COPY ({select} ORDER BY seq) TO STDOUT".encode())
        conn.pgconn.get_result()
        while conn.pgconn.get_copy_data(0)[0] >= 0:
            rows += 1
        while conn.pgconn.get_result() is not None:
            pass
    return time.perf_counter() - started, rows


def verify(url: str, keys: CheckpointKeys) -> tuple[float, int, bool, int]:
    engine = make_engine(url)
    store = AuditStore(make_sessions(engine))
    started = time.perf_counter()
    report = store.verify(TENANT, keys)
    seconds = time.perf_counter() - started
    engine.dispose()
    return seconds, report.events_checked, report.first_break is None, report.walkers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    key = PrivateKey.generate()
    keys = CheckpointKeys(key.public)
    with postgres_database(args.postgres_url) as (url, version):
        started = time.perf_counter()
        fill(url, args.events, key)
        print(f"PostgreSQL {version}: {args.events:,} events written in "
              f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        raws, copies, parallel, single = [], [], [], []
        for _ in range(args.repeat):
            raws.append(raw_read(url)[0])
            copies.append(raw_copy_read(url)[0])
            parallel.append(verify(url, keys))
            os.environ[MIN_EVENTS_SETTING] = str(args.events + 1)
            single.append(verify(url, keys))
            del os.environ[MIN_EVENTS_SETTING]
        raw_s = statistics.median(raws)
        copy_s = statistics.median(copies)
        print(f"raw read of the same rows:   {raw_s:6.2f} s  ({args.events / raw_s:,.0f} rows/s)")
        print(f"raw COPY read of them:       {copy_s:6.2f} s  ({args.events / copy_s:,.0f} rows/s)")
        for name, runs in (("verify", parallel), ("verify in one process", single)):
            seconds = statistics.median(r[0] for r in runs)
            whole = all(r[2] and r[1] == args.events for r in runs)
            print(
                f"{name + ':':28s} {seconds:6.2f} s  ({seconds / raw_s:.2f}x the raw read, "
                f"{seconds / copy_s:.2f}x the raw COPY read; "
                f"{runs[0][3]} walker(s); chain whole: {whole})"
            )


if __name__ == "__main__":
    main()

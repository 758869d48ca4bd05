"""Throughput benchmark of reachstore's audit trail: events appended per second through
``AppendEvents`` in batches, next to the raw insert rate of the same database in the same
run, and the cost of verifying the chains per million events, on SQLite and PostgreSQL.

Run from the repository root (the default run takes about 2.5 minutes on 2 cores):

    .venv/bin/python bench/bench_audit.py [--json PATH]

Quick run: ``--events 2000 --warmup 500 --skip-postgres``.

For each engine - SQLite (a file in the temp folder) and PostgreSQL (a new database
``reachstore_bench_<hex>`` on ``--postgres-url``, dropped at the end) - it starts
``python -m reachstore_server.audit.main`` on that database (``_audit_load.py``), waits for its
gRPC health check, sends ``--warmup`` events untimed, then measures, for each batch size B
of ``--batch``, ``--events`` events each time (``_audit_events.py`` describes them: about
230 bytes of masked parameters, round robin over ``--tenants`` tenants):

1. raw insert: rows of the same columns and sizes into a copy of ``audit_events`` (same
   unique constraints and indexes) in the same database, from this process, with SQLAlchemy
   Core (one executemany per transaction of B rows, one thread; no hashing, no chain): the
   ceiling the other rows are divided by;
2. ``AuditStore.append`` in this process, one thread, no gRPC: the chain (head row locked,
   one SHA-256 per event) and the database, without the service around them;
3. ``AppendEvents`` through gRPC, at each ``--concurrency``: c threads on one channel,
   each sending its next prepared batch of B events when its previous call returned.
   Reported: events/s from the first call to the last reply, its ratio to the raw insert
   rate at the same B, p50/p99 of one call, CPU per 1000 events by process, busy cores.

Each row of 2 and 3 is measured in ``--rounds`` slices, each right after a slice of the
raw insert at the same B, and divided by the raw rate of those slices: on a machine that
other work shares, a row and its ceiling then see the same load (measured one after the
other, the ratio moved by a factor of two between runs minutes apart). The raw insert rows
add up every raw slice at their B.

Then the correctness checks: one new batch sent twice (the second reply must say all
duplicates, nothing stored); the stored events per tenant must equal those sent. Then
verification: a checkpoint of every chain is signed in this process with the service's
key (``AuditStore.checkpoint``), ``AuditStore.verify`` checks every tenant's chain in this
process, timed, and ``Verify(all_tenants)`` through gRPC checks them again in the service;
both must report ok over every stored event. Seconds per million events are extrapolated
linearly from the events checked (verify reads the chain in keyset pages of 5000, so its
cost per event does not grow with the chain). ``--profile-verify N`` also runs cProfile
over one more in-process verify of the longest chain and prints its top N functions by
own time (after the timed runs, so they do not pay for it).

Everything runs on this machine: the client threads, the audit process and the database
share its cores. It writes only to its temp folder (removed at the end), to the scratch
PostgreSQL database and to ``--json``. Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import shlex
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # for reachstore_server.*; bench/ itself is sys.path[0]

import psycopg  # noqa: E402
import sqlalchemy  # noqa: E402
from _audit_events import (  # noqa: E402
    EventSource,
    batches,
    measure_raw_insert,
    measure_store_append,
    merged,
    raw_rows,
    raw_table,
    to_request,
)
from _audit_load import (  # noqa: E402
    AuditProcess,
    append_twice,
    grpc_verify,
    run_appends,
    service_errors,
)
from _reach_service import add_engine_arguments, postgres_database  # noqa: E402
from _report import machine_facts  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from reachstore_server.audit.signing import CheckpointKeys, PrivateKey  # noqa: E402
from reachstore_server.audit.store import VERIFY_PAGE, AuditStore  # noqa: E402
from reachstore_server.common.auth import SERVICE_TENANT  # noqa: E402
from reachstore_server.common.config import ENVIRONMENT  # noqa: E402
from reachstore_server.storage.audit_models import AuditEventRow  # noqa: E402
from reachstore_server.storage.engine import make_engine, make_sessions  # noqa: E402

TENANT_NAMES = ("acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _numbers(text: str, what: str, top: int) -> list[int]:
    values = [int(x) for x in text.split(",") if x.strip()]
    if not values or min(values) < 1 or max(values) > top:
        raise ValueError(f"{what}: comma-separated numbers from 1 to {top}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="reachstore audit benchmark: AppendEvents events/s next to the raw insert "
        "rate, and verification cost per million events, on SQLite and PostgreSQL (see the "
        "module docstring)"
    )
    parser.add_argument("--batch", default="100,500", help="comma-separated events per batch")
    parser.add_argument("--concurrency", default="1,4", help="comma-separated client threads")
    parser.add_argument(
        "--events",
        type=int,
        default=40_000,
        help="events of each measured row (each batch size, concurrency and path)",
    )
    parser.add_argument("--warmup", type=int, default=2_000, help="untimed events per engine")
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="slices of each row, each after a slice of the raw insert at the same batch size",
    )
    parser.add_argument("--tenants", type=int, default=4, help="tenants the events go to")
    add_engine_arguments(parser, "audit")
    parser.add_argument(
        "--profile-verify",
        type=int,
        default=0,
        metavar="N",
        help="cProfile one more in-process verify of the longest chain; print the top N",
    )
    parser.add_argument(
        "--witness",
        action="store_true",
        help="the audit service keeps a file witness (every append's heads signed and "
        "fsynced before the reply): what witnessing costs",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON result here")
    args = parser.parse_args(argv)
    try:
        args.batches = _numbers(args.batch, "--batch", 1000)  # MAX_BATCH of AppendEvents
        args.concurrencies = _numbers(args.concurrency, "--concurrency", 256)
    except ValueError as exc:
        parser.error(str(exc))
    if args.events < max(args.batches) or args.warmup < 0 or args.rounds < 1:
        parser.error(
            "--events must be at least the largest batch, --warmup at least 0, --rounds 1 or more"
        )
    if not 1 <= args.tenants <= len(TENANT_NAMES):
        parser.error(f"--tenants: 1 to {len(TENANT_NAMES)}")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def _database(engine: str, folder: Path, args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if engine == "sqlite":
        yield f"sqlite:///{folder / 'audit.db'}", f"SQLite {sqlite3.sqlite_version}"
    else:
        with postgres_database(args.postgres_url) as (url, version):
            yield url, f"PostgreSQL {version}"


def _row(engine: str, path: str, batch: int, concurrency: int, m: dict[str, Any]) -> dict:
    return {"engine": engine, "path": path, "batch": batch, "concurrency": concurrency, **m}


def _requests(source: EventSource, count: int, batch: int, sent: Counter[str]) -> list[Any]:
    events = source.fields(count)
    sent.update(e["tenant"] for e in events)
    return [to_request(chunk) for chunk in batches(events, batch)]


def _slices(events: int, rounds: int, batch: int) -> list[int]:
    """``events`` cut into about ``rounds`` slices, each a whole number of batches."""
    per = max(batch, events // rounds // batch * batch)
    sizes = [per] * (events // per)
    if events % per:
        sizes.append(events % per)
    return sizes


def measure_writes(
    engine: str,
    args: argparse.Namespace,
    audit: AuditProcess,
    db: sqlalchemy.Engine,
    store: AuditStore,
    source: EventSource,
    sent: Counter[str],
    report: dict[str, Any],
) -> None:
    """AuditStore.append, then AppendEvents, at each batch size (and concurrency), each
    row in ``--rounds`` slices that alternate with slices of the raw insert at the same
    batch size: a row and its ceiling see the same machine, whatever else runs on it."""
    pids = {"audit": audit.pid}
    top = max(args.batches)
    log(f"{engine}: warm-up, {args.warmup} events through AppendEvents ...")
    if args.warmup:
        run_appends(
            audit.address, _requests(source, args.warmup, top, sent), 1, pids, audit.service_key
        )
    table = raw_table()
    table.create(db)
    seqs: dict[str, int] = {}
    if args.warmup:
        measure_raw_insert(db, table, raw_rows(source.fields(args.warmup), seqs), top)
        events = source.fields(min(args.warmup, top))
        measure_store_append(store, events, top)
        sent.update(e["tenant"] for e in events)

    raw_slices: dict[int, list[dict[str, Any]]] = {}
    rows: list[dict[str, Any]] = []

    def alternate(batch: int, concurrency: int, path: str, measure: Any) -> dict[str, Any]:
        raws, parts = [], []
        for n in _slices(args.events, args.rounds, batch):
            raws.append(measure_raw_insert(db, table, raw_rows(source.fields(n), seqs), batch))
            parts.append(measure(n))
        raw_slices.setdefault(batch, []).extend(raws)
        row = _row(engine, path, batch, concurrency, merged(parts))
        row["raw_events_per_s"] = merged(raws)["events_per_s"]
        row["ratio_to_raw"] = row["events_per_s"] / row["raw_events_per_s"]
        rows.append(row)
        return row

    for batch in args.batches:

        def store_slice(n: int, batch: int = batch) -> dict[str, Any]:
            events = source.fields(n)
            sent.update(e["tenant"] for e in events)
            return measure_store_append(store, events, batch)

        m = alternate(batch, 1, "AuditStore.append", store_slice)
        log(
            f"    AuditStore.append B={batch}: {m['events_per_s']:.0f} events/s "
            f"(raw insert {m['raw_events_per_s']:.0f} in the same rounds)"
        )
    for batch in args.batches:
        for conc in args.concurrencies:

            def grpc_slice(n: int, batch: int = batch, conc: int = conc) -> dict[str, Any]:
                requests = _requests(source, n, batch, sent)
                return run_appends(audit.address, requests, conc, pids, audit.service_key)

            m = alternate(batch, conc, "AppendEvents gRPC", grpc_slice)
            log(
                f"    AppendEvents B={batch} c={conc}: {m['events_per_s']:.0f} events/s "
                f"(raw insert {m['raw_events_per_s']:.0f} in the same rounds), "
                f"p50 {m['latency']['p50_ms']:.1f} ms, {m['failed_calls']} failed calls"
            )
    table.drop(db)
    for batch in args.batches:
        raw = _row(engine, "raw insert", batch, 1, merged(raw_slices[batch]))
        raw["raw_events_per_s"], raw["ratio_to_raw"] = raw["events_per_s"], 1.0
        report["runs"].append(raw)
        log(f"    raw insert B={batch}: {raw['events_per_s']:.0f} rows/s over every round")
    report["runs"].extend(rows)
    for run in report["runs"]:
        run.pop("samples", None)


def check_store(
    engine: str,
    audit: AuditProcess,
    db: sqlalchemy.Engine,
    source: EventSource,
    sent: Counter[str],
    batch: int,
) -> dict[str, Any]:
    """One batch sent twice; then the stored events per tenant against those sent."""
    events = source.fields(batch)
    twice = append_twice(audit.address, to_request(events), audit.service_key)
    sent.update(e["tenant"] for e in events)
    with db.connect() as conn:
        stored: dict[str, int] = dict(
            conn.execute(
                select(AuditEventRow.tenant, func.count()).group_by(AuditEventRow.tenant)
            ).all()
        )
        params_bytes = conn.execute(select(func.avg(func.length(AuditEventRow.params_json))))
        params_avg = float(params_bytes.scalar_one())
    # The service tenant's chain holds one event per append call (its own record).
    records = stored.pop(SERVICE_TENANT, 0)
    counts_ok = stored == dict(sent)
    log(
        f"{engine}: batch sent twice {'ok' if twice['ok'] else 'WRONG'}; stored "
        f"{sum(stored.values())} events for {sum(sent.values())} sent "
        f"({'ok' if counts_ok else 'WRONG'})"
    )
    return {
        "append_twice": twice,
        "stored_by_tenant": stored,
        "sent_by_tenant": dict(sent),
        "counts_ok": counts_ok,
        "append_records": records,
        "params_json_avg_bytes": params_avg,
    }


def measure_verify(
    engine: str,
    args: argparse.Namespace,
    audit: AuditProcess,
    store: AuditStore,
    signer: PrivateKey,
    stored: dict[str, int],
) -> dict[str, Any]:
    """A checkpoint of every chain, then every chain verified here and through gRPC."""
    signed = store.checkpoint(signer)
    log(
        f"{engine}: signed {len(signed)} checkpoint(s); verifying {sum(stored.values())} events ..."
    )
    tenants = []
    wall = cpu = 0.0
    for tenant in sorted(stored):
        t, c = time.perf_counter(), time.process_time()
        found = store.verify(tenant, CheckpointKeys(signer.public))
        seconds, cpu_s = time.perf_counter() - t, time.process_time() - c
        wall, cpu = wall + seconds, cpu + cpu_s
        tenants.append(
            {
                "tenant": tenant,
                "events_checked": found.events_checked,
                "checkpoints_checked": found.checkpoints_checked,
                "seconds": seconds,
                "ok": found.first_break is None and found.events_checked == stored[tenant],
                "first_break": found.first_break.detail if found.first_break else "",
            }
        )
    checked = sum(t["events_checked"] for t in tenants)
    here = {
        "events_checked": checked,
        "checkpoints_checked": sum(t["checkpoints_checked"] for t in tenants),
        "seconds": wall,
        "cpu_seconds": cpu,
        "events_per_s": checked / wall,
        "seconds_per_million": 1e6 * wall / checked,
        "cpu_seconds_per_million": 1e6 * cpu / checked,
        "ok": all(t["ok"] for t in tenants),
        "tenants": tenants,
    }
    log(f"    in-process: {here['events_per_s']:.0f} events/s ({'ok' if here['ok'] else 'WRONG'})")
    remote = grpc_verify(audit.address, audit.auditor_key)
    remote["events_per_s"] = remote["events_checked"] / remote["seconds"]
    remote["seconds_per_million"] = 1e6 * remote["seconds"] / remote["events_checked"]
    remote["ok"] = remote["ok"] and remote["events_checked"] == checked
    verdict = "ok" if remote["ok"] else "WRONG"
    log(f"    gRPC Verify: {remote['events_per_s']:.0f} events/s ({verdict})")
    result = {"in_process": here, "grpc": remote}
    if args.profile_verify:
        longest = max(stored, key=lambda tenant: stored[tenant])
        result["profile"] = profile_verify(store, signer, longest, args.profile_verify)
    return result


def profile_verify(store: AuditStore, signer: PrivateKey, tenant: str, top: int) -> dict[str, Any]:
    profiler = cProfile.Profile()
    t = time.perf_counter()
    profiler.enable()
    found = store.verify(tenant, CheckpointKeys(signer.public))
    profiler.disable()
    seconds = time.perf_counter() - t
    stats = pstats.Stats(profiler)
    total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)  # type: ignore[attr-defined]
    own = [
        {
            "function": f"{Path(file).name}:{line}({name})" if line else name,
            "own_share": r[2] / total,
            "calls": r[1],
        }
        for (file, line, name), r in rows[:top]
    ]
    return {
        "tenant": tenant,
        "events": found.events_checked,
        "seconds_under_profiler": seconds,
        "own_time_by_function": own,
    }


def run_engine(engine: str, args: argparse.Namespace, tmp_root: Path, report: dict) -> None:
    folder = tmp_root / engine
    folder.mkdir()
    with _database(engine, folder, args) as (url, version):
        report["engines"][engine] = version
        signer = PrivateKey.generate()
        witness = folder / "witness.log" if args.witness else None
        audit = AuditProcess(folder, url, args.log_level, signer.pem(), witness)
        log(f"{engine}: starting the audit service ({version}) ...")
        t = time.perf_counter()
        audit.start()
        db = make_engine(url)
        try:
            log(f"    healthy after {time.perf_counter() - t:.1f} s")
            store = AuditStore(make_sessions(db))
            source = EventSource(TENANT_NAMES[: args.tenants])
            sent: Counter[str] = Counter()
            measure_writes(engine, args, audit, db, store, source, sent, report)
            checks = check_store(engine, audit, db, source, sent, max(args.batches))
            report["checks"][engine] = checks
            chains = {**checks["stored_by_tenant"], SERVICE_TENANT: checks["append_records"]}
            report["verify"][engine] = measure_verify(engine, args, audit, store, signer, chains)
        except Exception:
            log(f"{engine}: the run failed; the audit service's log ends with:\n{audit.log_tail()}")
            raise
        finally:
            db.dispose()
            code = audit.stop()
            report["service_exit_codes"][engine] = code
            report["service_logs"][engine] = {
                "levels": audit.log_levels(),
                "first_problem": audit.first_problem(),
                "errors": service_errors(audit.log_path),
            }
            if code not in (0, None):
                log(f"{engine}: the audit service exited with {code}:\n{audit.log_tail()}")


WIDTH = 118


def print_report(r: dict[str, Any]) -> None:
    p = print
    m, c = r["machine"], r["config"]
    p("=" * WIDTH)
    p("reachstore audit benchmark: AppendEvents next to raw inserts; verification per 1M events")
    p(f"command : {c['command']}")
    p(
        f"machine : nproc={m['nproc']} (os.cpu_count={m['cpu_count']}), {m['cpu_model']}, "
        f"{m['mem_gb']} GB RAM"
    )
    p(
        f"          load average {c['loadavg_at_start']} at start, {c['loadavg_at_end']} at the "
        "end (other work on the machine counts too)"
    )
    p(
        f"          Python {m['python']}, grpcio {m['grpcio']}, SQLAlchemy {c['sqlalchemy']}, "
        f"psycopg {c['psycopg']}; {'; '.join(r['engines'].values())}"
    )
    p("          the client threads, the audit process and the database share them")
    p(
        f"service : python -m reachstore_server.audit.main, log level {c['log_level']}, "
        "checkpoints every "
        f"{c['checkpoint_s']} s (default); no API keys (local caller)"
    )
    if c.get("witness_file"):
        p("          a file witness: every append's heads signed and fsynced before the reply")
    checks: dict[str, Any] = next(iter(r["checks"].values()), {})
    p(
        f"events  : service reach, method SubmitTask, caller key id, idempotency key, trace id, "
        f"params_json {checks.get('params_json_avg_bytes', float('nan')):.0f} B on average"
    )
    p(
        f"          (masked tokens); round robin over {c['tenants']} tenants, so every batch "
        f"holds events of each; {c['events']} events per row after {c['warmup']} untimed"
    )
    p("")
    _print_table(r["runs"])
    p("")
    p("raw insert: the same rows (64-hex hashes, no hashing, no chain) into a copy of")
    p("  audit_events with the same unique constraints and indexes, SQLAlchemy Core, one")
    p("  executemany per transaction of B rows, one thread in the benchmark process.")
    p("AuditStore.append: the store in the benchmark process, one thread, no gRPC, no masking.")
    p("AppendEvents: c client threads on one gRPC channel, each sending its next batch of B")
    p("  events when the previous call returned; the service masks the params again, hashes")
    p("  and chains each event, and stores the batch in one transaction.")
    p("ev/s: events / wall time of the row; ÷raw: over the raw insert rate at the same B measured")
    p(f"  in {r['config']['rounds']} slices alternating with the row's own (so both see the same")
    p("  machine; the raw insert rows add up every slice at that B); p50/p99: one batch")
    p("  (transaction / append / AppendEvents from its first call to")
    p("  its acknowledgement, resends included); failed: AppendEvents calls that returned an")
    p("  error (each batch is then sent again, as a shipper would). CPU ms per 1000 events: the")
    p("  audit process / this process (the client threads, or the insert / append itself); busy")
    p("  cores: those two / the whole machine (the rest is PostgreSQL and whatever else ran).")
    for run in runs_with_failures(r["runs"]):
        p(
            f"FAILED CALLS {run['engine']} B={run['batch']} c={run['concurrency']}: "
            f"{run['failed_calls']} of {run['calls']} calls: {run['failures']}"
        )
    p("")
    for engine, v in r["verify"].items():
        here, remote = v["in_process"], v["grpc"]
        p(
            f"VERIFY {engine}: {here['events_checked']} events in {len(here['tenants'])} chains, "
            f"{here['checkpoints_checked']} signed checkpoint(s)"
        )
        p(
            f"  AuditStore.verify in this process: {here['seconds']:.2f} s = "
            f"{here['events_per_s']:.0f} events/s -> {here['seconds_per_million']:.1f} s per 1M "
            f"events (CPU {here['cpu_seconds_per_million']:.1f} s per 1M)  "
            f"{'ok' if here['ok'] else 'NOT OK'}"
        )
        p(
            f"  Verify(all_tenants) through gRPC: {remote['seconds']:.2f} s = "
            f"{remote['events_per_s']:.0f} events/s -> {remote['seconds_per_million']:.1f} s "
            f"per 1M events  {'ok' if remote['ok'] else 'NOT OK'}"
        )
        longest = max(t["events_checked"] for t in here["tenants"])
        p(
            f"  (per 1M: extrapolated linearly from these events; the longest chain here is "
            f"{longest} events, read in pages of {VERIFY_PAGE})"
        )
    p("")
    for engine, ch in r["checks"].items():
        tw = ch["append_twice"]
        p(
            f"CHECKS {engine}: a batch of {tw['events']} new events sent twice: first "
            f"{tw['first']['appended']} appended / {tw['first']['duplicates']} duplicates, "
            f"then {tw['second']['appended']} / {tw['second']['duplicates']}  "
            f"{'ok' if tw['ok'] else 'WRONG'}"
        )
        p(
            f"  stored {sum(ch['stored_by_tenant'].values())} events for "
            f"{sum(ch['sent_by_tenant'].values())} sent, per tenant equal: "
            f"{'ok' if ch['counts_ok'] else 'WRONG'}"
        )
    logs = "; ".join(
        f"{engine}: "
        + (", ".join(f"{n} {level}" for level, n in sorted(v["levels"].items())) or "empty")
        for engine, v in r["service_logs"].items()
    )
    p(f"Service log lines: {logs}; exit codes {r['service_exit_codes']}.")
    for engine, v in r["service_logs"].items():
        if v["first_problem"]:
            p(f"  first warning/error of {engine}: {v['first_problem']}")
        for cause, n in v["errors"].items():
            p(f"  {engine}: {n} error line(s) ending in: {cause}")
    for engine, v in r["verify"].items():
        if "profile" in v:
            prof = v["profile"]
            p("")
            p(
                f"cProfile of AuditStore.verify, {engine}, tenant {prof['tenant']}: "
                f"{prof['events']} events in {prof['seconds_under_profiler']:.2f} s under the "
                "profiler; own time by function:"
            )
            for f in prof["own_time_by_function"]:
                p(f"  {100 * f['own_share']:5.1f} %  {f['calls']:>9d} calls  {f['function']}")
    p("")
    p(f"total run time {r['total_seconds']:.0f} s")
    p("=" * WIDTH)


def _print_table(runs: Sequence[dict[str, Any]]) -> None:
    p = print
    nan = float("nan")
    p(
        f"{'engine':10s} {'path':18s} {'B':>4s} {'c':>2s} {'events':>6s} {'seconds':>7s} "
        f"{'ev/s':>7s} {'÷raw':>5s} {'p50 ms':>7s} {'p99 ms':>7s} {'failed':>6s}  "
        f"{'CPU ms/1k ev':>13s}  {'busy cores':>11s}"
    )
    for run in runs:
        lat = run["latency"]
        cpu, busy = run["cpu_ms_per_1k_events"], run["busy_cores"]
        audit_cpu = f"{cpu['audit']:6.0f}" if "audit" in cpu else f"{'-':>6s}"
        cpu_text = f"{audit_cpu} /{cpu['bench']:5.0f}"
        busy_text = f"{busy['ours']:4.2f} / {busy['machine']:4.2f}"
        failed = str(run["failed_calls"]) if "failed_calls" in run else "-"
        p(
            f"{run['engine']:10s} {run['path']:18s} {run['batch']:4d} {run['concurrency']:2d} "
            f"{run['events']:6d} {run['seconds']:7.2f} {run['events_per_s']:7.0f} "
            f"{run.get('ratio_to_raw', nan):5.2f} {lat['p50_ms']:7.1f} {lat['p99_ms']:7.1f} "
            f"{failed:>6s}  {cpu_text:>13s}  {busy_text:>11s}"
        )


def runs_with_failures(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [run for run in runs if run.get("failed_calls")]


def _failures(report: dict[str, Any]) -> list[str]:
    failed = [
        f"{run['engine']}: {run['failed_calls']} AppendEvents calls failed at B={run['batch']} "
        f"c={run['concurrency']} (sent again, stored once; see FAILED CALLS above)"
        for run in runs_with_failures(report["runs"])
    ]
    for engine, ch in report["checks"].items():
        if not ch["append_twice"]["ok"]:
            failed.append(f"{engine}: the batch sent twice was not acknowledged as duplicates")
        if not ch["counts_ok"]:
            failed.append(f"{engine}: stored events per tenant differ from those sent")
    for engine, v in report["verify"].items():
        for where in ("in_process", "grpc"):
            if not v[where]["ok"]:
                failed.append(f"{engine}: verification ({where}) did not report ok")
    failed.extend(
        f"{engine}: the audit service exited with {code}"
        for engine, code in report["service_exit_codes"].items()
        if code != 0
    )
    return failed


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The finally blocks stop the processes; SIGTERM must unwind through them like Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.perf_counter()
    python = (
        os.path.relpath(sys.executable)
        if sys.executable.startswith(os.getcwd())
        else sys.executable
    )
    command = shlex.join([python, os.path.relpath(__file__), *sys.argv[1:]])
    tmp_root = Path(tempfile.mkdtemp(prefix="reachstore-bench-audit-"))
    report: dict[str, Any] = {
        "machine": machine_facts(),
        "config": {
            "command": command,
            "argv": sys.argv[1:],
            "loadavg_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "sqlalchemy": sqlalchemy.__version__,
            "psycopg": psycopg.__version__,
            "log_level": args.log_level,
            "checkpoint_s": ENVIRONMENT["REACHSTORE_AUDIT_CHECKPOINT_S"][0],
            "witness_file": args.witness,
            "batches": args.batches,
            "concurrencies": args.concurrencies,
            "events": args.events,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "tenants": args.tenants,
        },
        "engines": {},
        "runs": [],
        "checks": {},
        "verify": {},
        "service_exit_codes": {},
        "service_logs": {},
    }
    try:
        for engine in ["sqlite"] if args.skip_postgres else ["sqlite", "postgresql"]:
            run_engine(engine, args, tmp_root, report)
    except KeyboardInterrupt:
        log("interrupted; everything started was stopped")
        return 130
    except (RuntimeError, OSError, psycopg.Error, sqlalchemy.exc.SQLAlchemyError) as exc:
        log(f"failed: {exc}; everything started was stopped")
        return 1
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    report["total_seconds"] = time.perf_counter() - started
    report["config"]["loadavg_at_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print_report(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        log(f"wrote {args.json}")
    failed = _failures(report)
    for problem in failed:
        print(f"CHECK FAILED: {problem}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

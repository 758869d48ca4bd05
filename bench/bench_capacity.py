"""Capacity inputs, per replica: throughput of one query replica, one ingest service and
one reach worker on PostgreSQL; the database work each query, document and action costs
(``pg_stat_database`` deltas); and how storage grows with documents and actions (table
sizes, index snapshots and a query replica's memory at two sizes, extrapolated linearly).
``docs/CAPACITY.md`` turns these into replica counts for larger deployments.

Run from the repository root (about 8 minutes on 2 cores):

    .venv/bin/python bench/bench_capacity.py [--json PATH]

Two private databases (``reachstore_bench_<hex>`` on ``--postgres-url``, dropped at the
end), each with only the processes its measurement needs (``_fleet.py``), every one of
them shipping audit events to an audit service as in production:

1. Storage (audit, ingest, one query replica): ingest ``--docs-small`` corpus chunks as
   documents; let the replica catch up and snapshot; record table sizes, snapshot bytes
   and the replica's RSS. Measure the idle background for ``--idle-seconds``. Ingest up to
   ``--docs-large`` (timed: documents/s of one ingest service, with its DB work per
   document), record the sizes again: their slope is the growth per document. Then one
   query replica, closed loop, at each ``--concurrency`` (QPS, p50/p99) and the DB work per
   query over all of them.
2. Reach (audit, one reach worker, the webhook receiver): ``--actions-small`` actions,
   sizes; idle background; ``--actions-large`` in all (timed at ``--reach-concurrency``
   closed-loop clients: actions/s of one worker, DB work per action), sizes again. Every
   delivery is checked against the actions' keys.

DB work per operation = (counter delta - idle rate x seconds) / operations, where the idle
rate is the services' polling with no load (``_pg_work.py``). Audit throughput is not
re-measured: ``bench/bench_audit.py`` measures it (README, "Audit").
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))

import _mixed_ops as ops  # noqa: E402
import _pg_work as pgw  # noqa: E402
import _query_bench as qb  # noqa: E402
from _capacity_report import print_report  # noqa: E402
from _fleet import Fleet, add_fleet_arguments  # noqa: E402
from _memory import rss_mib  # noqa: E402
from _reach_load import run_load as run_actions  # noqa: E402
from _reach_service import postgres_database  # noqa: E402
from _report import machine_facts  # noqa: E402
from bench_reach import check_deliveries  # noqa: E402

from reachstore.ingest.v1 import ingest_service_pb2_grpc as igrpc  # noqa: E402
from reachstore.query.v1 import query_service_pb2_grpc as qgrpc  # noqa: E402

SNAPSHOT_WAIT_SECONDS = 8.0  # the query service writes snapshots every 5 s


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="per-replica capacity inputs (module docstring)")
    parser.add_argument("--docs-small", type=int, default=2000, help="first size (2000)")
    parser.add_argument("--docs-large", type=int, default=6000, help="second size (6000)")
    parser.add_argument("--queries", type=int, default=500, help="timed queries per concurrency")
    parser.add_argument("--concurrency", default="1,4,8", help="query clients (1,4,8)")
    parser.add_argument("--actions-small", type=int, default=1000, help="first size (1000)")
    parser.add_argument("--actions-large", type=int, default=3000, help="second size (3000)")
    parser.add_argument("--reach-concurrency", type=int, default=16, help="action clients (16)")
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="idle baseline (20)")
    add_fleet_arguments(parser)
    args = parser.parse_args(argv)
    args.concurrencies = [int(x) for x in args.concurrency.split(",") if x.strip()]
    if not 0 < args.docs_small < args.docs_large or not 0 < args.actions_small < args.actions_large:
        parser.error("need 0 < small < large for documents and actions")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def wait_outbox_empty(url: str, timeout: float = 120.0) -> None:
    """Until the audit shippers have delivered everything, so the events are counted in
    ``audit_events`` and not in the outbox."""
    deadline = time.monotonic() + timeout
    while pgw.row_counts(url, ["audit_outbox"])["audit_outbox"]:
        if time.monotonic() > deadline:
            raise RuntimeError("the audit outbox did not empty")
        time.sleep(0.5)


def idle_baseline(admin: str, db: str, seconds: float) -> dict[str, float]:
    before = pgw.settled_snapshot(admin, db)
    time.sleep(seconds)
    return pgw.delta(before, pgw.snapshot(admin, db))


def storage_sizes(url: str, replica: Any) -> dict[str, Any]:
    wait_outbox_empty(url)
    time.sleep(SNAPSHOT_WAIT_SECONDS)
    return {
        "tables": pgw.table_sizes(url),
        "snapshot_bytes": replica.snapshot_bytes,
        "query_rss_mib": rss_mib(replica.pid),
    }


def catch_up(replica: Any, corpus: ops.Corpus) -> None:
    """One query over every namespace makes the replica replay the change log."""
    with qb.connect_grpc(replica.address) as channel:
        qb.wait_until_served(qgrpc.QueryServiceStub(channel), corpus.names, corpus.queries[0])


def measure_storage(args: argparse.Namespace, root: Path, report: dict[str, Any]) -> None:
    per_ns_small = args.docs_small // 4
    corpus = ops.Corpus(args.corpus_dir, per_ns_small)
    small = per_ns_small * len(corpus.names)
    more = args.docs_large - small
    if more > len(corpus.live):
        raise SystemExit(f"--docs-large is more than the corpus's {small + len(corpus.live)}")
    with postgres_database(args.postgres_url) as (url, _), Fleet(root / "storage", url) as fleet:
        db = pgw.database_name(url)
        fleet.start(queries=1, ingest=True)
        replica = fleet.named("query")[0]
        log(f"storage: ingesting {small} documents ...")
        with fleet.channel("ingest") as channel:
            stub = igrpc.IngestServiceStub(channel)
            ops.preload(channel, corpus)
            catch_up(replica, corpus)
            sizes_small = storage_sizes(url, replica)
            log(f"    idle baseline {args.idle_seconds:.0f} s ...")
            idle = idle_baseline(args.postgres_url, db, args.idle_seconds)
            before = pgw.settled_snapshot(args.postgres_url, db)
            scans0 = pgw.table_scans(url)
            log(f"    ingesting {more} more (timed) ...")
            timed = ops.ingest_batches(stub, corpus.live_by_namespace(0, more))
            wait_outbox_empty(url)
            work = pgw.delta(before, pgw.settled_snapshot(args.postgres_url, db))
            scans = pgw.scans_per_operation(scans0, pgw.table_scans(url), more)
        chunks = pgw.row_counts(url, ["chunks", "documents"])
        catch_up(replica, corpus)
        sizes_large = storage_sizes(url, replica)
        report["ingest"] = {
            **timed,
            "docs_per_s": timed["documents"] / timed["seconds"],
            "db_per_document": pgw.per_operation(work, idle, timed["documents"]),
            "scans_per_document": scans,
        }
        report["storage_documents"] = {
            "small": {"documents": small, **sizes_small},
            "large": {"documents": small + more, **sizes_large, **chunks},
            "tables_per_document": pgw.growth_per_million(
                sizes_small["tables"], sizes_large["tables"], small, small + more
            ),
            "snapshot_bytes_per_document": (
                sizes_large["snapshot_bytes"] - sizes_small["snapshot_bytes"]
            )
            / more,
            "query_rss_mib_per_1000_documents": 1000
            * (sizes_large["query_rss_mib"] - sizes_small["query_rss_mib"])
            / more,
        }
        report["idle_per_second"] = {"storage": pgw.idle_rates(idle)}
        measure_queries(args, fleet, corpus, db, idle, report)


def measure_queries(
    args: argparse.Namespace,
    fleet: Fleet,
    corpus: ops.Corpus,
    db: str,
    idle: dict[str, float],
    report: dict[str, Any],
) -> None:
    replica = fleet.named("query")[0]
    pids = {"query": replica.pid}
    rows, total = [], 0
    with qb.connect_grpc(replica.address) as channel:
        factory = qb.grpc_factory(qgrpc.QueryServiceStub(channel), corpus.names)
        before = pgw.settled_snapshot(args.postgres_url, db)
        for conc in args.concurrencies:
            log(f"query: one replica, {conc} closed-loop clients ...")
            qb.run_load(factory, corpus.queries, 50, conc)  # warm-up
            run = qb.run_load(factory, corpus.queries, args.queries, conc, pids)
            rows.append(run["stats"])
            total += 50 + args.queries
        work = pgw.delta(before, pgw.settled_snapshot(args.postgres_url, db))
    report["connections"] = {"storage": pgw.connections(args.postgres_url, db)}
    report["query"] = {
        "rows": rows,
        "documents": report["storage_documents"]["large"]["documents"],
        "db_per_query": pgw.per_operation(work, idle, total),
    }


def measure_reach(args: argparse.Namespace, root: Path, report: dict[str, Any]) -> None:
    numbers = itertools.count()
    with postgres_database(args.postgres_url) as (url, _), Fleet(root / "reach", url) as fleet:
        db = pgw.database_name(url)
        fleet.start(reach=1)
        worker = fleet.named("reach")[0]
        pids = {"reach": worker.pid, "audit": fleet.processes["audit"].pid}
        conc = args.reach_concurrency
        log(f"reach: {args.actions_small} actions ...")
        first = run_actions([worker.address], conc, 0, args.actions_small, numbers, pids)
        sizes_small = {"tables": (wait_outbox_empty(url), pgw.table_sizes(url))[1]}
        log(f"    idle baseline {args.idle_seconds:.0f} s ...")
        idle = idle_baseline(args.postgres_url, db, args.idle_seconds)
        before = pgw.settled_snapshot(args.postgres_url, db)
        scans0 = pgw.table_scans(url)
        more = args.actions_large - args.actions_small
        log(f"    {more} more (timed, {conc} clients) ...")
        timed = run_actions([worker.address], conc, 0, more, numbers, pids)
        wait_outbox_empty(url)
        work = pgw.delta(before, pgw.settled_snapshot(args.postgres_url, db))
        scans = pgw.scans_per_operation(scans0, pgw.table_scans(url), more)
        sizes_large = {"tables": pgw.table_sizes(url)}
        assert fleet.receiver is not None
        deliveries = check_deliveries(fleet.receiver.stats(), first["keys"] + timed["keys"])
        counts = pgw.row_counts(url, ["reach_actions", "reach_history", "audit_events"])
        report["connections"]["reach"] = pgw.connections(args.postgres_url, db)
    timed.pop("keys")
    report["reach"] = {
        **timed,
        "deliveries": deliveries,
        "db_per_action": pgw.per_operation(work, idle, more),
        "scans_per_action": scans,
        "row_counts": counts,
    }
    report["storage_actions"] = {
        "small": {"actions": args.actions_small, **sizes_small},
        "large": {"actions": args.actions_large, **sizes_large},
        "tables_per_action": pgw.growth_per_million(
            sizes_small["tables"], sizes_large["tables"], args.actions_small, args.actions_large
        ),
    }
    report["idle_per_second"]["reach"] = pgw.idle_rates(idle)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="reachstore-capacity-"))
    report: dict[str, Any] = {
        "machine": machine_facts(),
        "config": {"argv": sys.argv[1:], "date": time.strftime("%Y-%m-%d")},
        "pg_stat_statements": pgw.statements_available(args.postgres_url),
    }
    try:
        measure_storage(args, root, report)
        measure_reach(args, root, report)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report["total_seconds"] = time.perf_counter() - started
    print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=float) + "\n")
    return 0 if report["reach"]["deliveries"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

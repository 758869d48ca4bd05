"""Sustained mixed load on a scaled-out deployment: queries, ingest and reach actions held
at fixed rates for several minutes on PostgreSQL, with two query replicas and two reach
workers; throughput, p50/p99 and errors per operation, actions by final state, and the
resident memory of every service process at the start, each minute and the end.

Run from the repository root (5 measured minutes plus about 4 of set-up and checks):

    .venv/bin/python bench/bench_sustained.py [--minutes 5] [--query-rate 20]
        [--ingest-rate 2] [--action-rate 5] [--json PATH]

What it does:

1. Creates a database ``reachstore_bench_<hex>`` on ``--postgres-url`` (dropped at the
   end) and starts, each as its own process (``_fleet.py``): the audit service, one ingest
   service, two reach workers (one webhook channel to a local receiver that counts
   deliveries by ``Idempotency-Key``) and two query replicas, each with its own data
   folder (index snapshots). Every service ships its audit events to the audit service.
2. Ingests ``--preload`` chunks of each corpus namespace and waits until both query
   replicas answer every namespace.
3. The clients reach the replicas the way the services and the SDK do: one gRPC channel
   per component over the comma-separated address list, balanced round robin
   (``reachstore_server/common/channels.py``), not through the bridge - the bridge would add its
   own process and CPU to a 2-core machine without changing what is measured here.
4. Open loop (``_open_loop.py``): each operation is fired at fixed times whatever the
   answers do, and latency counts from the scheduled time, so a stall shows as many slow
   samples rather than few (no coordinated omission). ``--warmup-seconds`` of the same
   load first, not counted. Operations (``_mixed_ops.py``): a query over the 4 namespaces;
   ``CreateDocument`` of a further corpus chunk (accept latency; accepted -> completed is
   read from the store afterwards); ``SubmitTask`` of one webhook action followed by
   ``GetTask`` long-polls until it has ended (submit latency, and scheduled -> succeeded).
5. Samples ``VmRSS`` of every process every 5 s (``_memory.py``) and its CPU time.
6. After the window: waits for every open request, every ingest task and every action;
   checks the receiver got exactly one delivery per action and the store holds exactly one
   receipt per action. Exits 1 if any request errored, an action did not succeed, or a
   delivery was lost or duplicated; 0 otherwise.

The figures are for this machine (2 shared cores, the load generator, PostgreSQL and the
seven processes on them): compare the ratios it prints (end/start RSS, last-minute over
first-minute p99), which are measured in the same run.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))

import _mixed_ops as ops  # noqa: E402
import _overload  # noqa: E402
import _pg_work as pgw  # noqa: E402
import _query_bench as qb  # noqa: E402
from _fleet import Fleet, add_fleet_arguments  # noqa: E402
from _memory import MemorySampler  # noqa: E402
from _open_loop import Outcome, Pacer, Recorder, run_pacers, summarize  # noqa: E402
from _reach_load import machine_cpu_seconds  # noqa: E402
from _reach_service import postgres_database  # noqa: E402
from _report import machine_facts  # noqa: E402
from _stats import cpu_seconds  # noqa: E402
from _sustained_report import print_report  # noqa: E402
from bench_reach import check_deliveries  # noqa: E402

from reachstore.ingest.v1 import ingest_service_pb2_grpc as igrpc  # noqa: E402
from reachstore.query.v1 import query_service_pb2_grpc as qgrpc  # noqa: E402

DRAIN_SECONDS = 180.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="sustained mixed load on 2 query replicas and 2 reach workers on "
        "PostgreSQL (see the module docstring)"
    )
    parser.add_argument("--minutes", type=float, default=5.0, help="measured minutes (5)")
    parser.add_argument("--warmup-seconds", type=float, default=30.0, help="unmeasured (30)")
    parser.add_argument("--query-rate", type=float, default=20.0, help="queries/s (20)")
    parser.add_argument("--ingest-rate", type=float, default=2.0, help="documents/s (2)")
    parser.add_argument("--action-rate", type=float, default=5.0, help="actions/s (5)")
    parser.add_argument(
        "--preload", type=int, default=1000, help="chunks of each namespace ingested first (1000)"
    )
    parser.add_argument(
        "--overload",
        type=float,
        default=0.0,
        help="overload mode: the rates for 60 s, then this many times them for "
        "--overload-seconds, then the rates again for 120 s (docs/OPERATIONS.md, "
        '"Load shedding"); replaces --minutes. 0 (default): off',
    )
    parser.add_argument(
        "--overload-seconds", type=float, default=120.0, help="length of the overload (120)"
    )
    add_fleet_arguments(parser)
    args = parser.parse_args(argv)
    args.plan = None
    if args.overload:
        if args.overload <= 1:
            parser.error("--overload must be more than 1 (times the rates)")
        args.plan = _overload.phases(60.0, args.overload_seconds, 120.0, args.overload)
        args.minutes = args.plan[-1].end / 60
    if args.minutes <= 0 or min(args.query_rate, args.ingest_rate, args.action_rate) < 0:
        parser.error("--minutes must be > 0 and the rates >= 0")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def wait_replicas_serving(fleet: Fleet, corpus: ops.Corpus) -> None:
    """Each query replica on its own, until it answers every namespace."""
    for replica in fleet.named("query"):
        with qb.connect_grpc(replica.address) as channel:
            qb.wait_until_served(qgrpc.QueryServiceStub(channel), corpus.names, corpus.queries[0])


def run_load(
    args: argparse.Namespace, fleet: Fleet, corpus: ops.Corpus, report: dict[str, Any]
) -> tuple[Recorder, ops.IngestOp, ops.ActionOp]:
    window = 60 * args.minutes
    with (
        fleet.channel("query") as qch,
        fleet.channel("ingest") as ich,
        fleet.channel("reach") as rch,
    ):
        t0 = time.perf_counter() + args.warmup_seconds
        recorder = Recorder(t0)
        query, ingest, action = (
            ops.QueryOp(qch, recorder, corpus),
            ops.IngestOp(ich, recorder, corpus),
            ops.ActionOp(rch, recorder),
        )
        operations = [
            (name, rate, fire)
            for name, rate, fire in (
                ("query", args.query_rate, query.fire),
                ("ingest", args.ingest_rate, ingest.fire),
                ("action", args.action_rate, action.fire),
            )
            if rate > 0
        ]
        if args.plan is None:
            pacers = [
                Pacer(name, rate, fire, t0, -args.warmup_seconds, window)
                for name, rate, fire in operations
            ]
        else:
            pacers = [
                pacer
                for name, rate, fire in operations
                for pacer in _overload.pacers(name, rate, fire, t0, args.warmup_seconds, args.plan)
            ]
        pids = fleet.pids()
        sampler = MemorySampler(pids, t0).start()
        runner = threading.Thread(target=run_pacers, args=(pacers,), daemon=True)
        log(f"load: {args.warmup_seconds:.0f} s warm-up, then {window:.0f} s measured ...")
        runner.start()
        time.sleep(max(0.0, t0 - time.perf_counter()))
        rss_start, cpu0, wall0 = sampler.sample(), cpu_seconds(pids), ops.epoch_now()
        machine0 = machine_cpu_seconds()
        for minute in range(1, int(args.minutes) + 1):
            time.sleep(max(0.0, t0 + 60 * minute - time.perf_counter()))
            log(f"  minute {minute}: {_progress(recorder, minute)}")
        runner.join()
        rss_end, cpu1 = sampler.sample(), cpu_seconds(pids)
        machine_busy = (machine_cpu_seconds() - machine0) / window
        connections = pgw.connections(args.postgres_url, pgw.database_name(fleet.database_url))
        sampler.stop()
        log(f"window over; waiting for {recorder.open} open requests ...")
        drained = recorder.wait_idle(DRAIN_SECONDS)
    report["window"] = {
        "seconds": window,
        "warmup_seconds": args.warmup_seconds,
        "drained": drained,
        "open_after_drain": recorder.open,
        "pacer_max_lag_ms": {p.name: 1000 * p.max_lag for p in pacers},
        "fired": {p.name: p.fired for p in pacers},
        "pg_connections": connections,
        "wall0": wall0,
    }
    report["rss"] = {
        "summary": sampler.summary(rss_start, rss_end),
        "per_minute": sampler.per_minute(int(args.minutes)),
        "load_per_minute": sampler.load_per_minute(int(args.minutes)),
    }
    report["cpu_seconds"] = {k: cpu1[k] - cpu0[k] for k in cpu0}
    # cores busy on average: PostgreSQL and everything else on the machine included
    report["machine_busy_cores"] = machine_busy
    return recorder, ingest, action


def _progress(recorder: Recorder, minute: int) -> str:
    recent = [o for o in list(recorder.outcomes) if 60 * (minute - 1) <= o.scheduled < 60 * minute]
    stats = summarize(recent, 60 * minute)
    return "; ".join(
        f"{op} {s['requests']} p99 {s['p99_ms']:.0f} ms err {s['errors']}"
        for op, s in stats.items()
    )


def check_outcomes(
    fleet: Fleet,
    database_url: str,
    recorder: Recorder,
    ingest: ops.IngestOp,
    action: ops.ActionOp,
    report: dict[str, Any],
    plan: list[_overload.Phase] | None = None,
) -> None:
    """Ingest tasks to their end, deliveries against receipts, and the latencies."""
    window = report["window"]
    with fleet.channel("ingest") as channel:
        log(f"waiting for {len(ingest.task_ids)} live ingest tasks to end ...")
        try:
            ops.wait_for_ingest(igrpc.IngestServiceStub(channel), ingest.task_ids, DRAIN_SECONDS)
            ingest_wait_error = None
        except RuntimeError as exc:
            ingest_wait_error = str(exc)
    done = ops.ingest_completion(database_url, ingest.task_ids, window["wall0"])
    # accepted -> completed as samples of the open-loop summary, so they get per-minute rows
    completion = [
        Outcome("ingest.completed", at, seconds, None) for at, seconds in done.pop("samples")
    ]
    failed = sum(n for s, n in done["states"].items() if s != "completed")
    completion += [Outcome("ingest.completed", 0.0, 0.0, "task not completed")] * failed
    summary = summarize([*recorder.outcomes, *completion], window["seconds"])
    report["operations"] = summary
    if plan is not None:
        report["overload"] = _overload.report(recorder.outcomes, plan)
    report["ingest_tasks"] = {**done, "wait_error": ingest_wait_error}
    assert fleet.receiver is not None
    report["deliveries"] = check_deliveries(fleet.receiver.stats(), action.keys)
    report["actions"] = {
        "client_final_states": dict(action.final_states),
        **ops.action_states(database_url),
    }


def failures(report: dict[str, Any]) -> list[str]:
    out = []
    overload = report.get("overload")
    for op, s in report.get("operations", {}).items():
        errors, examples = s["errors"], s["error_examples"][:2]
        if overload is not None and op != "ingest.completed":
            # Under overload, a refusal with a retry hint is the service doing its job: the
            # failures are the other errors, and so are the examples.
            errors = overload["other_errors"].get(op, 0)
            examples = overload["other_error_examples_by_op"].get(op, [])[:2]
        if errors:
            out.append(f"{op}: {errors} errors, e.g. {examples}")
    if overload is not None and overload["refusals_without_hint"]:
        out.append(f"{overload['refusals_without_hint']} refusals without a retry hint")
    d = report.get("deliveries")
    if d is not None and not d["ok"]:
        out.append(f"deliveries do not match the actions: {d}")
    a = report.get("actions", {})
    if a and set(a["states"]) - {"succeeded"}:
        out.append(f"actions not succeeded in the store: {a['states']}")
    if a and set(a["actions_by_receipt_count"]) - {1}:
        out.append(f"actions without exactly one receipt: {a['actions_by_receipt_count']}")
    if report.get("window", {}).get("open_after_drain"):
        out.append(f"{report['window']['open_after_drain']} requests never answered")
    if report.get("ingest_tasks", {}).get("wait_error"):
        out.append(f"ingest: {report['ingest_tasks']['wait_error']}")
    for name, code in report.get("exit_codes", {}).items():
        if code not in (0, None):
            out.append(f"{name} exited with {code}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.perf_counter()
    corpus = ops.Corpus(args.corpus_dir, args.preload)
    tmp_root = Path(tempfile.mkdtemp(prefix="reachstore-sustained-"))
    report: dict[str, Any] = {
        "machine": machine_facts(),
        "config": {
            "argv": sys.argv[1:],
            "minutes": args.minutes,
            "rates": {
                "query": args.query_rate,
                "ingest": args.ingest_rate,
                "action": args.action_rate,
            },
            "preload_per_namespace": args.preload,
            "namespaces": corpus.names,
            "date": time.strftime("%Y-%m-%d"),
        },
    }
    try:
        with postgres_database(args.postgres_url) as (url, version):
            report["config"]["postgres"] = f"PostgreSQL {version.split()[0]}"
            fleet = Fleet(tmp_root, url, args.log_level)
            try:
                log(f"starting audit, ingest, 2 reach workers, 2 query replicas on {version} ...")
                fleet.start(queries=2, reach=2, ingest=True)
                log(f"preloading {args.preload} chunks per namespace ...")
                with fleet.channel("ingest") as channel:
                    report["preload"] = ops.preload(channel, corpus)
                log(f"    {report['preload']['documents']} in {report['preload']['seconds']:.0f} s")
                wait_replicas_serving(fleet, corpus)
                recorder, ingest, action = run_load(args, fleet, corpus, report)
                check_outcomes(fleet, url, recorder, ingest, action, report, args.plan)
            finally:
                report["exit_codes"] = fleet.stop()
                report["service_logs"] = {
                    name: {"levels": p.log_levels(), "first_problem": p.first_problem()}
                    for name, p in fleet.processes.items()
                }
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    report["total_seconds"] = time.perf_counter() - started
    report["failures"] = failures(report)
    print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=float) + "\n")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())

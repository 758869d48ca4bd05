"""End-to-end throughput benchmark of reachstore's reach layer: actions per second from
SubmitTask to SUCCEEDED through a webhook, next to the rate at which the same receiver
accepts plain HTTP posts (the ceiling), on SQLite and on PostgreSQL.

Run from the repository root (the default run takes about 1.5 minutes on 2 cores):

    .venv/bin/python bench/bench_reach.py [--json PATH]

Quick run: ``--actions 50 --warmup 10 --ceiling-posts 500 --skip-postgres``.

What it does:

1. Starts the webhook receiver (``_reach_receiver.py``) in its own process: a
   ``ThreadingHTTPServer`` that answers every POST with 200 ``{"id": <Idempotency-Key>}``
   at once and counts deliveries by that header.
2. Ceiling: one keep-alive ``httpx.Client`` posts the body reach sends for one action,
   back to back, ``--ceiling-posts`` times (after 200 untimed): posts/s.
3. For each engine - SQLite (a file in the temp folder) and PostgreSQL (a new database
   ``reachstore_bench_<hex>`` on ``--postgres-url``, dropped at the end) - starts
   ``python -m reachstore_server.reach.main`` (``_reach_service.py``) with one webhook channel to
   that
   receiver (no quota, no status look-up: a 200 means succeeded), waits for its gRPC health
   check, and at each ``--concurrency`` runs ``--warmup`` then ``--actions`` actions
   (``_reach_load.py``): each client thread submits one action with params ``{"n": <unique>}``
   and long-polls GetTask until its task is SUCCEEDED. Reported: actions/s over the measured
   part, its ratio to the ceiling, p50/p99 from submit to SUCCEEDED as the client saw it and
   as the task's own timestamps say, GetTask calls per action, CPU per action by process.
4. Checks that the receiver saw exactly one delivery per action, by Idempotency-Key (the
   keys SubmitTask returned, warm-up included); any other count fails the run (exit 1).

``--profile DIR`` also records the reach process with py-spy during the measured part at
the highest concurrency and prints where its samples fall; that costs CPU on the same
cores, so quote the figures of a run without it.

Everything runs on this machine: the client threads, the receiver, the reach process and
the database share its cores. It writes only to its temp folder (removed at the end), to
the scratch PostgreSQL database, to ``--json`` and to ``--profile``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import os
import shlex
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # for reachstore_server.*; bench/ itself is sys.path[0]

import _pg_work as pgw  # noqa: E402
import psycopg  # noqa: E402
import sqlalchemy  # noqa: E402
from _reach_load import WAIT_MS, run_load  # noqa: E402
from _reach_profile import PySpyRecording, summarize  # noqa: E402
from _reach_receiver import ReceiverProcess, measure_ceiling  # noqa: E402
from _reach_service import (  # noqa: E402
    CHANNEL,
    ReachProcess,
    add_engine_arguments,
    postgres_database,
)
from _report import machine_facts  # noqa: E402
from _stats import Pids, latency_stats  # noqa: E402

from reachstore_server.reach.config import ReachConfig  # noqa: E402
from reachstore_server.reach.executor import IDLE_POLL_SECONDS  # noqa: E402
from reachstore_server.reach.watch import FALLBACK_POLL_SECONDS  # noqa: E402

CEILING_WARMUP = 200


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _per_concurrency(text: str, concurrencies: list[int], what: str) -> dict[int, int]:
    values = [int(x) for x in text.split(",") if x.strip()]
    if len(values) == 1:
        values *= len(concurrencies)
    if len(values) != len(concurrencies):
        raise ValueError(f"{what}: give one number, or one per concurrency ({len(concurrencies)})")
    return dict(zip(concurrencies, values, strict=True))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="reachstore reach benchmark: actions/s end to end through a webhook, next "
        "to the receiver's own ceiling, on SQLite and PostgreSQL (see the module docstring)"
    )
    parser.add_argument("--concurrency", default="1,16", help="comma-separated client threads")
    parser.add_argument(
        "--actions",
        default="400,1600",
        help="measured actions per run: one number, or one per concurrency (default 400,1600)",
    )
    parser.add_argument(
        "--warmup",
        default="20,160",
        help="untimed actions before each run: one number, or one per concurrency",
    )
    parser.add_argument(
        "--ceiling-posts", type=int, default=5000, help="timed posts of the ceiling measurement"
    )
    add_engine_arguments(parser, "reach")
    parser.add_argument("--skip-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument(
        "--count-commits",
        action="store_true",
        help="PostgreSQL: also count commits, rollbacks and rows per action "
        "(pg_stat_database; adds 33 s of waiting per concurrency, outside the timed part)",
    )
    parser.add_argument(
        "--reach-processes",
        type=int,
        default=1,
        metavar="N",
        help="reach processes on the same database (0: one per core); the client threads "
        "take turns among them",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="DIR",
        help="py-spy record the reach process during the highest concurrency into DIR",
    )
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy command (for --profile)")
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON result here")
    args = parser.parse_args(argv)
    try:
        args.concurrencies = [int(x) for x in args.concurrency.split(",") if x.strip()]
        args.actions_by = _per_concurrency(args.actions, args.concurrencies, "--actions")
        args.warmup_by = _per_concurrency(args.warmup, args.concurrencies, "--warmup")
    except ValueError as exc:
        parser.error(str(exc))
    if not args.concurrencies or min(args.concurrencies) < 1:
        parser.error("--concurrency: numbers >= 1")
    if min(args.actions_by.values()) < 1 or min(args.warmup_by.values()) < 0:
        parser.error("--actions must be >= 1 and --warmup >= 0")
    if args.reach_processes < 0:
        parser.error("--reach-processes must be >= 0")
    args.reach_processes = args.reach_processes or os.cpu_count() or 1
    if args.ceiling_posts < 1:
        parser.error("--ceiling-posts must be >= 1")
    if args.profile is not None:
        found = shutil.which(args.py_spy)
        if found is None:
            parser.error(f"--profile needs py-spy: {args.py_spy!r} not found (see --py-spy)")
        args.py_spy = found
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def check_deliveries(stats: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """Exactly one delivery per action: as many posts as actions, each key once."""
    seen: dict[str, int] = stats["keys"]
    expected = set(keys)
    result = {
        "actions": len(keys),
        "posts": stats["posts"],
        "distinct_keys": len(seen),
        "keys_delivered_twice_or_more": sum(1 for c in seen.values() if c > 1),
        "keys_missing": len(expected - seen.keys()),
        "keys_unexpected": len(seen.keys() - expected),
        "actions_sharing_a_key": len(keys) - len(expected),
    }
    result["ok"] = result["posts"] == len(keys) and not any(
        result[k]
        for k in (
            "keys_delivered_twice_or_more",
            "keys_missing",
            "keys_unexpected",
            "actions_sharing_a_key",
        )
    )
    return result


@contextlib.contextmanager
def _database(engine: str, folder: Path, args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if engine == "sqlite":
        yield f"sqlite:///{folder / 'reach.db'}", f"SQLite {sqlite3.sqlite_version}"
    else:
        with postgres_database(args.postgres_url) as (url, version):
            yield url, f"PostgreSQL {version}"


def run_engine(
    engine: str,
    args: argparse.Namespace,
    tmp_root: Path,
    receiver: ReceiverProcess,
    numbers: Iterator[int],
    ceiling: float,
    report: dict[str, Any],
) -> None:
    folder = tmp_root / engine
    folder.mkdir()
    with _database(engine, folder, args) as (url, version):
        report["engines"][engine] = version
        count = args.reach_processes
        fleet = [
            ReachProcess(
                folder / f"reach-{i}" if count > 1 else folder,
                url,
                receiver.delivery_url,
                args.log_level,
                worker_id=f"bench-reach-{i}" if count > 1 else "bench-reach",
            )
            for i in range(count)
        ]
        reach = fleet[0]
        log(f"{engine}: starting {count} reach service(s) ({version}) ...")
        t = time.perf_counter()
        try:
            for one in fleet:
                one.start()
            log(f"    healthy after {time.perf_counter() - t:.1f} s")
            for conc in args.concurrencies:
                warmup, actions = args.warmup_by[conc], args.actions_by[conc]
                log(f"{engine} c={conc}: {warmup} warm-up + {actions} measured actions ...")
                receiver.reset()
                during: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
                if args.profile is not None and conc == max(args.concurrencies):
                    out = args.profile / f"reach-{engine}-c{conc}.txt"
                    report["profiles"][engine] = {"path": str(out), "concurrency": conc}
                    during = functools.partial(PySpyRecording, args.py_spy, reach.pid, out)
                pids: Pids = {"reach": [one.pid for one in fleet], "receiver": receiver.pid}
                addresses = [one.address for one in fleet]
                database = None
                if args.count_commits and engine == "postgresql":
                    database = (args.postgres_url, pgw.database_name(url))
                run = run_load(addresses, conc, warmup, actions, numbers, pids, during, database)
                run["reach_processes"] = count
                keys = run.pop("keys")
                run["engine"] = engine
                run["ratio_to_ceiling"] = run["actions_per_s"] / ceiling
                run["deliveries"] = check_deliveries(receiver.stats(), keys)
                report["runs"].append(run)
                d = run["deliveries"]
                log(
                    f"    {run['actions_per_s']:.1f} actions/s, p50 {run['latency']['p50_ms']:.1f} "
                    f"ms; deliveries {d['posts']} for {d['actions']} actions "
                    f"({'ok' if d['ok'] else 'WRONG'})"
                )
        except Exception:
            log(f"{engine}: the run failed; the reach service's log ends with:\n{reach.log_tail()}")
            raise
        finally:
            codes = [one.stop() for one in fleet]
            code = next((c for c in codes if c not in (0, None)), codes[0])
            levels: dict[str, int] = {}
            for one in fleet:
                for level, n in one.log_levels().items():
                    levels[level] = levels.get(level, 0) + n
            report["service_exit_codes"][engine] = code
            report["service_logs"][engine] = {
                "levels": levels,
                "first_problem": reach.first_problem(),
            }
            if code not in (0, None):
                log(f"{engine}: the reach service exited with {code}:\n{reach.log_tail()}")
        if engine in report["profiles"]:
            path = Path(report["profiles"][engine]["path"])
            if path.is_file():
                report["profiles"][engine].update(summarize(path))
            else:
                log(f"py-spy wrote no {path}; see {path.with_suffix('.log')}")


WIDTH = 118


def print_report(r: dict[str, Any]) -> None:
    p = print
    m, c, ce = r["machine"], r["config"], r["ceiling"]
    p("=" * WIDTH)
    p("reachstore reach benchmark: actions end to end, SubmitTask -> webhook 200 -> SUCCEEDED")
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
        f"          Python {m['python']}, grpcio {m['grpcio']}, httpx {m['httpx']}, "
        f"SQLAlchemy {c['sqlalchemy']}, psycopg {c['psycopg']}"
    )
    p(f"          {'; '.join(r['engines'].values())}")
    p("          the client threads, the receiver, the reach process and the database share them")
    p(
        f"service : {c['reach_processes']} x python -m reachstore_server.reach.main on one "
        "database "
        f"(client threads take turns), engine.workers={c['workers']}, log level {c['log_level']}"
    )
    p(f"          channel {CHANNEL}: webhook, no quota, no status look-up (200 = succeeded)")
    p(
        f"clients : c threads, one gRPC channel; each: SubmitTask, then GetTask(wait_ms="
        f"{c['wait_ms']}, known_version)"
    )
    p('          until SUCCEEDED; every action has its own params {"n": <unique>}')
    p(
        f"ceiling : one keep-alive httpx.Client posting the same body to the same receiver: "
        f"{ce['posts']} posts in {ce['seconds']:.2f} s"
    )
    p(f"          = {ce['posts_per_s']:.0f} posts/s (p50 {ce['p50_ms']:.2f} ms per post)")
    p("")
    _print_table(r["runs"])
    p("")
    p("act/s: measured actions / wall time from the first submit to the last SUCCEEDED, after")
    p("  an untimed warm-up; ÷ceiling = act/s / ceiling posts/s. submit->SUCCEEDED: as the client")
    p("  saw it; SubmitTask: that call alone; created->finished: the task's own timestamps (whole")
    p("  ms). GetTask: calls per action. reach CPU: the reach processes' CPU per measured action.")
    p("  deliveries: POSTs the receiver counted in the run (warm-up included) / actions submitted;")
    p("  ok = each action's Idempotency-Key exactly once.")
    p(
        "Other CPU ms per action: receiver / client threads; busy cores during the measured part: "
        "these three"
    )
    p("  processes / the whole machine (the rest is PostgreSQL and whatever else ran):")
    for run in r["runs"]:
        cpu, busy = run["cpu_ms_per_action"], run["busy_cores"]
        p(
            f"  {run['engine']:10s} c={run['concurrency']:<3d} {cpu['receiver']:5.2f} / "
            f"{cpu['bench']:5.2f} ms;  {busy['ours']:4.2f} / {busy['machine']:4.2f} of "
            f"{m['nproc']} cores"
        )
    counted = [run for run in r["runs"] if run.get("database_per_action")]
    if counted:
        p("PostgreSQL's work per measured action (pg_stat_database, less the idle background):")
    for run in counted:
        w = run["database_per_action"]
        p(
            f"  c={run['concurrency']:<3d} {w['xact_commit']:5.2f} commits, "
            f"{w['xact_rollback']:5.2f} rollbacks (of them {w['writing_transactions']:4.2f} "
            f"reserving or changing state), {w['tup_inserted']:5.1f} rows inserted, "
            f"{w['tup_updated']:5.1f} updated, {w['tup_deleted']:4.1f} deleted, "
            f"{w['tup_returned']:7.1f} returned"
        )
    logs = "; ".join(
        f"{engine}: "
        + (", ".join(f"{n} {level}" for level, n in sorted(v["levels"].items())) or "empty")
        for engine, v in r["service_logs"].items()
    )
    p(f"Service log lines: {logs}.")
    for engine, v in r["service_logs"].items():
        if v["first_problem"]:
            p(f"  first warning/error of {engine}: {v['first_problem']}")
    p(
        "GetTask's wait ends when the executor of the same process records a change "
        f"(reachstore_server/reach/watch.py; other processes' changes are seen within "
        f"{1000 * FALLBACK_POLL_SECONDS:.0f} ms)."
    )
    p(
        f"  The executor's idle poll ({IDLE_POLL_SECONDS:g} s) is not on the path: SubmitTask "
        "wakes the executor of its own process."
    )
    for engine, prof in r["profiles"].items():
        if "samples" in prof:
            _print_profile(engine, prof)
    p("")
    p(f"total run time {r['total_seconds']:.0f} s")
    p("=" * WIDTH)


def _print_table(runs: list[dict[str, Any]]) -> None:
    p = print
    p(
        f"{'':37s}{'submit->SUCCEEDED':>17s} {'SubmitTask':>10s}  {'created->finished':>17s}"
        f"{'GetTask':>9s} {'reach CPU':>10s}"
    )
    p(
        f"{'engine':10s} {'c':>3s} {'actions':>7s} {'act/s':>6s} {'÷ceiling':>8s} "
        f"{'p50 ms':>8s} {'p99 ms':>8s} {'p50 ms':>10s}  {'p50 ms':>8s} {'p99 ms':>8s} "
        f"{'/action':>8s} {'ms/action':>10s}  deliveries"
    )
    for run in runs:
        lat, srv, sub = run["latency"], run["server_latency"], run["submit_latency"]
        d = run["deliveries"]
        verdict = "ok" if d["ok"] else "WRONG"
        p(
            f"{run['engine']:10s} {run['concurrency']:3d} {run['actions']:7d} "
            f"{run['actions_per_s']:6.1f} {100 * run['ratio_to_ceiling']:6.2f} % "
            f"{lat['p50_ms']:8.1f} {lat['p99_ms']:8.1f} {sub['p50_ms']:10.1f}  "
            f"{srv['p50_ms']:8.1f} {srv['p99_ms']:8.1f} {run['get_calls_per_action']:8.2f} "
            f"{run['cpu_ms_per_action']['reach']:10.2f}  {d['posts']}/{d['actions']} {verdict}"
        )


def _print_profile(engine: str, prof: dict[str, Any]) -> None:
    p = print
    p("")
    p(
        f"py-spy --gil, reach process, {engine} c={prof['concurrency']}: {prof['samples']} "
        f"samples at {prof['rate_per_s']}/s of the thread holding the GIL"
    )
    p(f"  ({prof['path']}; figures of a profiled run are not the benchmark's)")
    p("  own time by package:")
    for name, share in prof["own_by_package"][:10]:
        p(f"    {100 * share:5.1f} %  {name}")
    p("  own time by function:")
    for name, share in prof["own_by_function"][:10]:
        p(f"    {100 * share:5.1f} %  {name}")
    p("  inclusive time of the project's functions:")
    for name, share in prof["inclusive_by_project_function"][:12]:
        p(f"    {100 * share:5.1f} %  {name}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The finally blocks stop the processes; SIGTERM must unwind through them like Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.perf_counter()
    python = (
        os.path.relpath(sys.executable)
        if sys.executable.startswith(os.getcwd())
        else (sys.executable)
    )
    command = shlex.join([python, os.path.relpath(__file__), *sys.argv[1:]])
    tmp_root = Path(tempfile.mkdtemp(prefix="reachstore-bench-reach-"))
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "machine": machine_facts(),
        "config": {
            "command": command,
            "argv": sys.argv[1:],
            "loadavg_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "sqlalchemy": sqlalchemy.__version__,
            "psycopg": psycopg.__version__,
            "workers": ReachConfig(channels={}).workers,
            "reach_processes": args.reach_processes,
            "log_level": args.log_level,
            "wait_ms": WAIT_MS,
            "concurrencies": args.concurrencies,
            "actions": {str(k): v for k, v in args.actions_by.items()},
            "warmup": {str(k): v for k, v in args.warmup_by.items()},
            "profiled": args.profile is not None,
        },
        "engines": {},
        "runs": [],
        "profiles": {},
        "service_exit_codes": {},
        "service_logs": {},
    }
    numbers = itertools.count(1)
    try:
        with ReceiverProcess() as receiver:
            log(f"receiver on {receiver.delivery_url}; ceiling: {args.ceiling_posts} posts ...")
            ceiling = measure_ceiling(receiver, args.ceiling_posts, CEILING_WARMUP)
            ceiling["p50_ms"] = latency_stats(ceiling.pop("seconds_each"))["p50_ms"]
            report["ceiling"] = ceiling
            log(f"    {ceiling['posts_per_s']:.0f} posts/s")
            engines = [
                engine
                for engine, skip in (
                    ("sqlite", args.skip_sqlite),
                    ("postgresql", args.skip_postgres),
                )
                if not skip
            ]
            for engine in engines:
                run_engine(
                    engine, args, tmp_root, receiver, numbers, ceiling["posts_per_s"], report
                )
    except KeyboardInterrupt:
        log("interrupted; everything started was stopped")
        return 130
    except (RuntimeError, OSError, psycopg.Error) as exc:
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
    wrong = [
        f"{run['engine']} c={run['concurrency']}"
        for run in report["runs"]
        if not run["deliveries"]["ok"]
    ]
    if wrong:
        print(
            f"DELIVERY CHECK FAILED in {', '.join(wrong)}: the receiver did not see exactly one "
            "delivery per action (see 'deliveries' in the table or --json)",
            file=sys.stderr,
        )
        return 1
    bad_exit = {e: code for e, code in report["service_exit_codes"].items() if code != 0}
    if bad_exit:
        print(f"the reach service did not stop cleanly: exit codes {bad_exit}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The sustained-load benchmark's printed report: per-operation throughput, latency and
errors; latency per minute; resident memory per process at the start, each minute and
the end; and the in-run ratios (end/start RSS, last-minute/first-minute p99)."""

from __future__ import annotations

from typing import Any

from _overload import print_overload

WIDTH = 110
# what each operation's sample measures, for the table
MEANING = {
    "query": "Query over 4 namespaces, scheduled -> answer",
    "ingest.accept": "CreateDocument, scheduled -> 202",
    "ingest.completed": "document accepted -> task completed (store clock)",
    "ingest.refused_invalid": "CreateDocument of the chunk holding a NUL: refused, rightly",
    "action.submit": "SubmitTask, scheduled -> answer",
    "action": "action scheduled -> seen SUCCEEDED (GetTask)",
}


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def print_report(r: dict[str, Any]) -> None:
    p = print
    m, c = r["machine"], r["config"]
    p("=" * WIDTH)
    p("reachstore sustained mixed load")
    p(f"machine : nproc={m['nproc']}, {m['cpu_model']}, {m['mem_gb']} GB RAM, Python {m['python']}")
    p(
        f"setup   : {c.get('postgres', '?')}; audit, ingest, reach-1, reach-2, query-1, query-2 "
        "as separate processes; clients: one gRPC channel per component, round robin"
    )
    rates = c["rates"]
    p(
        f"load    : open loop, {rates['query']:g} queries/s, {rates['ingest']:g} documents/s, "
        f"{rates['action']:g} actions/s for {c['minutes']:g} min after "
        f"{r.get('window', {}).get('warmup_seconds', 0):.0f} s warm-up; preload "
        f"{c['preload_per_namespace']} chunks x {len(c['namespaces'])} namespaces"
    )
    if "operations" in r:
        _print_operations(r)
        _print_minutes(r)
    if "rss" in r:
        _print_rss(r)
    if "overload" in r:
        print_overload(r["overload"])
    _print_checks(r)
    p(f"total run time {r['total_seconds']:.0f} s")
    if r["failures"]:
        p("FAILED:")
        for line in r["failures"]:
            p(f"  - {line}")
    else:
        p("OK: no request errored; every action succeeded, delivered once, one receipt each")
    p("=" * WIDTH)


def _print_operations(r: dict[str, Any]) -> None:
    p = print
    w = r["window"]
    p("")
    p(f"operations over the {w['seconds']:.0f} s window (latency from the scheduled time):")
    head = ("requests", "per s", "errors", "p50 ms", "p99 ms", "max ms")
    p(f"  {'operation':18s} " + " ".join(f"{h:>8s}" for h in head) + "  measures")
    for op, s in r["operations"].items():
        p(
            f"  {op:18s} {s['requests']:8d} {s['per_s']:8.2f} {s['errors']:8d} {s['p50_ms']:8.1f} "
            f"{s['p99_ms']:8.1f} {s['max_ms']:8.1f}  {MEANING.get(op, '')}"
        )
        for example in s["error_examples"]:
            p(f"      error: {example}")
    lag = ", ".join(f"{k} {v:.0f} ms" for k, v in w["pacer_max_lag_ms"].items())
    p(f"  pacers' worst lateness (this process short of CPU): {lag}")
    cpu = r["cpu_seconds"]
    p(
        "  CPU s in the window: "
        + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items())
        + f" (of {2 * w['seconds']:.0f} core-seconds on 2 cores)"
    )
    p(
        f"  the whole machine was busy {r['machine_busy_cores']:.2f} cores on average "
        "(PostgreSQL and other users of the machine included)"
    )
    if "pg_connections" in w:
        p(f"  connections open to the database at the end of the window: {w['pg_connections']}")


def _print_minutes(r: dict[str, Any]) -> None:
    p = print
    p("")
    p("p50 / p99 ms per minute of schedule (drift shows here):")
    ops = list(r["operations"])
    p("  minute " + "".join(f"{op:>22s}" for op in ops))
    minutes = len(next(iter(r["operations"].values()))["per_minute"])
    for m in range(minutes):
        row = []
        for op in ops:
            s = r["operations"][op]["per_minute"][m]
            err = f" e{s['errors']}" if s["errors"] else ""
            row.append(f"{s['p50_ms']:9.1f} / {s['p99_ms']:7.1f}{err}")
        p(f"  {m + 1:6d} " + "".join(f"{x:>22s}" for x in row))
    loads = r.get("rss", {}).get("load_per_minute")
    if loads:
        shown = ", ".join(f"{x:.1f}" for x in loads)
        p(f"  machine load average (1 min, highest sample) per minute: {shown} on 2 cores")
    p("  last-minute p99 / first-minute p99:")
    for op in ops:
        pm = r["operations"][op]["per_minute"]
        p(f"    {op:18s} {_ratio(pm[-1]['p99_ms'], pm[0]['p99_ms']):.2f}")


def _print_rss(r: dict[str, Any]) -> None:
    p = print
    summary, per_minute = r["rss"]["summary"], r["rss"]["per_minute"]
    names = list(summary)
    p("")
    p("resident memory (VmRSS, MiB): start of the window, end of each minute, end; end/start")
    p(
        f"  {'process':10s} {'start':>7s} "
        + "".join(f"{'m' + str(i + 1):>7s}" for i in range(len(per_minute)))
        + f" {'end':>7s} {'peak':>7s} {'end/start':>9s}"
    )
    for name in names:
        s = summary[name]
        mins = "".join(f"{row.get(name, float('nan')):7.1f}" for row in per_minute)
        p(
            f"  {name:10s} {s['start_mib']:7.1f} {mins} {s['end_mib']:7.1f} {s['peak_mib']:7.1f} "
            f"{s['end_over_start']:9.3f}"
        )


def _print_checks(r: dict[str, Any]) -> None:
    p = print
    p("")
    if "actions" in r:
        a, d = r["actions"], r["deliveries"]
        p(f"actions in the store by state: {a['states']}")
        p(f"actions as the clients saw them end: {a['client_final_states']}")
        p(f"receipts per action (count -> actions): {a['actions_by_receipt_count']}")
        p(
            f"receiver: {d['posts']} deliveries for {d['actions']} actions, "
            f"{d['distinct_keys']} distinct keys; twice or more "
            f"{d['keys_delivered_twice_or_more']}, missing {d['keys_missing']}, "
            f"unexpected {d['keys_unexpected']}"
        )
    if "ingest_tasks" in r:
        t = r["ingest_tasks"]
        p(f"live ingest tasks by state: {t['states']} ({t['found']} found)")
    if "service_logs" in r:
        levels = {n: v["levels"] for n, v in r["service_logs"].items()}
        p(f"service log lines by level: {levels}")
        for name, v in r["service_logs"].items():
            if v["first_problem"]:
                p(f"  {name} first warning/error: {v['first_problem']}")
    if "exit_codes" in r:
        p(f"exit codes: {r['exit_codes']}")

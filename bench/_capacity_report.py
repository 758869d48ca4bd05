"""The capacity benchmark's printed report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _pg_work import COUNTERS

WIDTH = 110


def _work_row(label: str, work: Mapping[str, float]) -> str:
    return f"  {label:22s}" + "".join(f"{work[c]:>13.1f}" for c in COUNTERS)


def _growth(title: str, growth: Mapping[str, Mapping[str, float]], unit: str) -> None:
    p = print
    p(f"{title} (slope between the two sizes; MiB per million {unit}, bytes per {unit[:-1]}):")
    total = 0.0
    for name, g in sorted(growth.items(), key=lambda kv: -kv[1]["bytes_per_item"]):
        if abs(g["bytes_per_item"]) >= 1:
            p(f"  {name:24s} {g['mib_per_million']:10.0f} MiB  {g['bytes_per_item']:9.0f} B")
        total += g["bytes_per_item"]
    p(f"  {'all tables':24s} {total * 1e6 / 2**20:10.0f} MiB  {total:9.0f} B")


def print_report(r: dict[str, Any]) -> None:
    p = print
    m = r["machine"]
    p("=" * WIDTH)
    p("reachstore capacity inputs (one replica of each component, PostgreSQL)")
    p(f"machine : nproc={m['nproc']}, {m['cpu_model']}, {m['mem_gb']} GB RAM, Python {m['python']}")
    p("")
    i = r["ingest"]
    p(
        f"ingest : one ingest service, {i['documents']} documents (batches of 100 over gRPC): "
        f"{i['docs_per_s']:.1f} documents/s ({i['seconds']:.1f} s)"
    )
    q = r["query"]
    p(f"query  : one replica, {q['documents']} documents in 4 namespaces, closed loop over gRPC:")
    for s in q["rows"]:
        p(
            f"         c={s['concurrency']:2d}: {s['qps']:6.1f} QPS, p50 {s['p50_ms']:6.1f} ms, "
            f"p99 {s['p99_ms']:6.1f} ms, query CPU {s['cpu_ms_per_query']['query']:.1f} ms/query"
        )
    a = r["reach"]
    d = a["deliveries"]
    p(
        f"reach  : one worker, {a['actions']} actions by {a['concurrency']} closed-loop clients: "
        f"{a['actions_per_s']:.1f} actions/s, p50 {a['latency']['p50_ms']:.0f} ms, "
        f"p99 {a['latency']['p99_ms']:.0f} ms; deliveries {'ok' if d['ok'] else 'WRONG'} "
        f"({d['posts']} for {d['actions']})"
    )
    p("audit  : not measured here; bench/bench_audit.py (README, Audit)")
    p("")
    p("database work per operation (pg_stat_database deltas less the idle background):")
    p(f"  {'':22s}" + "".join(f"{c:>13s}" for c in COUNTERS))
    p(_work_row("per query", q["db_per_query"]))
    p(_work_row("per document ingested", i["db_per_document"]))
    p(_work_row("per action", a["db_per_action"]))
    for name, rates in r["idle_per_second"].items():
        p(_work_row(f"idle/s ({name} set)", rates))
    p(
        "  pg_stat_statements: "
        + ("loaded" if r["pg_stat_statements"] else "not loaded (needs a server restart)")
    )
    for label, scans in (
        ("document", i.get("scans_per_document", {})),
        ("action", a.get("scans_per_action", {})),
    ):
        p(f"  per {label}, by table (seq scans, rows they read, index scans, rows fetched):")
        for table, v in sorted(scans.items(), key=lambda kv: -kv[1]["seq_tup_read"]):
            p(
                f"    {table:22s} {v['seq_scan']:8.2f} {v['seq_tup_read']:10.1f} "
                f"{v['idx_scan']:8.2f} {v['idx_tup_fetch']:10.1f}"
            )
    c = r["connections"]
    p(
        f"  open connections after the load: {c['storage']} (audit, ingest, query) and "
        f"{c['reach']} (audit, reach)"
    )
    p("")
    sd = r["storage_documents"]
    _growth("storage per document", sd["tables_per_document"], "documents")
    p(
        f"  index snapshots: {sd['snapshot_bytes_per_document']:.0f} B per document; query "
        f"replica RSS +{sd['query_rss_mib_per_1000_documents']:.2f} MiB per 1,000 documents "
        f"({sd['small']['query_rss_mib']:.0f} MiB at {sd['small']['documents']}, "
        f"{sd['large']['query_rss_mib']:.0f} MiB at {sd['large']['documents']})"
    )
    p(f"  at {sd['large']['documents']} documents: {sd['large']['chunks']} chunks")
    p("")
    _growth("storage per action", r["storage_actions"]["tables_per_action"], "actions")
    p(f"  rows at the end: {a['row_counts']}")
    p("")
    p(f"total run time {r['total_seconds']:.0f} s")
    p("=" * WIDTH)

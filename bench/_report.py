"""The benchmark's printed report: the machine, the three parts, and the ratios against
the targets."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import faiss
import grpc
import httpx
import numpy as np

TARGET_INGEST_RATIO = 0.85  # end-to-end chunks/s over the raw embedder's on every core
TARGET_GRPC_P50_RATIO = 1.5  # over the in-process p50
TARGET_REST_P50_RATIO = 2.0
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def machine_facts() -> dict[str, Any]:
    cpu_model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "",
    )
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "faiss": getattr(faiss, "__version__", "?"),
        "grpcio": grpc.__version__,
        "httpx": httpx.__version__,
        "thread_env": {k: os.environ.get(k, "") for k in THREAD_ENV},
    }


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_report(r: dict[str, Any]) -> None:
    p = print
    m, c = r["machine"], r["config"]
    p("=" * 100)
    p("reachstore storage benchmark")
    p(
        f"machine : nproc={m['nproc']} (os.cpu_count={m['cpu_count']}), {m['cpu_model']}, "
        f"{m['mem_gb']} GB RAM"
    )
    p(f"          Python {m['python']} ({m['implementation']}), {m['platform']}")
    p(f"          numpy {m['numpy']}, faiss {m['faiss']}, grpcio {m['grpcio']}, httpx {m['httpx']}")
    p(f"          this process: {m['thread_env']}")
    ns = c["namespaces"]
    p(f"corpus  : {c['corpus_dir']}: {c['documents']} chunks as documents in {len(ns)} namespaces")
    p(f"          {ns}; {c['query_count']} queries")
    p(
        f"system  : `reachstore up` ready in {r['system']['start_seconds']:.1f} s, "
        f"data under {c['tmp_root']}"
    )
    _print_ingest(r)
    if "recall" not in r:  # --ingest-only
        return
    _print_query(r)
    rc = r["recall"]
    p("")
    p(f"(c) RECALL@10 of source_id over {rc['queries']} queries via gRPC: {100 * rc['grpc']:.1f} %")
    p(
        f"    in-process on the same stored vectors: {100 * rc['inprocess']:.1f} %; identical "
        f"top-10 lists gRPC vs in-process: {rc['identical_top10']}/{rc['queries']}"
    )
    p("    (corpus README: exact dense search with a good embedder finds ~89 %)")
    p("")
    p(f"total run time {r['total_seconds']:.0f} s")
    p("=" * 100)


def _print_ingest(r: dict[str, Any]) -> None:
    p = print
    a, raw, vc = r["ingest"], r["raw_embedding"], r["vector_check"]
    cores = r["raw_embedding_all_cores"]
    p("")
    p(
        f"(a) INGEST  {a['documents']} documents -> {a['chunks']} chunks, {a['batches']} REST "
        f"batches of <= {a['batch_size']}, on_duplicate=overwrite"
    )
    p(
        f"    the ingest service embeds in {r['config']['ingest_embed_processes']} process(es) "
        f"(REACHSTORE_EMBED_THREADS={r['config']['embed_threads']}), calls of <= {raw['batch']}"
        " chunks"
    )
    p(f"    {'':56s} {'seconds':>8s} {'docs/s':>8s} {'chunks/s':>9s}")
    for label, x in (
        ("end-to-end: 1st batch submitted -> last task completed", a),
        (f"raw embedder in this process, threads=1, batches of {raw['batch']}", raw),
        (f"raw embedder in {cores['processes']} processes, batches of {cores['batch']}", cores),
    ):
        p(f"    {label:56s} {x['seconds']:8.1f} {x['docs_per_s']:8.1f} {x['chunks_per_s']:9.1f}")
    ratio = a["ratio_to_raw"]
    p(f"    ratio end-to-end / raw in one process = {100 * a['ratio_to_raw_one_process']:.1f} %")
    p(
        f"    ratio end-to-end / raw on every core = {100 * ratio:.1f} %   "
        f"(target >= {100 * TARGET_INGEST_RATIO:.0f} %)  {_verdict(ratio >= TARGET_INGEST_RATIO)}"
    )
    server_s = a["seconds_server_stamped"]
    p(
        f"    all batches accepted after {a['submit_seconds']:.1f} s; last task completed at "
        f"{server_s if server_s is not None else float('nan'):.1f} s by the server's clock"
    )
    p(f"    {a['rest_polls']} REST task polls; task states {a['task_states']}")
    cpu = a["cpu_seconds"]
    p(
        f"    CPU s during ingest: ingest {cpu['ingest']:.1f}, bridge {cpu['bridge']:.1f}, "
        f"query {cpu['query']:.1f}, bench {cpu['bench']:.1f} (wall {a['seconds']:.1f} s, "
        f"{r['machine']['nproc']} cores)"
    )
    p(
        f"    raw embedder: CPU {raw['cpu_seconds']:.1f} s for {raw['seconds']:.1f} s wall; "
        f"chunking {raw['chunking_seconds']:.2f} s; model load {raw['model_load_seconds']:.1f} s"
    )
    p(
        f"    raw vs stored vectors: max |diff| {vc['max_abs_diff']:.1e} over {vc['compared']} "
        f"chunks (the same texts, chunked the same way)"
    )


def _print_query(r: dict[str, Any]) -> None:
    p = print
    nan = float("nan")
    q, c = r["query"], r["config"]
    p("")
    p(
        f"(b) QUERY  {len(c['namespaces'])} namespaces x ~{c['documents'] // len(c['namespaces'])} "
        f"chunks, top_k={q['top_k']}, {q['timed_queries']} timed queries per row after "
        f"{q['warmup_queries']} warm-up"
    )
    p("    in-process = embed + search the namespaces one after another + merge_hits, in the")
    p("    calling thread, no RPC. gRPC: one channel shared by the worker threads (sync stubs).")
    p("    REST: httpx, one keep-alive client per worker thread.")
    p(f"    {'':60s}CPU ms per query, by process:")
    p(
        f"    {'path':24s} {'conc':>4s} {'p50 ms':>7s} {'p95 ms':>7s} {'p99 ms':>7s} "
        f"{'QPS':>6s}   {'query':>6s} {'bridge':>6s} {'ingest':>6s} {'bench':>6s}"
    )
    for row in q["rows"]:
        s = row["stats"]
        cq = s["cpu_ms_per_query"]
        p(
            f"    {row['path']:24s} {s['concurrency']:4d} {s['p50_ms']:7.2f} {s['p95_ms']:7.2f} "
            f"{s['p99_ms']:7.2f} {s['qps']:6.1f}   {cq.get('query', nan):6.2f} "
            f"{cq.get('bridge', nan):6.2f} {cq.get('ingest', nan):6.2f} {cq['bench']:6.2f}"
        )
    p("    ratios against in-process:")
    for conc in q["concurrencies"]:
        rr = q["ratios"][str(conc)]
        g_ok = _verdict(rr["grpc_p50"] <= TARGET_GRPC_P50_RATIO)
        r_ok = _verdict(rr["rest_p50"] <= TARGET_REST_P50_RATIO)
        p(
            f"      c={conc}: p50 gRPC / in-process = {rr['grpc_p50']:.2f}x "
            f"(target <= {TARGET_GRPC_P50_RATIO}x) {g_ok};  "
            f"p50 REST / in-process = {rr['rest_p50']:.2f}x "
            f"(target <= {TARGET_REST_P50_RATIO}x) {r_ok}"
        )
        p(
            f"           QPS gRPC / in-process = {rr['grpc_qps']:.2f};  "
            f"QPS REST / in-process = {rr['rest_qps']:.2f}"
        )
    d = r["diagnostics"]
    p("    where a c=1 query's time goes (p50s, measured separately):")
    p(
        f"      in-process: embed {d['embed_p50_ms']:.2f} ms + {len(c['namespaces'])} searches "
        f"{d['search_p50_ms']:.2f} ms + merge {d['merge_p50_ms']:.3f} ms"
    )
    p(
        f"      RPC floors: gRPC Health.Check {d['grpc_health_rtt_p50_ms']:.2f} ms; "
        f"REST GET /healthz (bridge only) {d['rest_healthz_rtt_p50_ms']:.2f} ms"
    )
    p(
        "      bridge conversions: JSON body -> QueryRequest "
        f"{d['bridge_request_decode_p50_ms']:.3f} ms, "
        f"QueryResponse -> JSON {d['bridge_response_encode_p50_ms']:.3f} ms"
    )
    p(
        f"      (a reply is {d['query_response_bytes_proto']} B as proto, "
        f"{d['query_response_bytes_json']} B as JSON)"
    )

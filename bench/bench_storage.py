"""End-to-end storage benchmark of reachstore: ingest throughput, query latency/QPS over
REST and gRPC, each next to its in-process limit, and recall@10 - all in one run.

Run from the repository root (the full default run takes a few minutes on 2 cores):

    .venv/bin/python bench/bench_storage.py [--json PATH]

Quick run: ``--ingest-limit 300 --queries 100 --warmup 20``. ``--corpus-dir`` defaults to
``../shared/bench`` next to the repository (corpus-10k.jsonl, queries-10k.jsonl).

What it does:

1. Starts its own ``reachstore up`` (``tests/e2e/system.py``) on free ports in a temporary
   data folder, and stops it at the end - also on Ctrl-C, SIGTERM or an error.
2. (a) Ingest (``_ingest_bench.py``): creates the namespaces over REST, submits every
   chunk of the corpus as a document (``document_id`` = chunk id) in batches of 100 as
   fast as they are accepted, and waits until every task is finished. Then it chunks the
   same texts the same way and embeds them in this process with the same embedder
   (threads=1, calls of ``REACHSTORE_INGEST_BATCH_CHUNKS`` chunks): the raw throughput.
3. Builds in-process indexes from the stored chunks with the query service's own loader.
4. (b) Query (``_query_bench.py``): latency p50/p95/p99 and QPS at each ``--concurrency``
   for the in-process limit (embed + search + merge, no RPC), gRPC and REST, each after
   ``--warmup`` untimed queries; the CPU each process used per query (from /proc); and
   ``_diagnostics.py``'s account of where a c=1 query's time goes.
5. (c) recall@10 of ``source_id`` over all queries through gRPC (and in-process).

Profiling is not its job: run py-spy or perf against the services while it runs.
Apart from ``--json`` it writes only to its temp folder, and it only reads the database.
"""

from __future__ import annotations

import os

# One math thread per worker, as the services do (reachstore_server/query/main.py); must be set
# before numpy loads.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # for tests.e2e.system; bench/ itself is sys.path[0]

import _diagnostics  # noqa: E402
import _query_bench as qb  # noqa: E402
from _ingest_bench import ingest, raw_embedding, raw_embedding_all_cores, vector_check  # noqa: E402
from _report import machine_facts, print_report  # noqa: E402
from _stats import Pids  # noqa: E402

from reachstore.query.v1 import query_service_pb2_grpc as qgrpc  # noqa: E402
from reachstore_server.common.config import ENVIRONMENT, Settings  # noqa: E402
from reachstore_server.embedding import UsemEmbedder  # noqa: E402
from reachstore_server.embedding.forked import processes_wanted  # noqa: E402
from reachstore_server.query.index import configure_threads  # noqa: E402
from reachstore_server.storage.engine import make_engine, make_sessions  # noqa: E402
from reachstore_server.storage.repository import SemanticStore  # noqa: E402
from tests.e2e.system import RunningSystem  # noqa: E402

INGEST_BATCH_CHUNKS = int(ENVIRONMENT["REACHSTORE_INGEST_BATCH_CHUNKS"][0])
EMBED_THREADS = int(ENVIRONMENT["REACHSTORE_EMBED_THREADS"][0])
COMPONENTS = ("query", "ingest", "bridge")
DIAG_ITERATIONS = 300  # per diagnostic p50
REST_WARMUP = 200  # queries that open the bridge's channel and warm its caches


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="reachstore end-to-end benchmark: ingest throughput, query latency and QPS "
        "over REST and gRPC next to their in-process limits, recall@10 (see the module docstring)"
    )
    parser.add_argument(
        "--corpus-dir",
        type=Path,
        default=ROOT.parent / "shared" / "bench",
        help="folder with corpus-10k.jsonl and queries-10k.jsonl (default ../shared/bench)",
    )
    parser.add_argument(
        "--ingest-limit",
        type=int,
        default=None,
        help="ingest only the first N chunks of each namespace (default: all)",
    )
    parser.add_argument("--queries", type=int, default=500, help="timed queries per configuration")
    parser.add_argument(
        "--warmup", type=int, default=100, help="untimed queries before each configuration"
    )
    parser.add_argument("--concurrency", default="1,8", help="comma-separated client concurrencies")
    parser.add_argument(
        "--ingest-only", action="store_true", help="stop after (a), the ingest measurement"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON result here")
    args = parser.parse_args(argv)
    if args.queries < 1 or args.warmup < 0:
        parser.error("--queries must be >= 1 and --warmup >= 0")
    args.concurrencies = [int(x) for x in args.concurrency.split(",") if x.strip()]
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_ingest(
    report: dict[str, Any],
    system: RunningSystem,
    pids: Pids,
    store: SemanticStore,
    names: list[str],
    docs: dict[str, list[dict[str, Any]]],
) -> UsemEmbedder:
    """(a): end to end, then the raw embedder on the same chunks; returns the embedder."""
    log(f"(a) ingesting {report['config']['documents']} documents over REST ...")
    a, order = ingest(system.http_url, store, pids, names, docs)
    log(f"    {a['seconds']:.1f} s end-to-end ({a['chunks_per_s']:.1f} chunks/s)")
    log("    raw embedding of the same texts ...")
    t = time.perf_counter()
    embedder = UsemEmbedder(threads=EMBED_THREADS)
    embedder.embed(["warm-up: loads the model"])
    load_seconds = time.perf_counter() - t
    raw = raw_embedding(embedder, order, INGEST_BATCH_CHUNKS)
    raw["model_load_seconds"] = load_seconds
    log(f"    raw {raw['seconds']:.1f} s ({raw['chunks_per_s']:.1f} chunks/s)")
    cores = len(os.sched_getaffinity(0))
    log(f"    raw embedding of the same texts in {cores} processes ...")
    all_cores = raw_embedding_all_cores(order, INGEST_BATCH_CHUNKS, cores, EMBED_THREADS)
    log(f"    raw, {cores} processes: {all_cores['seconds']:.1f} s "
        f"({all_cores['chunks_per_s']:.1f} chunks/s)")  # fmt: skip
    report["raw_embedding_all_cores"] = all_cores
    a["ratio_to_raw"] = a["chunks_per_s"] / all_cores["chunks_per_s"]
    a["ratio_to_raw_one_process"] = a["chunks_per_s"] / raw["chunks_per_s"]
    report["ingest"] = a
    report["vector_check"] = vector_check(store, names, raw.pop("vectors"))
    report["raw_embedding"] = raw
    return embedder


def run_all_queries(
    args: argparse.Namespace,
    report: dict[str, Any],
    system: RunningSystem,
    pids: Pids,
    store: SemanticStore,
    embedder: UsemEmbedder,
    names: list[str],
    queries: list[str],
    sources: list[str],
    tmp_root: Path,
) -> None:
    """(b) and (c), next to in-process indexes built from the stored chunks."""
    log("building in-process indexes from the stored chunks ...")
    t = time.perf_counter()
    configure_threads(1)
    indexes = qb.load_indexes(store, names, tmp_root / "inprocess-indexes")
    report["inprocess_index"] = {
        "build_seconds": time.perf_counter() - t,
        "chunks": {n: indexes[n].chunk_count for n in names},
        "dense_mode": {n: indexes[n].dense_mode for n in names},
    }
    inproc = qb.InProcess(embedder, indexes)
    run_queries(args, report, system, pids, inproc, names, queries, sources)


def run_queries(
    args: argparse.Namespace,
    report: dict[str, Any],
    system: RunningSystem,
    pids: Pids,
    inproc: qb.InProcess,
    names: list[str],
    queries: list[str],
    sources: list[str],
) -> None:
    """(c) first - its pass over every query is also the global warm-up - then (b)."""
    with qb.connect_grpc(system.query_addr) as channel:
        stub = qgrpc.QueryServiceStub(channel)
        qb.wait_until_served(stub, names, queries[0])
        log(f"(c) recall pass: {len(queries)} queries via gRPC and in-process ...")
        grpc_pass = qb.run_load(qb.grpc_factory(stub, names), queries, len(queries), 1)
        inproc_pass = qb.run_load(inproc.factory(), queries, len(queries), 1)
        pairs = zip(grpc_pass["results"], inproc_pass["results"], strict=True)
        report["recall"] = {
            "queries": len(queries),
            "k": qb.TOP_K,
            "grpc": qb.recall_at_k(grpc_pass["results"], sources),
            "inprocess": qb.recall_at_k(inproc_pass["results"], sources),
            "identical_top10": sum(1 for g, i in pairs if g == i),
        }
        rest = qb.rest_factory(system.http_url, names)
        qb.run_load(rest, queries, min(len(queries), REST_WARMUP), 1)

        # (b) latency and QPS
        paths = [
            ("in-process", "inproc", inproc.factory()),
            ("gRPC", "grpc", qb.grpc_factory(stub, names)),
            ("REST", "rest", rest),
        ]
        rows = []
        for conc in args.concurrencies:
            for label, key, factory in paths:
                log(f"(b) {label} c={conc}: {args.warmup} warm-up + {args.queries} timed ...")
                if args.warmup:
                    qb.run_load(factory, queries, args.warmup, conc)
                run = qb.run_load(factory, queries, args.queries, conc, pids)
                rows.append({"path": label, "key": key, "stats": run["stats"]})
        by = {(row["key"], row["stats"]["concurrency"]): row["stats"] for row in rows}
        ratios = {}
        for conc in args.concurrencies:
            base, g, r = by[("inproc", conc)], by[("grpc", conc)], by[("rest", conc)]
            ratios[str(conc)] = {
                "grpc_p50": g["p50_ms"] / base["p50_ms"],
                "rest_p50": r["p50_ms"] / base["p50_ms"],
                "grpc_qps": g["qps"] / base["qps"],
                "rest_qps": r["qps"] / base["qps"],
            }
        report["query"] = {
            "top_k": qb.TOP_K,
            "timed_queries": args.queries,
            "warmup_queries": args.warmup,
            "concurrencies": args.concurrencies,
            "rows": rows,
            "ratios": ratios,
        }
        log("diagnostics ...")
        n = DIAG_ITERATIONS
        report["diagnostics"] = {
            **_diagnostics.inprocess_stages(inproc, queries[:n]),
            **_diagnostics.rpc_floors(channel, system.http_url, n),
            **_diagnostics.bridge_conversions(stub, names, queries[0], n),
        }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The finally below stops the system; SIGTERM must unwind through it like Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.perf_counter()
    paths = [args.corpus_dir / "corpus-10k.jsonl", args.corpus_dir / "queries-10k.jsonl"]
    for path in paths:
        if not path.is_file():
            print(f"bench: {path} not found (use --corpus-dir)", file=sys.stderr)
            return 2
    corpus, query_rows = (load_jsonl(path) for path in paths)
    names = list(dict.fromkeys(row["namespace"] for row in corpus))
    docs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for row in corpus:
        if args.ingest_limit is None or len(docs[row["namespace"]]) < args.ingest_limit:
            docs[row["namespace"]].append(row)
    queries = [row["text"] for row in query_rows]
    sources = [row["source_id"] for row in query_rows]
    if args.ingest_limit is not None:
        log("note: --ingest-limit makes recall meaningless (most source chunks are not ingested)")

    tmp_root = Path(tempfile.mkdtemp(prefix="reachstore-bench-"))
    report: dict[str, Any] = {
        "machine": machine_facts(),
        "config": {
            "corpus_dir": str(args.corpus_dir.resolve()),
            "namespaces": names,
            "documents": sum(len(v) for v in docs.values()),
            "query_count": len(queries),
            "ingest_limit": args.ingest_limit,
            "embed_threads": EMBED_THREADS,
            "ingest_embed_processes": processes_wanted(
                int(os.environ.get("REACHSTORE_INGEST_EMBED_PROCESSES", "0") or 0)
            ),
            "tmp_root": str(tmp_root),
            "argv": sys.argv[1:],
        },
    }
    system = RunningSystem(tmp_root / "data")
    engine = None
    try:
        log(f"starting reachstore up in {tmp_root} ...")
        t = time.perf_counter()
        system.start()
        # every query process of the system counts as "query" (reachstore_server/cli.py starts
        # one per core: query.pid, query-1.pid, ...)
        pids: Pids = {
            c: system.pids("query") if c == "query" else system.pid(c) for c in COMPONENTS
        }
        report["system"] = {
            "start_seconds": time.perf_counter() - t,
            "pids": pids,
            "http": system.http_url,
            "query_grpc": system.query_addr,
        }
        settings = Settings.from_env({"REACHSTORE_DATA_DIR": str(system.data_dir)})
        engine = make_engine(settings.database_url)
        store = SemanticStore(make_sessions(engine))
        embedder = run_ingest(report, system, pids, store, names, docs)
        if not args.ingest_only:
            run_all_queries(
                args, report, system, pids, store, embedder, names, queries, sources, tmp_root
            )
    except KeyboardInterrupt:
        log("interrupted: stopping the system")
        return 130
    except Exception:
        log("benchmark failed; last lines of the system's output:\n" + "".join(system.output[-40:]))
        raise
    finally:
        if engine is not None:
            engine.dispose()
        log("stopping the system ...")
        code = system.stop()
        if code not in (0, None):
            log(f"reachstore up exited with {code}:\n" + "".join(system.output[-40:]))
        shutil.rmtree(tmp_root, ignore_errors=True)

    report["total_seconds"] = time.perf_counter() - started
    print_report(report)
    print("")
    print("JSON:")
    print(json.dumps(report, default=float))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

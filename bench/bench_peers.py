"""The peer table in one command: reachstore next to the machine's limit and Qdrant Edge.

    .venv/bin/python bench/bench_peers.py [--size 10k] [--repeats 5] [--keep DIR] [--up-arg ARG]

(``make bench-peers``; ``BENCH_PEERS_ARGS`` passes flags.) It starts its own ``reachstore
up`` (``tests/e2e/system.py``) on free ports with a data folder of its own, ingests
``../shared/bench/corpus-<size>.jsonl`` as shipped through the public REST API
(``bench/_ingest_bench.py``: batchCreate, every chunk a document with ``document_id`` = the
corpus id; a document the store refuses for what it holds - the chunk with NUL characters -
fails alone and is listed), then runs ``../shared/peerbench/peers.sh`` with ``--rest`` and
``--grpc`` against it, so the raw, raw_hnsw, qdrant_edge and product rows are measured in
one sitting. It prints peers.sh's output, then one table with every row's ratio to ``raw``
and to ``qdrant_edge`` of the same sitting, and the query tier's resident memory.

``--keep DIR`` keeps the data folder in DIR and, when DIR already holds the ingested corpus,
skips the ingest (a second sitting on the same data). peers.sh keeps its own scratch in
``$PEERBENCH_DATA`` (default here: ``~/.cache/reachstore-peerbench``; its first run installs two
venvs and embeds the corpus once). A benchmark, not a test: it prints figures, never a verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # for tests.e2e.system; bench/ itself is sys.path[0]

import _query_bench as qb  # noqa: E402
from _ingest_bench import ingest  # noqa: E402
from _memory import pss_mib, rss_mib  # noqa: E402

from reachstore.query.v1 import query_service_pb2_grpc as qgrpc  # noqa: E402
from reachstore_server.common.config import Settings  # noqa: E402
from reachstore_server.storage.engine import make_engine, make_sessions  # noqa: E402
from reachstore_server.storage.repository import SemanticStore  # noqa: E402
from tests.e2e.system import RunningSystem  # noqa: E402

PEERBENCH = ROOT.parent / "shared" / "peerbench"
CORPUS_DIR = ROOT.parent / "shared" / "bench"
ROWS = ("raw", "raw_hnsw", "qdrant_edge", "product_grpc", "product_rest")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="reachstore next to its peers, one sitting")
    parser.add_argument("--size", default="10k", choices=("10k", "50k"))
    parser.add_argument("--repeats", type=int, default=5, help="peers.sh --repeats")
    parser.add_argument("--engines", default="raw raw_hnsw qdrant_edge", help="peers.sh --engines")
    parser.add_argument("--keep", type=Path, default=None, help="keep (and reuse) the data here")
    parser.add_argument(
        "--up-arg", action="append", default=[], help="one more `reachstore up` flag (repeatable)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return parser.parse_args(argv)


def _load_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _query_pids(data_dir: Path) -> dict[str, int]:
    """Every query process of the system (``query.pid``, ``query-1.pid``, ...)."""
    run = data_dir / "run"
    return {p.stem: int(p.read_text()) for p in sorted(run.glob("query*.pid"))}


def _ingested(store: SemanticStore, docs: dict[str, list[dict[str, Any]]]) -> bool:
    for name, rows in docs.items():
        info = store.get_namespace("default", name)
        # the corpus's NUL chunk is refused, so one document fewer is "all of it"
        if info is None or info.document_count < len(rows) - 1:
            return False
    return True


def _results(data: Path, size: str) -> dict[str, dict[str, Any]]:
    out = {}
    for row in ROWS:
        path = data / "results" / f"{row}_{size}.json"
        if path.exists():
            out[row] = json.loads(path.read_text())
    return out


def _fig(result: dict[str, Any], c: int, key: str) -> float | None:
    value = (result.get(f"e2e_c{c}") or {}).get(key)
    return float(value) if value is not None else None


def _recall(result: dict[str, Any]) -> float | None:
    for key in ("recall_at_10", "recall@10", "recall"):
        if isinstance(result.get(key), int | float):
            return float(result[key])
    return None


def _table(results: dict[str, dict[str, Any]]) -> list[str]:
    raw, edge = results.get("raw"), results.get("qdrant_edge")
    lines = [
        f"{'row':13s} {'p50 c1':>8s} {'QPS c1':>7s} {'QPS c8':>7s} {'p50 c8':>8s} {'p99 c8':>8s}"
        f" {'recall':>6s}  {'p50 c1/raw':>10s} {'QPS c8/raw':>10s} {'p50 c1/edge':>11s}"
        f" {'QPS c8/edge':>11s} {'p99/p50 c8':>10s}"
    ]

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}x" if a is not None and b else "-"

    def num(v: float | None, fmt: str) -> str:
        return format(v, fmt) if v is not None else "-"

    for row in ROWS:
        r = results.get(row)
        if r is None or "failed" in r:
            continue
        p1, q1, q8 = _fig(r, 1, "p50_ms"), _fig(r, 1, "qps"), _fig(r, 8, "qps")
        p8, p99 = _fig(r, 8, "p50_ms"), _fig(r, 8, "p99_ms")
        rec = _recall(r)
        lines.append(
            f"{row:13s} {num(p1, '8.2f')} {num(q1, '7.0f')} {num(q8, '7.0f')} {num(p8, '8.2f')}"
            f" {num(p99, '8.2f')} {num(rec, '6.3f')}"
            f"  {ratio(p1, raw and _fig(raw, 1, 'p50_ms')):>10s}"
            f" {ratio(q8, raw and _fig(raw, 8, 'qps')):>10s}"
            f" {ratio(p1, edge and _fig(edge, 1, 'p50_ms')):>11s}"
            f" {ratio(q8, edge and _fig(edge, 8, 'qps')):>11s} {ratio(p99, p8):>10s}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    corpus_path = CORPUS_DIR / f"corpus-{args.size}.jsonl"
    queries_path = CORPUS_DIR / f"queries-{args.size}.jsonl"
    corpus = _load_jsonl(corpus_path)
    names = list(dict.fromkeys(row["namespace"] for row in corpus))
    docs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for row in corpus:
        docs[row["namespace"]].append(row)
    first_query = _load_jsonl(queries_path)[0]["text"]

    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="reachstore-peers-"))
    data_dir = root / "data"
    peer_data = Path(
        os.environ.get("PEERBENCH_DATA", Path.home() / ".cache" / "reachstore-peerbench")
    )
    # One query process per core unless the flags say otherwise: the figures are of what
    # this machine allows (the default of `up` is one, while call limits are per process).
    up_args = (
        args.up_arg
        if any(a.startswith("--query-processes") for a in args.up_arg)
        else [
            "--query-processes",
            "0",
            *args.up_arg,
        ]
    )
    system = RunningSystem(data_dir, extra_args=tuple(up_args))
    report: dict[str, Any] = {"size": args.size, "up_args": up_args}
    engine = None
    try:
        log(f"starting reachstore up in {data_dir} {' '.join(up_args)} ...")
        system.start()
        engine = make_engine(Settings.from_env({"REACHSTORE_DATA_DIR": str(data_dir)}).database_url)
        store = SemanticStore(make_sessions(engine))
        if _ingested(store, docs):
            log("the corpus is already ingested in this data folder: no ingest")
        else:
            log(f"ingesting {len(corpus)} chunks over REST (batchCreate) ...")
            pids = {
                "query": system.pids("query"),
                "ingest": system.pid("ingest"),
                "bridge": system.pid("bridge"),
            }
            result, _ = ingest(system.http_url, store, pids, names, docs)
            report["ingest"] = {
                k: result[k]
                for k in ("documents", "chunks", "seconds", "chunks_per_s", "documents_refused")
            }
            log(
                f"    {result['seconds']:.1f} s, {result['chunks_per_s']:.1f} chunks/s; "
                f"refused: {result['documents_refused']}"
            )
        with qb.connect_grpc(system.query_addr) as channel:
            qb.wait_until_served(qgrpc.QueryServiceStub(channel), names, first_query)
        rss_before = {n: rss_mib(p) for n, p in _query_pids(data_dir).items()}
        command = [
            "bash",
            str(PEERBENCH / "peers.sh"),
            "--rest",
            system.http_url,
            "--grpc",
            system.query_addr,
            "--stubs",
            str(ROOT / "clients" / "python"),
            "--grpc-python",
            sys.executable,
            "--repeats",
            str(args.repeats),
            "--engines",
            args.engines,
            "--size",
            args.size,
        ]
        log("running " + " ".join(command))
        env = {**os.environ, "PEERBENCH_DATA": str(peer_data)}
        subprocess.run(command, check=True, env=env)
        rss_after = {n: rss_mib(p) for n, p in _query_pids(data_dir).items()}
        pss_after = {n: pss_mib(p) for n, p in _query_pids(data_dir).items()}
        results = _results(peer_data, args.size)
        chunks = sum(len(v) for v in docs.values())
        report["rows"] = results
        report["query_rss_mib"] = rss_after
        report["query_pss_mib"] = pss_after
        print("")
        print(f"one sitting, {args.size} corpus, medians of {args.repeats} repeats (peers.sh):")
        for line in _table(results):
            print("  " + line)
        total = sum(rss_after.values())
        print(
            f"query tier RSS: {', '.join(f'{n} {v:.0f} MiB' for n, v in rss_after.items())}"
            f" (before the load: {', '.join(f'{v:.0f}' for v in rss_before.values())});"
            f" {total / (chunks / 10_000):.0f} MiB per 10,000 chunks in all"
        )
        # RSS counts the pages the processes share (model file, libraries) once per
        # process; PSS splits them, so its sum is what the tier holds together.
        shared = sum(pss_after.values())
        print(
            f"query tier PSS: {', '.join(f'{n} {v:.0f} MiB' for n, v in pss_after.items())};"
            f" {shared:.0f} MiB together, {shared / (chunks / 10_000):.0f} MiB per 10,000 chunks"
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
        system.stop()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

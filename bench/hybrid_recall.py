"""Recall of hybrid search with the dense index the size picks, against hybrid with exact
dense search, on the same stored namespaces.

    .venv/bin/python bench/hybrid_recall.py --data DIR/data [--size 50k]

``DIR`` is a folder kept by ``bench/bench_peers.py --size 50k --keep DIR``: its query
processes wrote each namespace's index snapshot to ``DIR/data/indexes/``. Each snapshot is
loaded twice in this process: as the service loads it (HNSW above
``reachstore_server/query/index/dense.py``'s ``HNSW_THRESHOLD``, flat below) and with every
namespace forced to exact search. The 500 held-out questions of
``../shared/bench/queries-<size>.jsonl`` go to all namespaces, the answers merge as the
query service merges them (``merge.py``), and recall@10 counts a question whose source
chunk (``source_id`` = the stored ``document_id``) is among the 10. It prints both
recalls, their difference and the time per question in one thread. A benchmark, not a
test: it prints figures, never a verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reachstore_server.common.config import Settings  # noqa: E402
from reachstore_server.embedding import default_embedder  # noqa: E402
from reachstore_server.query.index import NamespaceIndex, configure_threads  # noqa: E402
from reachstore_server.query.index.merge import merge_hits  # noqa: E402
from reachstore_server.storage.engine import make_engine, make_sessions  # noqa: E402
from reachstore_server.storage.repository import SemanticStore  # noqa: E402

CORPUS_DIR = ROOT.parent / "shared" / "bench"
TOP_K = 10


def recall(
    snapshots: list[bytes], questions: list[dict], vectors: list, **config: object
) -> tuple[float, float, list[str]]:
    """(recall@10, ms per question, each namespace's dense mode) with ``config`` passed
    to every index (``hnsw_threshold`` forces a mode)."""
    indexes = [NamespaceIndex.from_snapshot(blob, **config)[0] for blob in snapshots]
    found = 0
    started = time.perf_counter()
    for question, vector in zip(questions, vectors, strict=True):
        per_namespace = {
            str(i): index.search(vector, question["text"], TOP_K) for i, index in enumerate(indexes)
        }
        merged = merge_hits(per_namespace, TOP_K)
        found += any(hit.document_id == question["source_id"] for _, hit in merged)
    elapsed = time.perf_counter() - started
    modes = [f"{index.chunk_count} {index.dense_mode}" for index in indexes]
    return found / len(questions), 1000 * elapsed / len(questions), modes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the kept data folder")
    parser.add_argument("--size", default="50k", choices=("10k", "50k"))
    args = parser.parse_args(argv)
    with (CORPUS_DIR / f"queries-{args.size}.jsonl").open(encoding="utf-8") as f:
        questions = [json.loads(line) for line in f if line.strip()]
    # The corpus's namespaces only, as the benchmark queries them: the folder may hold
    # others (a readiness probe's), and a tiny namespace would take places in the top 10.
    names = list(dict.fromkeys(q["namespace"] for q in questions))
    engine = make_engine(Settings.from_env({"REACHSTORE_DATA_DIR": str(args.data)}).database_url)
    heads = SemanticStore(make_sessions(engine)).namespace_heads("default", names)
    engine.dispose()
    paths = [args.data / "indexes" / f"{heads[n].id}.snap" for n in names if n in heads]
    missing = [str(p) for p in paths if not p.exists()]
    if len(paths) < len(names) or missing:
        parser.error(f"--data: not every namespace of {names} has a snapshot ({missing})")
    configure_threads()
    snapshots = [p.read_bytes() for p in paths]
    vectors = list(default_embedder().embed([q["text"] for q in questions]))
    by_size, ms_by_size, modes = recall(snapshots, questions, vectors)
    exact, ms_exact, _ = recall(snapshots, questions, vectors, hnsw_threshold=10**12)
    print(f"namespaces (chunks, dense index by size): {', '.join(modes)}")
    print(f"hybrid, index by size : recall@10 {by_size:.3f}  {ms_by_size:.2f} ms/question")
    print(f"hybrid, exact dense   : recall@10 {exact:.3f}  {ms_exact:.2f} ms/question")
    print(f"difference            : {by_size - exact:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

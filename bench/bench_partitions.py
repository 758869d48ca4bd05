"""What splitting one namespace into partitions does to its answers (docs/SHARDS.md,
"Partitions"): the shared corpus as one namespace, searched whole and as 2, 4 and 8
partitions as the query tier searches them (each with the namespace's BM25 statistics,
twice as deep as asked, its hits fused again: reachstore_server/query/shards/partial.py),
in one process, the same queries. Printed per partition count: recall@10 of each query's
source chunk, and the share of the whole index's top 10 that the partitions' fused top 10
keeps, for hybrid, dense-only and lexical-only search, and for hybrid search with each
partition's own statistics instead (what the first round of a query saves).

Run from the repository root (about 2 minutes on 2 cores, most of it embedding):

    .venv/bin/python bench/bench_partitions.py [--corpus ../shared/bench/corpus-10k.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reachstore_server.embedding import default_embedder  # noqa: E402
from reachstore_server.query.index import ChunkRecord, NamespaceIndex, TermStats  # noqa: E402
from reachstore_server.query.indexes import PARTITION_DEPTH  # noqa: E402
from reachstore_server.query.shards.partial import fuse  # noqa: E402
from reachstore_server.query.shards.partitions import partition_of  # noqa: E402

SHARED = ROOT.parent / "shared" / "bench"
TOP_K = 10


def _load(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=SHARED / "corpus-10k.jsonl")
    parser.add_argument("--queries", type=Path, default=SHARED / "queries-10k.jsonl")
    parser.add_argument("--partitions", default="2,4,8")
    args = parser.parse_args()
    rows, queries = _load(args.corpus), _load(args.queries)
    embedder = default_embedder(2)
    started = time.monotonic()
    vectors = embedder.embed([r["text"] for r in rows])
    query_vectors = embedder.embed([q["text"] for q in queries])
    print(f"embedded {len(rows)} chunks and {len(queries)} queries in "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
    counts = [int(c) for c in args.partitions.split(",")]
    whole = NamespaceIndex(embedder.dimension)
    split = {c: [NamespaceIndex(embedder.dimension) for _ in range(c)] for c in counts}
    for i, (row, vector) in enumerate(zip(rows, vectors, strict=True)):
        record = ChunkRecord(i + 1, row["id"], 0, row["text"], {}, str(i), vector)
        whole.upsert_document(row["id"], [record])
        for count, parts in split.items():
            parts[partition_of(row["id"], count)].upsert_document(row["id"], [record])
    modes = {
        "hybrid": (True, True, True),
        "dense": (True, False, True),
        "lexical": (False, True, True),
        "hybrid, own statistics": (True, True, False),
    }
    print(f"{'search':24} {'partitions':>10} {'recall@10':>10} {'same top 10':>12}")
    for mode, (use_dense, use_text, shared_stats) in modes.items():
        for count in [1, *counts]:
            found, kept = 0, 0.0
            for query, qv in zip(queries, query_vectors, strict=True):
                vector, text = (qv if use_dense else None), (query["text"] if use_text else "")
                expected = [h.document_id for h in whole.search(vector, text, TOP_K)]
                if count == 1:
                    got = expected
                else:
                    parts = split[count]
                    stats = TermStats.total([p.term_stats(text) for p in parts])
                    hits = [
                        p.search(
                            vector,
                            text,
                            TOP_K * PARTITION_DEPTH,
                            raw=True,
                            lexical_stats=stats if shared_stats else None,
                        )
                        for p in parts
                    ]
                    got = [h.document_id for h in fuse(hits, TOP_K)[:TOP_K]]
                found += query["source_id"] in got
                kept += len(set(expected) & set(got)) / max(len(expected), 1)
            n = len(queries)
            print(f"{mode:24} {count:>10} {found / n:>10.3f} {kept / n:>12.3f}")


if __name__ == "__main__":
    main()

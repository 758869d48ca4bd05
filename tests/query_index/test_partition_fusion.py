"""A namespace split into partitions answers as the whole namespace would
(reachstore_server/query/shards/partial.py): each partition searched with the whole
namespace's BM25 statistics, its hits fused again with the others' by their retrievers'
own scores, ranks as the unsplit index ranks them."""

from __future__ import annotations

import numpy as np
import pytest

from reachstore_server.query.index import NamespaceIndex, PartitionHits, TermStats
from reachstore_server.query.indexes import PARTITION_DEPTH
from reachstore_server.query.shards.partial import fuse
from reachstore_server.query.shards.partitions import partition_of

from .conftest import DIM, chunk, unit_vectors

DOCUMENTS = 2000
PARTS = 4
TOP_K = 10
VOCABULARY = [f"t{i}" for i in range(3000)]


@pytest.fixture(scope="module")
def corpus() -> tuple[NamespaceIndex, list[NamespaceIndex], list[tuple[np.ndarray, str]]]:
    """Texts with Zipf-distributed words of varying length, as real text has (rare words
    decide BM25, and a partition's own statistics of them are far from the whole's)."""
    rng = np.random.default_rng(7)
    weights = 1 / np.arange(1, len(VOCABULARY) + 1)
    weights /= weights.sum()
    vectors = unit_vectors(DOCUMENTS, seed=8)
    whole = NamespaceIndex(DIM)
    parts = [NamespaceIndex(DIM) for _ in range(PARTS)]
    texts = []
    for i in range(DOCUMENTS):
        words = rng.choice(VOCABULARY, size=int(rng.integers(20, 120)), p=weights)
        texts.append(" ".join(words))
        record = chunk(i + 1, f"doc-{i}", texts[-1], vectors[i])
        whole.upsert_document(f"doc-{i}", [record])
        parts[partition_of(f"doc-{i}", PARTS)].upsert_document(f"doc-{i}", [record])
    # Questions about a document: a vector near its own and three of its words.
    noise = unit_vectors(150, seed=9)
    questions = []
    for j in range(150):
        target = (j * 37) % DOCUMENTS
        vector = 0.7 * vectors[target] + 0.3 * noise[j]
        words = rng.choice(texts[target].split(), size=3)
        questions.append((vector / np.linalg.norm(vector), " ".join(words)))
    return whole, parts, questions


def _agreement(corpus, use_vector: bool, use_text: bool, with_stats: bool = True) -> float:  # type: ignore[no-untyped-def]
    whole, parts, questions = corpus
    kept = []
    for vector, text in questions:
        vector = vector if use_vector else None
        text = text if use_text else ""
        expected = {h.document_id for h in whole.search(vector, text, TOP_K)}
        stats = TermStats.total([p.term_stats(text) for p in parts]) if with_stats else None
        found = [
            p.search(vector, text, TOP_K * PARTITION_DEPTH, raw=True, lexical_stats=stats)
            for p in parts
        ]
        assert all(isinstance(f, PartitionHits) for f in found)
        got = {h.document_id for h in fuse(found, TOP_K)[:TOP_K]}
        kept.append(len(expected & got) / TOP_K)
    return float(np.mean(kept))


def test_dense_search_over_partitions_is_the_whole_index_s(corpus) -> None:  # type: ignore[no-untyped-def]
    assert _agreement(corpus, use_vector=True, use_text=False) == 1.0


def test_bm25_with_the_namespace_s_statistics_is_the_whole_index_s(corpus) -> None:  # type: ignore[no-untyped-def]
    # Equal up to exact ties, which a whole index breaks by chunk id.
    assert _agreement(corpus, use_vector=False, use_text=True) >= 0.99
    # Each partition's own statistics rank rare words differently.
    assert _agreement(corpus, use_vector=False, use_text=True, with_stats=False) < 0.95


def test_hybrid_search_over_partitions_keeps_the_whole_index_s_top_ten(corpus) -> None:  # type: ignore[no-untyped-def]
    assert _agreement(corpus, use_vector=True, use_text=True) >= 0.95


def test_merging_by_each_partition_s_own_rank_does_not(corpus) -> None:  # type: ignore[no-untyped-def]
    """What fusing again replaces: every partition has a first hit scoring the same."""
    whole, parts, questions = corpus
    kept = []
    for vector, text in questions:
        expected = {h.document_id for h in whole.search(vector, text, TOP_K)}
        found = [h for p in parts for h in p.search(vector, text, TOP_K)]
        got = {h.document_id for h in sorted(found, key=lambda h: -h.score)[:TOP_K]}
        kept.append(len(expected & got) / TOP_K)
    assert np.mean(kept) < 0.8


def test_raw_search_ranks_as_the_plain_search(corpus) -> None:  # type: ignore[no-untyped-def]
    whole, _, questions = corpus
    for vector, text in questions[:20]:
        plain = whole.search(vector, text, TOP_K)
        raw = whole.search(vector, text, TOP_K, raw=True)
        assert [(h.chunk_id, h.score) for h in plain] == [(h.chunk_id, h.score) for h in raw]
        assert all(h.dense is None and h.lexical is None for h in plain)
        for hit in raw:
            if hit.dense is not None:
                record = whole.document_chunks(hit.document_id)[0]
                assert hit.dense == pytest.approx(float(np.dot(vector, record.vector)), abs=1e-4)

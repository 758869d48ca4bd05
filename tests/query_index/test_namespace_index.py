import threading

import numpy as np
import pytest

from reachstore_server.query.index import CancelToken, NamespaceIndex, SearchCancelled

from .conftest import DIM, chunk, unit_vectors

VECS = unit_vectors(64, seed=100)


def small_index(**config) -> NamespaceIndex:
    idx = NamespaceIndex(DIM, **config)
    idx.upsert_document(
        "doc-a",
        [
            chunk(
                1,
                "doc-a",
                "alpha bravo charlie",
                VECS[1],
                chunk_index=0,
                metadata={"lang": "en", "kind": "note"},
            ),
            chunk(
                2,
                "doc-a",
                "delta echo foxtrot",
                VECS[2],
                chunk_index=1,
                metadata={"lang": "en", "kind": "note"},
            ),
        ],
    )
    idx.upsert_document(
        "doc-b",
        [
            chunk(3, "doc-b", "golf hotel india", VECS[3], metadata={"lang": "de", "kind": "note"}),
        ],
    )
    idx.upsert_document(
        "doc-c",
        [
            chunk(4, "doc-c", "juliet kilo lima", VECS[4], metadata={"lang": "en", "kind": "mail"}),
        ],
    )
    return idx


def test_counts_track_documents_and_chunks():
    idx = small_index()
    assert (idx.document_count, idx.chunk_count) == (3, 4)
    assert [c.chunk_id for c in idx.document_chunks("doc-a")] == [1, 2]
    assert idx.document_chunks("nope") == []


def test_hit_found_first_by_both_retrievers_scores_two_over_sixty_one():
    idx = small_index()
    hits = idx.search(VECS[3], "golf hotel", top_k=3)
    top = hits[0]
    assert (top.chunk_id, top.document_id, top.text) == (3, "doc-b", "golf hotel india")
    assert top.metadata == {"lang": "de", "kind": "note"}
    assert top.score == pytest.approx(2 / 61)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(hits) == 3


def test_dense_or_lexical_alone_can_be_used():
    idx = small_index()
    assert idx.search(None, "juliet", 5)[0].chunk_id == 4
    assert idx.search(VECS[2], "", 1)[0].chunk_id == 2
    assert idx.search(None, "", 5) == []


def test_upsert_replaces_all_chunks_of_a_document():
    idx = small_index()
    idx.upsert_document(
        "doc-a", [chunk(10, "doc-a", "zulu yankee", VECS[10], metadata={"lang": "en"})]
    )
    assert (idx.document_count, idx.chunk_count) == (3, 3)
    assert [c.chunk_id for c in idx.document_chunks("doc-a")] == [10]
    assert idx.search(None, "alpha delta", 5) == []
    assert all(h.chunk_id not in (1, 2) for h in idx.search(VECS[1], "", 10))
    assert idx.search(VECS[10], "zulu", 1)[0].chunk_id == 10


def test_upsert_with_no_chunks_keeps_an_empty_document():
    idx = small_index()
    idx.upsert_document("doc-b", [])
    assert (idx.document_count, idx.chunk_count) == (3, 3)
    assert idx.has_document("doc-b")
    assert idx.search(None, "golf", 5) == []


def test_remove_document_forgets_its_chunks():
    idx = small_index()
    assert idx.remove_document("doc-a") is True
    assert idx.remove_document("doc-a") is False
    assert (idx.document_count, idx.chunk_count) == (2, 2)
    assert idx.search(None, "alpha", 5) == []
    assert {h.chunk_id for h in idx.search(VECS[1], "", 10)} == {3, 4}


def test_filter_requires_equality_on_every_key():
    idx = small_index()
    assert {
        h.chunk_id for h in idx.search(VECS[1], "alpha golf juliet", 10, filter={"lang": "en"})
    } == {1, 2, 4}
    assert {
        h.chunk_id for h in idx.search(VECS[1], "alpha", 10, filter={"lang": "en", "kind": "mail"})
    } == {4}
    assert idx.search(VECS[1], "alpha", 10, filter={"lang": "fr"}) == []
    assert idx.search(VECS[1], "alpha", 10, filter={"lang": "en", "missing": "x"}) == []
    assert len(idx.search(VECS[1], "alpha", 10, filter={})) == 4


def test_filter_index_follows_upserts_and_removals():
    idx = small_index()
    idx.upsert_document(
        "doc-c", [chunk(4, "doc-c", "juliet kilo lima", VECS[4], metadata={"lang": "fr"})]
    )
    assert [h.chunk_id for h in idx.search(VECS[4], "", 5, filter={"lang": "fr"})] == [4]
    assert [h.chunk_id for h in idx.search(VECS[4], "", 5, filter={"kind": "mail"})] == []
    idx.remove_document("doc-c")
    assert idx.search(VECS[4], "", 5, filter={"lang": "fr"}) == []


def test_chunks_with_the_same_content_hash_are_returned_once_keeping_the_best():
    idx = NamespaceIndex(DIM)
    idx.upsert_document("x", [chunk(1, "x", "shared text", VECS[1], content_hash="h")])
    idx.upsert_document(
        "y", [chunk(2, "y", "shared text", VECS[1] * 0.9 + VECS[2] * 0.1, content_hash="h")]
    )
    idx.upsert_document("z", [chunk(3, "z", "other", VECS[3], content_hash="h3")])
    hits = idx.search(VECS[1], "shared", 10)
    assert [h.chunk_id for h in hits] == [1, 3]


def test_top_k_cuts_results_and_must_be_positive():
    idx = small_index()
    assert len(idx.search(VECS[1], "alpha", 2)) == 2
    with pytest.raises(ValueError):
        idx.search(VECS[1], "alpha", 0)


def test_invalid_upserts_are_rejected_and_leave_the_index_unchanged():
    idx = small_index()
    with pytest.raises(ValueError):  # wrong dimension
        idx.upsert_document("doc-a", [chunk(1, "doc-a", "x", np.ones(DIM + 1))])
    with pytest.raises(ValueError):  # chunk id owned by another document
        idx.upsert_document("doc-a", [chunk(3, "doc-a", "x", VECS[5])])
    with pytest.raises(ValueError):  # chunk claims another document
        idx.upsert_document("doc-a", [chunk(20, "doc-b", "x", VECS[5])])
    with pytest.raises(ValueError):  # duplicate chunk ids
        idx.upsert_document(
            "doc-a", [chunk(20, "doc-a", "x", VECS[5]), chunk(20, "doc-a", "y", VECS[6])]
        )
    with pytest.raises(ValueError):  # non-finite vector
        idx.upsert_document("doc-a", [chunk(20, "doc-a", "x", np.full(DIM, np.nan))])
    assert (idx.document_count, idx.chunk_count) == (3, 4)
    assert idx.search(None, "alpha", 1)[0].chunk_id == 1


def test_query_vector_of_wrong_dimension_is_rejected():
    with pytest.raises(ValueError):
        small_index().search(np.ones(DIM - 1, np.float32), "alpha", 3)


def test_records_handed_out_are_isolated_from_the_caller():
    vec = VECS[7].copy()
    meta = {"lang": "en"}
    idx = NamespaceIndex(DIM)
    idx.upsert_document("d", [chunk(1, "d", "text", vec, metadata=meta)])
    vec[:] = 0.0
    meta["lang"] = "xx"
    hit = idx.search(VECS[7], "", 1, filter={"lang": "en"})[0]
    hit.metadata["lang"] = "yy"
    stored = idx.document_chunks("d")[0]
    assert stored.metadata == {"lang": "en"}
    assert np.array_equal(stored.vector, VECS[7])
    with pytest.raises(ValueError):
        idx.document_chunks("d")[0].vector[0] = 1.0  # read-only


# ---- cancellation ----------------------------------------------------------------------


def test_search_with_a_token_cancelled_beforehand_raises():
    token = CancelToken()
    token.cancel()
    assert token.cancelled
    with pytest.raises(SearchCancelled) as info:
        small_index().search(VECS[1], "alpha", 3, cancel=token)
    assert info.value.reason == "cancelled"


def test_search_with_a_deadline_in_the_past_raises():
    import time

    token = CancelToken(deadline=time.monotonic() - 0.001)
    with pytest.raises(SearchCancelled) as info:
        small_index().search(VECS[1], "alpha", 3, cancel=token)
    assert info.value.reason == "deadline"
    assert token.remaining() < 0


def test_cancelling_the_parent_token_cancels_the_child():
    import time

    parent = CancelToken()
    child = CancelToken(deadline=time.monotonic() + 3600, parent=parent)
    child.check()
    parent.cancel()
    with pytest.raises(SearchCancelled):
        child.check()


def test_token_cancelled_during_the_search_stops_it_between_stages():
    class CancelOnNthCheck(CancelToken):
        __slots__ = ("n", "calls")

        def __init__(self, n: int) -> None:
            super().__init__()
            self.n, self.calls = n, 0

        def check(self) -> None:
            self.calls += 1
            if self.calls == self.n:
                self.cancel()
            super().check()

    idx = small_index()
    full = CancelOnNthCheck(10_000)
    idx.search(VECS[1], "alpha bravo", 3, cancel=full)
    assert full.calls >= 5  # the search checks its token at several points
    for n in range(1, full.calls + 1):
        with pytest.raises(SearchCancelled):
            idx.search(VECS[1], "alpha bravo", 3, cancel=CancelOnNthCheck(n))


def test_search_waiting_behind_a_writer_is_cancelled_by_another_thread():
    idx = small_index()
    token = CancelToken()
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(idx.search(VECS[1], "alpha", 3, cancel=token))
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    with idx._lock.write():  # a writer holds the index
        worker = threading.Thread(target=run)
        worker.start()
        token.cancel()
        worker.join(timeout=5)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], SearchCancelled)


# ---- flat -> HNSW ----------------------------------------------------------------------


def test_namespace_growing_past_the_threshold_switches_to_hnsw_and_handles_removals():
    vecs = unit_vectors(400, seed=101)
    idx = NamespaceIndex(DIM, hnsw_threshold=150)
    for i in range(400):
        idx.upsert_document(
            f"d{i}", [chunk(i, f"d{i}", f"text number{i}", vecs[i], metadata={"p": str(i % 2)})]
        )
    assert idx.dense_mode == "hnsw"
    for i in (0, 151, 399):
        assert idx.search(vecs[i], f"number{i}", 3)[0].chunk_id == i
        assert idx.search(vecs[i], "", 1)[0].chunk_id == i  # dense alone, exact match
    for i in range(0, 60):
        idx.remove_document(f"d{i}")
    assert idx.chunk_count == 340
    assert all(h.chunk_id >= 60 for h in idx.search(vecs[10], "number10", 20))
    assert [h.chunk_id for h in idx.search(vecs[61], "", 1, filter={"p": "1"})] == [61]
    assert idx._dense.rebuilds >= 2  # the switch, then a tombstone compaction


def test_reupserting_an_unchanged_document_leaves_no_hnsw_tombstones():
    vecs = unit_vectors(120, seed=102)
    idx = NamespaceIndex(DIM, hnsw_threshold=100)
    for i in range(120):
        idx.upsert_document(f"d{i}", [chunk(i, f"d{i}", f"t{i}", vecs[i], metadata={"v": "1"})])
    assert idx.dense_mode == "hnsw"
    idx.upsert_document("d5", [chunk(5, "d5", "t5", vecs[5], metadata={"v": "2"})])
    assert idx._dense.tombstone_count == 0
    assert [h.chunk_id for h in idx.search(vecs[5], "", 1, filter={"v": "2"})] == [5]


def test_concurrent_searches_and_writes_stay_consistent():
    vecs = unit_vectors(200, seed=103)
    idx = NamespaceIndex(DIM, hnsw_threshold=120)
    for i in range(100):
        idx.upsert_document(f"d{i}", [chunk(i, f"d{i}", f"word{i}", vecs[i])])
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                for i in range(0, 100, 7):
                    hits = idx.search(vecs[i], f"word{i}", 5)
                    assert hits and hits[0].chunk_id == i
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(100, 200):  # crosses the HNSW threshold while readers run
            idx.upsert_document(f"d{i}", [chunk(i, f"d{i}", f"word{i}", vecs[i])])
        for i in range(150, 200):
            idx.remove_document(f"d{i}")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not errors
    assert idx.dense_mode == "hnsw" and idx.chunk_count == 150

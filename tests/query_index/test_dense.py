import numpy as np
import pytest

from reachstore_server.query.index import CancelToken, DenseIndex, SearchCancelled

from .conftest import DIM, unit_vectors


def ids_of(results):
    return [cid for cid, _ in results]


def exact_top(vecs: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int, allowed=None) -> list[int]:
    mask = np.ones(len(ids), bool) if allowed is None else np.isin(ids, list(allowed))
    scores = np.where(mask, vecs @ q, -np.inf)
    order = np.argsort(-scores, kind="stable")[:k]
    return [int(ids[i]) for i in order if mask[i]]


def test_flat_search_is_exact_and_returns_inner_products():
    vecs = unit_vectors(300, seed=1)
    ids = np.arange(1000, 1300)
    idx = DenseIndex(DIM)
    idx.add(ids, vecs)
    q = unit_vectors(1, seed=2)[0]
    res = idx.search(q, 10)
    assert idx.mode == "flat"
    assert ids_of(res) == exact_top(vecs, ids, q, 10)
    assert res[0][1] == pytest.approx(float(vecs[ids_of(res)[0] - 1000] @ q), abs=1e-5)


def test_flat_remove_hides_vectors_and_readding_replaces():
    vecs = unit_vectors(50, seed=3)
    idx = DenseIndex(DIM)
    idx.add(np.arange(50), vecs)
    assert idx.remove([7, 8, 999]) == 2
    assert 7 not in ids_of(idx.search(vecs[7], 50))
    assert len(idx) == 48
    idx.add([9], vecs[20:21])  # id 9 now carries vector 20
    assert ids_of(idx.search(vecs[20], 2)) == sorted([9, 20])
    assert ids_of(idx.search(vecs[9], 1)) != [9]


def test_filtered_search_returns_only_allowed_ids_in_exact_order():
    vecs = unit_vectors(400, seed=4)
    ids = np.arange(400)
    allowed = set(range(0, 400, 3))
    q = unit_vectors(1, seed=5)[0]
    want = exact_top(vecs, ids, q, 10, allowed)
    brute = DenseIndex(DIM)  # 134 allowed <= small_subset: numpy brute force
    brute.add(ids, vecs)
    via_faiss = DenseIndex(DIM, small_subset=0)  # forces the IDSelectorBatch path
    via_faiss.add(ids, vecs)
    assert ids_of(brute.search(q, 10, allowed)) == want
    assert ids_of(via_faiss.search(q, 10, allowed)) == want
    assert brute.search(q, 10, {10_000}) == []


def test_dimension_mismatch_is_rejected():
    idx = DenseIndex(DIM)
    with pytest.raises(ValueError):
        idx.add([1], np.ones((1, DIM + 1), np.float32))
    with pytest.raises(ValueError):
        idx.add([1, 1], unit_vectors(2, seed=0))
    idx.add([1], unit_vectors(1, seed=0))
    with pytest.raises(ValueError):
        idx.search(np.ones(DIM - 1, np.float32), 3)


def test_cancelled_token_raises_before_searching():
    idx = DenseIndex(DIM)
    idx.add([1], unit_vectors(1, seed=0))
    token = CancelToken()
    token.cancel()
    with pytest.raises(SearchCancelled):
        idx.search(unit_vectors(1, seed=1)[0], 1, cancel=token)


def test_growing_past_the_threshold_switches_to_hnsw_and_still_finds_exact_matches():
    vecs = unit_vectors(600, seed=6)
    idx = DenseIndex(DIM, hnsw_threshold=200)
    idx.add(np.arange(150), vecs[:150])
    assert idx.mode == "flat"
    for start in range(150, 600, 50):
        idx.add(np.arange(start, start + 50), vecs[start : start + 50])
    assert idx.mode == "hnsw"
    assert len(idx) == 600
    for i in (0, 149, 150, 599):
        res = idx.search(vecs[i], 5)
        assert res[0][0] == i
        assert res[0][1] == pytest.approx(1.0, abs=1e-5)


def test_hnsw_removals_are_tombstoned_then_compacted_by_a_rebuild():
    vecs = unit_vectors(500, seed=7)
    idx = DenseIndex(DIM, hnsw_threshold=100)
    idx.add(np.arange(500), vecs)
    assert idx.mode == "hnsw"
    rebuilds = idx.rebuilds
    idx.remove(range(0, 40))  # 8 % tombstones: below the 10 % trigger
    assert idx.tombstone_count == 40 and idx.rebuilds == rebuilds
    for i in (0, 39):
        assert i not in ids_of(idx.search(vecs[i], 20))
    assert idx.search(vecs[40], 1)[0][0] == 40
    idx.remove(range(40, 60))  # 12 %: rebuild
    assert idx.rebuilds == rebuilds + 1 and idx.tombstone_count == 0
    assert idx.mode == "hnsw" and len(idx) == 440
    assert 50 not in ids_of(idx.search(vecs[50], 20))
    assert idx.search(vecs[60], 1)[0][0] == 60


def test_readding_a_removed_id_in_hnsw_mode_never_resurrects_the_old_vector():
    vecs = unit_vectors(300, seed=8)
    idx = DenseIndex(DIM, hnsw_threshold=100)
    idx.add(np.arange(300), vecs)
    new_vec = unit_vectors(1, seed=99)
    idx.add([5], new_vec)  # replace id 5
    top_for_old = idx.search(vecs[5], 3)
    assert all(score < 0.5 for _, score in top_for_old)  # the old vector is gone
    res = idx.search(new_vec[0], 1)
    assert res[0][0] == 5 and res[0][1] == pytest.approx(1.0, abs=1e-5)
    assert len(idx) == 300


def test_hnsw_filtered_search_is_exact_for_broad_and_selective_filters():
    vecs = unit_vectors(3000, seed=9)
    ids = np.arange(3000)
    idx = DenseIndex(DIM, hnsw_threshold=1000, small_subset=100)
    idx.add(ids, vecs)
    assert idx.mode == "hnsw"
    q = vecs[1234] * 0.8 + unit_vectors(1, seed=10)[0] * 0.2
    broad = set(range(0, 3000, 2))  # 50 %: HNSW with a selector and raised efSearch
    selective = set(range(0, 3000, 10))  # 10 %: exact scan of the graph's storage
    tiny = set(range(0, 3000, 50))  # 60 ids: numpy brute force
    for allowed in (broad, selective, tiny):
        res = ids_of(idx.search(q, 10, allowed))
        assert set(res) <= allowed
        want = exact_top(vecs, ids, q, 10, allowed)
        assert res[0] == want[0]
        assert len(set(res) & set(want)) >= 9
    assert idx.search(q, 1, broad)[0][0] == 1234


def test_hnsw_index_shrinking_well_below_the_threshold_returns_to_flat():
    vecs = unit_vectors(300, seed=11)
    idx = DenseIndex(DIM, hnsw_threshold=250)
    idx.add(np.arange(300), vecs)
    assert idx.mode == "hnsw"
    idx.remove(range(0, 150))
    assert idx.mode == "flat" and len(idx) == 150
    assert idx.search(vecs[200], 1)[0][0] == 200


def test_install_refuses_a_replacement_built_before_a_later_write():
    idx = DenseIndex(DIM, hnsw_threshold=10, auto_rebuild=False)
    vecs = unit_vectors(30, seed=12)
    idx.add(np.arange(20), vecs[:20])
    assert idx.mode == "flat" and idx.rebuild_due
    replacement = idx.build_replacement()
    idx.add([20], vecs[20:21])
    with pytest.raises(RuntimeError):
        idx.install(replacement)
    idx.install(idx.build_replacement())
    assert idx.mode == "hnsw" and not idx.rebuild_due
    assert idx.search(vecs[20], 1)[0][0] == 20


@pytest.mark.parametrize("threshold", [10_000, 500])  # flat, hnsw
def test_broad_filter_against_the_query_direction_falls_back_to_an_exact_search(threshold):
    vecs = unit_vectors(2000, seed=13)
    ids = np.arange(2000)
    q = unit_vectors(1, seed=14)[0]
    order = np.argsort(vecs @ q)
    allowed = {int(i) for i in order[:1200]}  # 60 %, but only the least similar ones
    idx = DenseIndex(DIM, hnsw_threshold=threshold)
    idx.add(ids, vecs)
    assert ids_of(idx.search(q, 50, allowed)) == exact_top(vecs, ids, q, 50, allowed)

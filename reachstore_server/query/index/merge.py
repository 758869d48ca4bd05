"""Merge per-namespace results into one global top_k."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .records import Hit

__all__ = ["merge_hits"]


def merge_hits(per_namespace: Mapping[str, Sequence[Hit]], top_k: int) -> list[tuple[str, Hit]]:
    """Global top ``top_k`` ``(namespace, hit)`` pairs.

    Order: score descending; equal scores keep the namespace order of ``per_namespace``
    and then each namespace's own rank (a stable, deterministic tiebreak - with
    rank-based scores, ties between namespaces are the rule, not the exception).
    A content hash seen earlier in that order is dropped (the same text stored in two
    namespaces is returned once, from the better-placed one). Empty hashes never
    count as duplicates.
    """
    if top_k <= 0:
        return []
    entries: list[tuple[float, int, int, str, Hit]] = []
    for ns_order, (namespace, hits) in enumerate(per_namespace.items()):
        for rank, hit in enumerate(hits):
            entries.append((-hit.score, ns_order, rank, namespace, hit))
    entries.sort(key=lambda e: (e[0], e[1], e[2]))
    out: list[tuple[str, Hit]] = []
    seen: set[str] = set()
    for _, _, _, namespace, hit in entries:
        if hit.content_hash:
            if hit.content_hash in seen:
                continue
            seen.add(hit.content_hash)
        out.append((namespace, hit))
        if len(out) == top_k:
            break
    return out

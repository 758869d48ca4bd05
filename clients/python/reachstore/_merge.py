"""Merging a partial answer with the answer of its retried namespaces (``retry_failed``).

The merge follows the query service's own rules, so the result reads as if one search
had covered every namespace that answered: results by score, best first; equal scores in
the order the namespaces were asked, then each answer's own rank; the same chunk text
from two namespaces kept once (from the better-placed one); at most ``top_k``.
Completeness is recomputed over the namespaces first asked.
"""

from __future__ import annotations

from reachstore._models import Failure, QueryMeta, SearchResponse, SearchResult


def retryable_namespaces(resp: SearchResponse) -> list[str]:
    """The failed namespaces worth asking again, in the order they were asked."""
    return [f.namespace for f in resp.meta.namespaces_failed if f.retryable and f.namespace]


def merge(first: SearchResponse, again: SearchResponse, top_k: int) -> SearchResponse:
    asked = first.meta.namespaces_queried
    order = {name: index for index, name in enumerate(asked)}
    retried = set(again.meta.namespaces_queried)

    def place(entry: tuple[int, SearchResult]) -> tuple[float, int, int]:
        rank, result = entry
        return (-result.score, order.get(result.namespace, len(order)), rank)

    candidates = sorted(
        [*enumerate(first.results), *enumerate(again.results)],
        key=place,
    )
    results: list[SearchResult] = []
    seen: set[str] = set()
    for _, result in candidates:
        if result.text:
            if result.text in seen:
                continue
            seen.add(result.text)
        results.append(result)
        if len(results) == top_k:
            break

    answered = set(first.meta.namespaces_succeeded) | set(again.meta.namespaces_succeeded)
    succeeded = [name for name in asked if name in answered]
    failed: list[Failure] = [
        f for f in first.meta.namespaces_failed if f.namespace not in retried
    ] + list(again.meta.namespaces_failed)
    failed.sort(key=lambda f: order.get(f.namespace, len(order)))
    return SearchResponse(
        results=results,
        meta=QueryMeta(
            coverage_ratio=len(succeeded) / len(asked) if asked else 0.0,
            namespaces_queried=list(asked),
            namespaces_succeeded=succeeded,
            namespaces_failed=failed,
        ),
        request=first.request,
    )

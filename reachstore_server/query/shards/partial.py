"""One namespace's answer from the answers of its partitions (docs/SHARDS.md, "Partitions").

Each partition of a split namespace is searched like a namespace of its own, possibly by
another member, and may fail on its own. The namespace then answers with what its
partitions found, and when some did not answer it is a partial answer: its hits count, and
it also has one PartialFailure, the first missing partition's (so its category, retry and
reason stay those of what actually went wrong), naming every missing partition in
``structured_data``. A refusal of the whole namespace (it does not exist for the caller,
it was searched too often, its vectors are of another model) is the namespace's answer,
whatever the other partitions found.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from google.protobuf import json_format

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore_server.common import errors
from reachstore_server.query.index import RRF_K, Hit, candidate_count
from reachstore_server.query.shards.partitions import Part

# Failures that hold for the namespace, not for one partition of it.
WHOLE_NAMESPACE_REFUSALS = frozenset(
    {
        errors.NAMESPACE_UNAVAILABLE.code,
        errors.EMBEDDING_MODEL_MISMATCH.code,
        errors.NAMESPACE_RATE_LIMITED.code,
    }
)


@dataclasses.dataclass(frozen=True)
class PartlyAnswered:
    """A namespace some of whose partitions answered: their hits, and its failure."""

    hits: list[Hit]
    failure: pf_pb2.PartialFailure
    share: float  # of its partitions, those that answered


Answer = list[Hit] | pf_pb2.PartialFailure | PartlyAnswered


def _naming_parts(
    failure: pf_pb2.PartialFailure, missing: list[Part], count: int, failures: list
) -> pf_pb2.PartialFailure:
    out = pf_pb2.PartialFailure()
    out.CopyFrom(failure)
    data = json_format.MessageToDict(failure.structured_data)
    data.update(
        partitions=count,
        partitions_missing=sorted(p.index for p in missing),
        partitions_answered=count - len(missing),
    )
    out.structured_data.Clear()
    out.structured_data.update(data)
    out.retryable = all(f.retryable for f in failures)
    if out.retryable:
        out.retry_after_ms = max(f.retry_after_ms for f in failures)
    else:
        out.ClearField("retry_after_ms")
    out.message = (
        f"{len(missing)} of {count} partitions of namespace {failure.namespace!r} did not "
        f"answer; the first: {failure.message}"
    )
    return out


_NONE = np.zeros(0)


def _ranker(scores: Sequence[np.ndarray]) -> Callable[[float], float]:
    """A score's rank among all the partitions' candidate scores of one retriever: one
    more than those above it, and candidates with the very same score share the middle
    of their places (a whole index breaks such ties by chunk id, which a partition's
    candidate scores do not carry)."""
    ordered = np.sort(np.concatenate([_NONE, *(np.asarray(x, dtype=np.float64) for x in scores)]))

    def rank(score: float) -> float:
        below = int(np.searchsorted(ordered, score, side="left"))
        not_above = int(np.searchsorted(ordered, score, side="right"))
        tied = max(not_above - below, 1)
        return len(ordered) - not_above + 1 + (tied - 1) / 2

    return rank


def fuse(found: Sequence[list[Hit]], top_k: int) -> list[Hit]:
    """The hits of a namespace's partitions in one ranking, best first.

    Each partition ranked its own hits by reciprocal rank fusion of its retrievers' ranks.
    Ranks within a partition do not compare (every partition has a first hit), so each hit
    is ranked again as the whole namespace's index would have ranked it: a retriever's
    rank of a hit is one more than the candidates of that retriever, in every partition,
    that scored above it, and it counts only within the retriever's first
    ``candidate_count(top_k)``, as in index/namespace_index.py. For cosine this is the
    whole index's rank exactly; BM25 scores use each partition's own statistics, which
    are close to the namespace's since documents are spread over partitions by a hash.
    """
    n = candidate_count(top_k)
    rank_dense = _ranker([getattr(p, "dense_scores", _NONE) for p in found])
    rank_lexical = _ranker([getattr(p, "lexical_scores", _NONE) for p in found])
    hits = [h for p in found for h in p]
    fused = []
    for hit in hits:
        score = 0.0
        for raw, ranker in ((hit.dense, rank_dense), (hit.lexical, rank_lexical)):
            if raw is not None and (rank := ranker(raw)) <= n:
                score += 1.0 / (RRF_K + rank)
        fused.append(score)
    order = sorted(range(len(hits)), key=lambda i: -fused[i])  # stable: lower partition first
    return [dataclasses.replace(hits[i], score=fused[i]) for i in order]


def combine(outcomes: Mapping[Part, list[Hit] | pf_pb2.PartialFailure], top_k: int) -> Answer:
    """The namespace's answer from its partitions' (every partition of one count)."""
    if len(outcomes) == 1:
        return next(iter(outcomes.values()))
    ordered = sorted(outcomes.items())
    failed = [(p, o) for p, o in ordered if isinstance(o, pf_pb2.PartialFailure)]
    for _, failure in failed:
        if failure.error_code in WHOLE_NAMESPACE_REFUSALS:
            return failure
    hits = fuse([o for _, o in ordered if not isinstance(o, pf_pb2.PartialFailure)], top_k)
    if not failed:
        return hits
    count = len(ordered)
    missing = [p for p, _ in failed]
    failure = _naming_parts(failed[0][1], missing, count, [f for _, f in failed])
    if len(failed) == count:
        return failure
    return PartlyAnswered(hits, failure, (count - len(failed)) / count)

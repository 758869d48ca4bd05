"""Searches of namespaces this member does not hold, sent to a member that does.

The member that takes a query from a caller is its router: it searches the namespaces it
holds itself and sends each other namespace to one of that namespace's owners, grouped so
that one owner gets one call for all the namespaces it is asked (it embeds the question
once). The call is the public ``QueryService.Query`` with the caller's own credentials, so
the owner checks the key's tenant and grants exactly as for a direct call, plus a signed
hop header (``membership.py``) that makes the owner search locally without charging or
auditing the caller twice.

An owner that cannot be reached, or whose index of the namespace is still loading, is
passed over for the next owner of that namespace; when none is left, the namespace is a
``SHARD_UNAVAILABLE`` failure (transient) naming the owners tried, and the rest of the
answer stands. The hop's deadline is what is left of the caller's.

A namespace split into partitions (``partitions.py``) is routed partition by partition,
each to its own owners; a call asks an owner for at most one partition of a namespace, so
its answer for that namespace is that partition's. Which partition is asked travels in a
header signed together with the request.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import grpc
import numpy as np

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from reachstore_server.common import errors
from reachstore_server.common.grpc_server import GRPC_OPTIONS
from reachstore_server.common.tls import TlsFiles, secure_aio_channel
from reachstore_server.query.fanout import PREPARE_ALLOWANCE_S
from reachstore_server.query.index import Hit, PartitionHits, TermStats
from reachstore_server.query.shards.membership import (
    HOP_HEADER,
    Membership,
    hop_of,
    metadata_value,
)
from reachstore_server.query.shards.partitions import (
    PARTS_HEADER,
    Part,
    decode_parts,
    encode_parts,
    split_label,
)
from reachstore_server.storage.query_members import Member

# Metadata of the caller's call that the owner needs: the credentials and the trace.
FORWARDED_METADATA = ("authorization", "traceparent", "tracestate", "x-trace-id")
# Failures an owner reports that another owner may not have: try the next one.
_TRY_NEXT = {errors.INDEX_REBUILDING.code, errors.SERVICE_OVERLOADED.code}
# An owner that has not answered after this share of the time left is asked again through
# the namespace's next owner (a hedged request): a paused or stalled process keeps its
# socket open and never refuses, so waiting for it to fail would spend the whole budget.
# Answers take milliseconds; a third of a 2 s budget is far beyond a healthy owner.
HEDGE_AFTER_SHARE = 1 / 3

Outcome: TypeAlias = list[Hit] | pf_pb2.PartialFailure


def forwarded_metadata(metadata: Sequence[tuple[str, str | bytes]]) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in metadata if k in FORWARDED_METADATA and isinstance(v, str))


def shard_unavailable(label: str, tried: Sequence[Member], reason: str) -> pf_pb2.PartialFailure:
    namespace, part = split_label(label)
    what = f"namespace {namespace!r}"
    data: dict[str, Any] = {"namespace": namespace}
    if part.count > 1:
        what = f"partition {part.label} of {what}"
        data.update(partition=part.index, partitions=part.count)
    return errors.make_failure(
        errors.SHARD_UNAVAILABLE,
        f"no query process holding {what} answered ({reason})",
        structured_data={
            **data,
            "reason": "shard_unavailable",
            "owners_tried": [m.member_id for m in tried],
            "detail": reason,
        },
        namespace=namespace,
    )


# What a forwarded partition search tells besides its results, as JSON in trailing metadata
# of the answer (the public message stays what every caller gets): each result's cosine and
# BM25 score (``"hits": [[dense, lexical], ...]``, null where a retriever did not return
# it) and, per namespace, the scores of every candidate of each retriever (``"lists":
# {namespace: [dense, lexical]}``, float64 arrays in base64). The router fuses the
# partitions' hits again by them (partial.py).
RAW_SCORES_TRAILER = "x-reachstore-raw-scores"


def _b64(values: np.ndarray) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f8").tobytes()).decode()


def _from_b64(value: object) -> np.ndarray:
    try:
        return np.frombuffer(base64.b64decode(str(value), validate=True), dtype="<f8")
    except ValueError:
        return np.zeros(0)


def raw_scores(hits: Sequence[Hit], lists: Mapping[str, PartitionHits]) -> str:
    return json.dumps(
        {
            "hits": [[h.dense, h.lexical] for h in hits],
            "lists": {n: [_b64(p.dense_scores), _b64(p.lexical_scores)] for n, p in lists.items()},
        },
        separators=(",", ":"),
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _partition_hits(
    response: pb.QueryResponse, trailers: Sequence[tuple[str, str | bytes]] | None
) -> dict[str, PartitionHits]:
    """The answer's hits by namespace, as partition searches (with their scores)."""
    try:
        raw = json.loads(metadata_value(trailers or (), RAW_SCORES_TRAILER) or "{}")
    except (ValueError, RecursionError):
        raw = {}
    scores = raw.get("hits") if isinstance(raw, dict) else None
    if not isinstance(scores, list) or len(scores) != len(response.results):
        scores = [[None, None]] * len(response.results)
    lists = raw.get("lists") if isinstance(raw, dict) else None
    lists = lists if isinstance(lists, dict) else {}
    out: dict[str, PartitionHits] = {}
    for name in response.meta.namespaces_succeeded:
        pair = lists.get(name)
        dense, lexical = pair if isinstance(pair, list) and len(pair) == 2 else ("", "")
        out[name] = PartitionHits((), _from_b64(dense), _from_b64(lexical))
    for result, score in zip(response.results, scores, strict=True):
        pair = score if isinstance(score, list) and len(score) == 2 else [None, None]
        hit = dataclasses.replace(_hit(result), dense=_number(pair[0]), lexical=_number(pair[1]))
        out.setdefault(result.namespace, PartitionHits()).append(hit)
    return out


# A forwarded call that asks only for the BM25 statistics of the partitions it names, for
# the query's terms (the first of a split namespace's two rounds, docs/SHARDS.md); they
# come back in TERM_STATS_TRAILER. The second round's searches carry the sums over all the
# partitions in LEXICAL_STATS_HEADER. Both are JSON ``{namespace: [live, total_len, {term:
# df}]}``.
STAGE_HEADER = "x-reachstore-stage"
TERM_STATS_STAGE = "term-stats"
TERM_STATS_TRAILER = "x-reachstore-term-stats"
LEXICAL_STATS_HEADER = "x-reachstore-lexical-stats"
# Statistics larger than this (a very long question) are not sent: the partitions then
# score with their own, as an approximation. gRPC refuses headers past 8 KiB by default.
MAX_STATS_HEADER = 4096
# What a hop's signature covers besides the request.
SIGNED_HEADERS = (PARTS_HEADER, STAGE_HEADER, LEXICAL_STATS_HEADER)
# Answers of members carry the retrievers' scores in trailing metadata: let them be large.
_CHANNEL_OPTIONS = [*GRPC_OPTIONS, ("grpc.max_metadata_size", 1 << 20)]


def encode_stats(stats: Mapping[str, TermStats]) -> str:
    return json.dumps(
        {name: [s.live, s.total_len, s.df] for name, s in stats.items()}, separators=(",", ":")
    )


def decode_stats(value: str) -> dict[str, TermStats]:
    """The statistics of a header or trailer; what does not parse is left out (both are
    from members: a hop header is signed, a trailer answers a member's own call)."""
    try:
        data = json.loads(value) if value else {}
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
        return {}
    out: dict[str, TermStats] = {}
    for name, entry in data.items() if isinstance(data, dict) else ():
        if (
            isinstance(entry, list)
            and len(entry) == 3
            and all(isinstance(x, int) for x in entry[:2])
            and isinstance(entry[2], dict)
            and all(isinstance(v, int) for v in entry[2].values())
        ):
            out[name] = TermStats(entry[0], entry[1], dict(entry[2]))
    return out


def signed_headers(metadata: Sequence[tuple[str, str | bytes]]) -> dict[str, str]:
    return {k: v for k in SIGNED_HEADERS if (v := metadata_value(metadata, k))}


def _signed_body(request: pb.QueryRequest, headers: Mapping[str, str]) -> bytes:
    """What a hop's signature covers: the request, and the hop's own headers."""
    body = request.SerializeToString(deterministic=True)
    extra = "\n".join(f"{k}={headers[k]}" for k in SIGNED_HEADERS if headers.get(k))
    return body + b"\x00" + extra.encode() if extra else body


def _hit(result: pb.QueryResult) -> Hit:
    # The chunk's content hash is the SHA-256 of its text (reachstore_server/ingest/worker.py),
    # so duplicates across namespaces still merge once (index/merge.py).
    return Hit(
        chunk_id=-1,
        document_id=result.document_id,
        chunk_index=result.chunk_index,
        text=result.text,
        metadata=dict(result.metadata),
        content_hash=hashlib.sha256(result.text.encode()).hexdigest(),
        score=result.score,
    )


class Router:
    def __init__(self, membership: Membership, tls: TlsFiles) -> None:
        self.membership = membership
        self._tls = tls
        self._stubs: dict[str, pb_grpc.QueryServiceStub] = {}
        self._channels: list[grpc.aio.Channel] = []
        self.forwarded_calls = 0
        self.failovers = 0
        # How many partitions searches of a (tenant, namespace) go to; set by the member's
        # ownership (ownership.py) from what the follow loop last read.
        self.partitions: Callable[[str, str], int] = lambda tenant, name: 1

    def _stub(self, address: str) -> pb_grpc.QueryServiceStub:
        stub = self._stubs.get(address)  # on the event loop: no lock
        if stub is None:
            # The owner's answer may be as large as any the tier gives a caller.
            channel = secure_aio_channel(address, self._tls, _CHANNEL_OPTIONS)
            self._channels.append(channel)
            stub = self._stubs[address] = pb_grpc.QueryServiceStub(channel)
        return stub

    def is_forwarded(self, request: object, metadata: Sequence[tuple[str, str | bytes]]) -> bool:
        """The gRPC layer's check (``Guards.forwarded``): a Query another member signed."""
        header = hop_of(metadata)
        if not header or not isinstance(request, pb.QueryRequest):
            return False
        return self.membership.verify(header, _signed_body(request, signed_headers(metadata)))

    @staticmethod
    def parts_asked(metadata: Sequence[tuple[str, str | bytes]]) -> dict[str, Part]:
        """The partitions a forwarded search asks for, by namespace (only read once the
        hop verified, ``is_forwarded``: the header is signed with the request)."""
        return decode_parts(metadata_value(metadata, PARTS_HEADER))

    def _hop(
        self,
        member: Member,
        hop: pb.QueryRequest,
        headers: Mapping[str, str],
        metadata: tuple[tuple[str, str], ...],
        timeout_s: float,
    ) -> Any:
        """The call of ``hop`` to ``member``, signed with ``headers`` (those with a value),
        which go with it: the owner takes it as a forwarded call only if both are as sent."""
        headers = {k: v for k, v in headers.items() if v}
        signed = self.membership.sign(_signed_body(hop, headers))
        return self._stub(member.address).Query(
            hop, timeout=timeout_s, metadata=(*metadata, (HOP_HEADER, signed), *headers.items())
        )

    async def term_stats(
        self,
        request: pb.QueryRequest,
        owners: Mapping[str, Sequence[Member]],
        metadata: tuple[tuple[str, str], ...],
        deadline: float,
    ) -> dict[str, TermStats]:
        """The BM25 statistics of each partition of ``owners`` (label -> its owners, best
        first) for the query's terms, from its first owner that answers by ``deadline``.
        A partition none answered for is left out."""

        async def first(label: str, candidates: Sequence[Member]) -> TermStats | None:
            for i, member in enumerate(candidates):
                # An owner that does not answer (paused, stalled) gets half the time left,
                # so that the next one is still asked in time; the last gets all of it.
                left = deadline - time.monotonic()
                until = deadline if i == len(candidates) - 1 else deadline - left / 2
                found = await self._ask_stats(member, request, label, metadata, until)
                if found is not None:
                    return found
            return None

        labels = list(owners)
        found = await asyncio.gather(*(first(label, owners[label]) for label in labels))
        return {label: s for label, s in zip(labels, found, strict=True) if s is not None}

    async def _ask_stats(
        self,
        member: Member,
        request: pb.QueryRequest,
        label: str,
        metadata: tuple[tuple[str, str], ...],
        deadline: float,
    ) -> TermStats | None:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return None
        name, part = split_label(label)
        hop = pb.QueryRequest(
            namespaces=[name],
            query=request.query,
            allow_partial=True,
            timeout_ms=1 + int(left_s * 1000),
        )
        headers = {PARTS_HEADER: encode_parts({name: part}), STAGE_HEADER: TERM_STATS_STAGE}
        try:
            call = self._hop(member, hop, headers, metadata, left_s)
            await call
            trailers = await call.trailing_metadata()
        except grpc.aio.AioRpcError:
            return None
        return decode_stats(metadata_value(trailers or (), TERM_STATS_TRAILER)).get(name)

    async def search(
        self,
        request: pb.QueryRequest,
        owners: Mapping[str, Sequence[Member]],
        metadata: tuple[tuple[str, str], ...],
        deadline: float,
        lexical_stats: Mapping[str, TermStats] | None = None,
    ) -> dict[str, Outcome | BaseException]:
        """Every namespace of ``owners`` (name -> its owners, best first) searched by its
        first owner that answers: one call per owner asked, the calls concurrent. An owner
        that refuses or cannot be reached is passed over at once; one that has not
        answered after ``HEDGE_AFTER_SHARE`` of the time left (paused, stalled, loading)
        is asked again through the next owner, and the first answer wins. A namespace no
        owner answered in time gets ``TimeoutError``."""
        search = _Search(self, request, owners, metadata, deadline, lexical_stats or {})
        return await search.run()

    async def _ask(
        self,
        member: Member,
        request: pb.QueryRequest,
        labels: list[str],
        metadata: tuple[tuple[str, str], ...],
        deadline: float,
        lexical_stats: Mapping[str, TermStats],
    ) -> dict[str, Outcome] | str | TimeoutError:
        """One owner's answer for ``labels`` (at most one partition of each namespace), why
        there was none, or the time running out."""
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return TimeoutError(",".join(labels))
        label_by_name = {split_label(label)[0]: label for label in labels}
        asked = {n: p for n, p in (split_label(label) for label in labels) if p.count > 1}
        hop = pb.QueryRequest()
        hop.CopyFrom(request)
        del hop.namespaces[:]
        hop.namespaces.extend(label_by_name)
        hop.allow_partial = True
        hop.timeout_ms = max(1, int(left_s * 1000))
        headers = {PARTS_HEADER: encode_parts(asked)}
        stats = {n: lexical_stats[n] for n in asked if n in lexical_stats}
        if stats and len(encoded := encode_stats(stats)) <= MAX_STATS_HEADER:
            headers[LEXICAL_STATS_HEADER] = encoded
        self.forwarded_calls += 1
        try:
            # The owner's namespaces get what is left of the budget, after its own read and
            # embedding, as this member's own do: wait for that too, so that one slow
            # namespace ends as its NAMESPACE_TIMEOUT and not with its neighbours' answers.
            call = self._hop(member, hop, headers, metadata, left_s + PREPARE_ALLOWANCE_S)
            response = await call
            trailers = await call.trailing_metadata() if asked else None
        except grpc.aio.AioRpcError as exc:
            # An owner answers within the budget, its slow namespaces as NAMESPACE_TIMEOUT
            # (it was given the allowance above): no answer at all is an owner that is not
            # there for this query (paused, stalled), as unreachable as a refused connection.
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return f"{member.member_id} at {member.address}: no answer within the budget"
            return f"{member.member_id} at {member.address}: {exc.code().name}"
        hits: dict[str, list[Hit]] = {name: [] for name in response.meta.namespaces_succeeded}
        for result in response.results:
            hits.setdefault(result.namespace, []).append(_hit(result))
        if asked:  # partitions: their hits with the scores they are fused again by
            hits.update(
                (n, found) for n, found in _partition_hits(response, trailers).items() if n in asked
            )
        out: dict[str, Outcome] = dict(hits)
        for failure in response.meta.namespaces_failed:
            out[failure.namespace] = failure
        return {label_by_name[n]: o for n, o in out.items() if n in label_by_name}

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()


class _Search:
    """One query's forwarded namespaces, as they move from owner to owner."""

    def __init__(
        self,
        router: Router,
        request: pb.QueryRequest,
        owners: Mapping[str, Sequence[Member]],
        metadata: tuple[tuple[str, str], ...],
        deadline: float,
        lexical_stats: Mapping[str, TermStats],
    ) -> None:
        self._router, self._request, self._metadata = router, request, metadata
        self._lexical_stats = lexical_stats
        self._deadline = deadline
        self._untried = {name: list(candidates) for name, candidates in owners.items()}
        self._tried: dict[str, list[Member]] = {name: [] for name in owners}
        self._reasons = {name: "no owner is serving" for name in owners}
        self._asking = {name: 0 for name in owners}  # calls under way that include it
        self._calls: dict[asyncio.Future[Any], list[str]] = {}
        self.outcomes: dict[str, Outcome | BaseException] = {}

    def _ask_next(self, labels: Sequence[str]) -> None:
        """Asks each label's next untried owner: one call per owner, or more when it is
        asked for several partitions of one namespace (one partition per call)."""
        groups: dict[str, list[tuple[Member, list[str], set[str]]]] = {}
        for label in labels:
            member = self._untried[label].pop(0)
            self._tried[label].append(member)
            self._asking[label] += 1
            name = split_label(label)[0]
            calls = groups.setdefault(member.member_id, [])
            free = next((c for c in calls if name not in c[2]), None)
            if free is None:
                calls.append((member, [label], {name}))
            else:
                free[1].append(label)
                free[2].add(name)
        for member, group, _ in (c for calls in groups.values() for c in calls):
            call = asyncio.ensure_future(
                self._router._ask(
                    member,
                    self._request,
                    group,
                    self._metadata,
                    self._deadline,
                    self._lexical_stats,
                )
            )
            self._calls[call] = group

    def _open(self) -> list[str]:
        return [name for name in self._asking if name not in self.outcomes]

    async def run(self) -> dict[str, Outcome | BaseException]:
        self._ask_next([name for name in self._asking if self._untried[name]])
        for name in self._open():
            if not self._asking[name]:
                self.outcomes[name] = shard_unavailable(name, [], self._reasons[name])
        hedge_at = time.monotonic() + HEDGE_AFTER_SHARE * (self._deadline - time.monotonic())
        try:
            while self._calls and self._open():
                hedging = [n for n in self._open() if self._untried[n]]
                wait_s = max(0.0, hedge_at - time.monotonic()) if hedging else None
                done, _ = await asyncio.wait(
                    self._calls, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:  # the owners asked are slow: ask the next ones as well
                    self._router.failovers += len(hedging)
                    self._ask_next(hedging)
                    left = self._deadline - time.monotonic()
                    hedge_at = time.monotonic() + HEDGE_AFTER_SHARE * max(left, 0.0)
                    continue
                for call in done:
                    self._settle(self._calls.pop(call), call.result())
        finally:
            for call in self._calls:
                call.cancel()
        return self.outcomes

    def _settle(self, names: list[str], answer: dict[str, Outcome] | str | TimeoutError) -> None:
        for name in names:
            self._asking[name] -= 1
            if name in self.outcomes:
                continue  # another owner answered first
            outcome = answer.get(name) if isinstance(answer, dict) else None
            if isinstance(answer, str):
                self._reasons[name] = answer
            retry = outcome is None or (
                isinstance(outcome, pf_pb2.PartialFailure) and outcome.error_code in _TRY_NEXT
            )
            if outcome is not None and not (retry and (self._untried[name] or self._asking[name])):
                self.outcomes[name] = outcome
            elif self._asking[name]:
                continue  # another owner is still on it
            elif self._untried[name] and not isinstance(answer, TimeoutError):
                self._router.failovers += 1
                self._ask_next([name])
            elif isinstance(answer, TimeoutError):
                self.outcomes[name] = answer
            else:
                tried, reason = self._tried[name], self._reasons[name]
                self.outcomes[name] = shard_unavailable(name, tried, reason)

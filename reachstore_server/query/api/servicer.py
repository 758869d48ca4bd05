"""QueryService: the partial-success query, and document reads.

A query searches each namespace under its own time budget (``fanout.py`` says how they
share threads). A namespace that fails becomes one PartialFailure; the rest are returned.
A search that runs out of time is told to stop through its CancelToken (checked between
and inside the search stages), so timed-out work does not keep running in the background.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import time
from collections.abc import Mapping

import grpc
import numpy as np

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from reachstore_server.common import errors, limits, names, paging
from reachstore_server.common.auth import Caller
from reachstore_server.common.identity import caller
from reachstore_server.common.limits import RequestLimiter
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.embedding import Embedder
from reachstore_server.query.api.namespace_health import NamespaceHealthCalls
from reachstore_server.query.coverage import CoverageLog
from reachstore_server.query.fanout import PREPARE_ALLOWANCE_S, FanOut
from reachstore_server.query.index import (
    CancelToken,
    Hit,
    PartitionHits,
    SearchCancelled,
    TermStats,
    merge_hits,
)
from reachstore_server.query.indexes import IndexManager, Slot
from reachstore_server.query.metrics import QueryMetrics
from reachstore_server.query.shards.partial import Answer, PartlyAnswered, combine
from reachstore_server.query.shards.partitions import (
    WHOLE,
    Part,
    label_of,
    parts,
    split_label,
    unit_key,
)
from reachstore_server.query.shards.router import (
    LEXICAL_STATS_HEADER,
    RAW_SCORES_TRAILER,
    STAGE_HEADER,
    TERM_STATS_STAGE,
    TERM_STATS_TRAILER,
    Router,
    decode_stats,
    encode_stats,
    forwarded_metadata,
    raw_scores,
    signed_headers,
)
from reachstore_server.storage.query_members import Member
from reachstore_server.storage.repository import DocumentInfo, NamespaceInfo, SemanticStore

log = logging.getLogger(__name__)

# Share of a namespace's budget that may be spent waiting for its index to load.
REBUILD_WAIT_SHARE = 0.8


# Share of the budget the first round of a query over split namespaces may take.
STATS_SHARE = 0.25


def _any_partition(labels: list[str]) -> bool:
    return any(split_label(label)[1].count > 1 for label in labels)


class _Rebuilding(Exception):
    """The namespace's index did not finish loading within its share of the budget."""


def _exists(outcome: Answer | None) -> bool:
    """Whether a namespace's outcome says it exists for the caller."""
    if isinstance(outcome, pf_pb2.PartialFailure):
        return outcome.error_code != errors.NAMESPACE_UNAVAILABLE.code
    return outcome is not None


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What every namespace search of one query shares."""

    vector: np.ndarray
    text: str
    top_k: int
    metadata_filter: dict[str, str] | None
    budget_ms: int
    deadline: float  # time.monotonic() seconds
    # A search another member forwarded does not wait for an index still loading: that
    # member asks the namespace's other owner instead (docs/SHARDS.md).
    waits_for_index: bool = True
    # Of a namespace split into partitions: its BM25 statistics, summed over them.
    lexical_stats: Mapping[str, TermStats] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Shared:
    """What the prelude of a query prepares for its namespace jobs."""

    heads: dict[str, NamespaceInfo] = dataclasses.field(default_factory=dict)
    plan: _Plan | None = None


def _document_to_pb(doc: DocumentInfo) -> pb.Document:
    return pb.Document(
        namespace=doc.namespace,
        document_id=doc.document_id,
        text=doc.text,
        metadata=doc.metadata,
        chunk_count=doc.chunk_count,
        content_sha256=doc.content_sha256,
        updated_at=rfc3339(doc.updated_at),
    )


class QueryServicer(NamespaceHealthCalls, pb_grpc.QueryServiceServicer):
    def __init__(
        self,
        store: SemanticStore,
        indexes: IndexManager,
        embedder: Embedder,
        pool: concurrent.futures.ThreadPoolExecutor,
        *,
        default_timeout_ms: int,
        cap_timeout_ms: int,
        max_namespaces: int,
        fault_delay_ms: Mapping[str, int] | None = None,
        metrics: QueryMetrics | None = None,
        limiter: RequestLimiter | None = None,
        coverage: CoverageLog | None = None,
        router: Router | None = None,
    ) -> None:
        self._store = store
        self._indexes = indexes
        self._embedder = embedder
        self._pool = pool
        self._default_ms = default_timeout_ms
        self._cap_ms = cap_timeout_ms
        self._max_namespaces = max_namespaces
        self._fault_delay_ms = dict(fault_delay_ms or {})
        self.metrics = metrics or QueryMetrics()
        self._limiter = limiter
        self.coverage = coverage or CoverageLog()
        # Set when namespaces are sharded over several query processes (docs/SHARDS.md).
        self._router = router
        self._rotation = 0
        # Queries under way in this process (on the event loop: no lock). One alone spreads
        # its namespaces over two threads (fanout.py).
        self._in_flight = 0

    # --- request checks -----------------------------------------------------------------

    def _namespaces(self, request: pb.QueryRequest) -> list[str]:
        if request.namespace:
            raise errors.ReachstoreError(
                errors.DEPRECATED_FIELD,
                "namespace: the singular field is deprecated; send a list in namespaces",
                field="namespace",
                structured_data={
                    "use_instead": "namespaces",
                    "example": {"namespaces": [request.namespace[:64]]},
                },
            )
        names.check_count(request.namespaces, "namespaces", names.MAX_NAMESPACE_ENTRIES)
        requested = list(dict.fromkeys(request.namespaces))  # de-duplicate, keep order
        if not requested:
            raise errors.invalid("namespaces", 'at least one namespace is required (or ["*"])')
        if "*" in requested and len(requested) > 1:
            raise errors.invalid("namespaces", '"*" must be the only entry')
        for i, name in enumerate(requested):
            if name != "*" and not names.is_namespace_name(name):
                raise errors.invalid(
                    f"namespaces[{i}]", f"must be {names.NAMESPACE_RULE}", value=name[:80]
                )
        if len(requested) > self._max_namespaces:
            raise errors.over_limit(
                errors.TOO_MANY_NAMESPACES,
                "namespaces",
                "namespaces",
                self._max_namespaces,
                len(requested),
            )
        return requested

    def _check(self, request: pb.QueryRequest) -> tuple[int, int]:
        if not request.query.strip():
            raise errors.invalid("query", "is required and must not be blank")
        if len(request.query) > names.MAX_QUERY_CHARS:
            raise errors.invalid(
                "query",
                f"at most {names.MAX_QUERY_CHARS} characters",
                limit=names.MAX_QUERY_CHARS,
                actual=len(request.query),
            )
        if not 0 <= request.top_k <= names.MAX_TOP_K:
            raise errors.invalid(
                "top_k", f"must be between 1 and {names.MAX_TOP_K} (0 means {names.DEFAULT_TOP_K})"
            )
        # The filter is a metadata match: the same caps as a document's metadata.
        names.check_metadata(request.filter, "filter")
        if request.timeout_ms < 0:
            raise errors.invalid("timeout_ms", "must not be negative (0 means the server default)")
        budget_ms = min(request.timeout_ms or self._default_ms, self._cap_ms)
        return request.top_k or names.DEFAULT_TOP_K, budget_ms

    # --- the query ------------------------------------------------------------------------

    async def Query(
        self, request: pb.QueryRequest, context: grpc.aio.ServicerContext
    ) -> pb.QueryResponse:
        who = caller(context)
        requested = self._namespaces(request)
        top_k, budget_ms = self._check(request)
        loop = asyncio.get_running_loop()
        if requested == ["*"]:
            requested = await loop.run_in_executor(self._pool, self._expand_star, who)
        # Read only when sharded: a process that is not a member ignores the hop headers.
        metadata = (context.invocation_metadata() or ()) if self._router is not None else ()
        forwarded = self._router is not None and self._router.is_forwarded(request, metadata)
        if forwarded:
            assert self._router is not None
            asked = self._router.parts_asked(metadata)
            local = {label_of(n, asked.get(n, WHOLE)): (n, asked.get(n, WHOLE)) for n in requested}
            remote: dict[str, list[Member]] = {}
        else:
            local, remote = self._route(who.tenant, requested)
        hop = signed_headers(metadata) if forwarded else {}
        if hop.get(STAGE_HEADER) == TERM_STATS_STAGE:
            return await self._term_stats_answer(who, request, local, context)
        lexical_stats = decode_stats(hop.get(LEXICAL_STATS_HEADER, ""))
        search_ms = budget_ms  # what the searches have; the first round, if any, comes off it
        if not forwarded and request.query.strip() and _any_partition([*local, *remote]):
            started = time.monotonic()
            lexical_stats = await self._namespace_stats(
                who,
                request,
                local,
                remote,
                forwarded_metadata(metadata),
                started + budget_ms / 1000 * STATS_SHARE,
            )
            search_ms = max(1, budget_ms - int((time.monotonic() - started) * 1000))
        local_names = list(dict.fromkeys(name for name, _ in local.values()))
        shared = _Shared()
        tokens = {label: CancelToken() for label in local}

        def prelude() -> None:
            # The two reads every query needs, done by the thread that then runs the
            # searches: which namespaces exist (with their change seq, for read-your-
            # writes) and the question's vector. Each namespace's budget starts after them.
            if not local:  # every namespace is searched by other members
                return
            heads = self._store.namespace_heads(who.tenant, local_names)
            # A namespace outside the key's grants reads exactly like one that does not exist.
            shared.heads = {n: h for n, h in heads.items() if who.may_use(n)}
            shared.plan = _Plan(
                vector=self._embedder.embed([request.query])[0],
                text=request.query,
                top_k=top_k,
                metadata_filter=dict(request.filter) or None,
                budget_ms=search_ms,
                deadline=time.monotonic() + search_ms / 1000,
                waits_for_index=not forwarded,
                lexical_stats=lexical_stats,
            )

        jobs = {
            label: functools.partial(
                self._namespace_job, shared, who.tenant, name, part, tokens[label]
            )
            for label, (name, part) in local.items()
        }
        elsewhere = None
        if remote:
            assert self._router is not None
            elsewhere = asyncio.ensure_future(
                self._router.search(
                    request,
                    remote,
                    forwarded_metadata(metadata),
                    time.monotonic() + search_ms / 1000,
                    lexical_stats,
                )
            )
        self._in_flight += 1
        fanout = FanOut(self._pool, jobs, prelude=prelude, spread=self._in_flight == 1)
        try:
            finished: dict[str, list[Hit] | pf_pb2.PartialFailure | BaseException] = dict(
                await fanout.results(search_ms / 1000, PREPARE_ALLOWANCE_S)
            )
            if elsewhere is not None:
                finished.update(await elsewhere)
        finally:
            self._in_flight -= 1
            fanout.close()
            if elsewhere is not None:
                elsewhere.cancel()
        if fanout.prelude_error is not None:
            raise fanout.prelude_error
        by_part: dict[str, dict[Part, list[Hit] | pf_pb2.PartialFailure]] = {}
        for label, outcome in finished.items():
            name, part = split_label(label)
            token = tokens.get(label) or CancelToken()
            by_part.setdefault(name, {})[part] = self._outcome(name, outcome, token, budget_ms)
        outcomes = {name: combine(found, top_k) for name, found in by_part.items()}
        # What other members searched counts as well, unless it does not exist (or is not
        # this key's to see): a namespace missing for want of its shard is what the health
        # view is for.
        elsewhere_names = {split_label(label)[0] for label in remote}
        counted = set(shared.heads) | {n for n in elsewhere_names if _exists(outcomes.get(n))}
        self._count_coverage(who.tenant, counted, outcomes)
        return self._respond(request, requested, outcomes, top_k, context if forwarded else None)

    async def _namespace_stats(
        self,
        who: Caller,
        request: pb.QueryRequest,
        local: Mapping[str, tuple[str, Part]],
        remote: Mapping[str, list[Member]],
        metadata: tuple[tuple[str, str], ...],
        deadline: float,
    ) -> dict[str, TermStats]:
        """The first round of a query over namespaces split into partitions: the BM25
        statistics of every partition for the question's terms, summed per namespace, so
        that each partition scores as the whole namespace would (docs/SHARDS.md). A
        partition that does not answer by ``deadline`` is left out of the sums."""
        assert self._router is not None
        split_local = {label: u for label, u in local.items() if u[1].count > 1}
        split_remote = {label: o for label, o in remote.items() if split_label(label)[1].count > 1}
        asked = None
        if split_remote:
            asked = asyncio.ensure_future(
                self._router.term_stats(request, split_remote, metadata, deadline)
            )
        found: dict[str, TermStats] = {}
        try:
            if split_local:
                found.update(
                    await asyncio.get_running_loop().run_in_executor(
                        self._pool, self._term_stats, who, request.query, split_local
                    )
                )
            if asked is not None:
                found.update(await asked)
        finally:
            if asked is not None:
                asked.cancel()
        by_name: dict[str, list[TermStats]] = {}
        for label, stats in found.items():
            by_name.setdefault(split_label(label)[0], []).append(stats)
        return {name: TermStats.total(stats) for name, stats in by_name.items()}

    def _term_stats(
        self, who: Caller, text: str, units: Mapping[str, tuple[str, Part]]
    ) -> dict[str, TermStats]:
        """The BM25 statistics of the partitions of ``units`` held here and loaded, by
        label. In a worker thread."""
        names = [n for n in dict.fromkeys(n for n, _ in units.values()) if who.may_use(n)]
        heads = self._store.namespace_heads(who.tenant, names)
        out: dict[str, TermStats] = {}
        for label, (name, part) in units.items():
            head = heads.get(name)
            slot = self._indexes.held(who.tenant, head, part) if head is not None else None
            if slot is not None and slot.ready.is_set() and slot.index is not None:
                out[label] = slot.index.term_stats(text)
        return out

    async def _term_stats_answer(
        self,
        who: Caller,
        request: pb.QueryRequest,
        local: Mapping[str, tuple[str, Part]],
        context: grpc.aio.ServicerContext,
    ) -> pb.QueryResponse:
        """A member's first round (``_namespace_stats``) asked of this one: no search,
        the statistics in the answer's trailing metadata."""
        found = await asyncio.get_running_loop().run_in_executor(
            self._pool, self._term_stats, who, request.query, local
        )
        stats = {split_label(label)[0]: s for label, s in found.items()}
        context.set_trailing_metadata(((TERM_STATS_TRAILER, encode_stats(stats)),))
        meta = pb.QueryMeta(
            namespaces_queried=list(request.namespaces), namespaces_succeeded=list(stats)
        )
        return pb.QueryResponse(meta=meta)

    def _route(
        self, tenant: str, requested: list[str]
    ) -> tuple[dict[str, tuple[str, Part]], dict[str, list[Member]]]:
        """Which searches this member runs itself, and which other members run, each with
        the owners to ask, best first (docs/SHARDS.md). A search is of a namespace, or of
        one partition of a namespace split into partitions; both are keyed by their label
        (``partitions.label_of``). Everything is local when namespaces are not sharded.
        Not asked for a search another member forwarded: it was routed once already."""
        router = self._router
        if router is None:
            return {name: (name, WHOLE) for name in requested}, {}
        view = router.membership.view
        me = view.me
        self._rotation += 1
        local: dict[str, tuple[str, Part]] = {}
        remote: dict[str, list[Member]] = {}
        for name in requested:
            for part in parts(router.partitions(tenant, name)):
                label = label_of(name, part)
                owners = view.route_owners(unit_key(tenant, name, part))
                others = [m for m in owners if m.member_id != me]
                if not owners or (
                    len(others) < len(owners)
                    and (not others or self._indexes.ready_named(tenant, name, part))
                ):
                    # This member owns it and can answer now, or no member serves yet
                    # and this one answers as an unsharded replica.
                    local[label] = (name, part)
                    continue
                # Spread the searches over the owners; the others stay behind as the
                # ones tried when the first does not answer.
                turn = self._rotation % len(others)
                remote[label] = others[turn:] + others[:turn]
        return local, remote

    def _count_coverage(
        self,
        tenant: str,
        existing: set[str],
        outcomes: Mapping[str, Answer],
    ) -> None:
        """Feeds ListNamespaceHealth: which existing namespaces answered and which did not
        (a namespace that answered in part counts as missing)."""
        answered, missing = [], []
        for name, outcome in outcomes.items():
            if name not in existing:
                continue
            if isinstance(outcome, PartlyAnswered):
                outcome = outcome.failure
            if isinstance(outcome, pf_pb2.PartialFailure):
                missing.append((name, int(outcome.category), outcome.error_code))
            else:
                answered.append(name)
        self.coverage.record(tenant, answered, missing)

    def _expand_star(self, who: Caller) -> list[str]:
        return [n for n in self._store.namespace_names(who.tenant) if who.may_use(n)]

    def _namespace_job(
        self, shared: _Shared, tenant: str, name: str, part: Part, query_token: CancelToken
    ) -> list[Hit] | pf_pb2.PartialFailure:
        """One namespace (or one partition of it), in a worker thread: its refusal, or its
        search. A namespace's search is charged to its rate once, by its first partition."""
        head = shared.heads.get(name)
        refusal = self._refusal(name, head)
        if refusal is None and part.index == 0:
            refusal = self._over_rate(tenant, name)
        if refusal is not None:
            return refusal
        assert head is not None and shared.plan is not None
        cancel = CancelToken(deadline=shared.plan.deadline, parent=query_token)
        if shared.plan.waits_for_index:
            slot = self._indexes.slot(tenant, head, part)
        else:
            # Forwarded by another member: searched only if held here. Loading it for one
            # search would hold, for three leases, an index placed on other members.
            held = self._indexes.held(tenant, head, part)
            if held is None:
                raise _Rebuilding(name)
            slot = held
        return self._search_blocking(slot, head.change_seq, shared.plan, cancel)

    def _refusal(self, name: str, head: NamespaceInfo | None) -> pf_pb2.PartialFailure | None:
        """The failure of a namespace that cannot be searched at all, if it cannot."""
        if head is None:
            return errors.namespace_unavailable_failure(name)
        if head.embedding_model != self._embedder.model_id:
            return errors.make_failure(
                errors.EMBEDDING_MODEL_MISMATCH,
                f"namespace {name!r} holds vectors of another model than the server runs",
                structured_data={
                    "namespace": name,
                    "namespace_model": head.embedding_model,
                    "server_model": self._embedder.model_id,
                },
                namespace=name,
            )
        return None

    def _over_rate(self, tenant: str, name: str) -> pf_pb2.PartialFailure | None:
        """The per-namespace search rate: only this namespace fails, the others answer."""
        wait = self._limiter.check_namespace(tenant, name) if self._limiter else 0.0
        if wait <= 0:
            return None
        return errors.make_failure(
            errors.NAMESPACE_RATE_LIMITED,
            f"namespace {name!r} is searched more often than allowed",
            retry_after_ms=limits.retry_after_ms(wait),
            structured_data={"namespace": name},
            namespace=name,
        )

    def _outcome(
        self,
        name: str,
        outcome: list[Hit] | pf_pb2.PartialFailure | BaseException,
        cancel: CancelToken,
        budget_ms: int,
    ) -> list[Hit] | pf_pb2.PartialFailure:
        """A namespace's hits, or its failure."""
        if isinstance(outcome, _Rebuilding):
            return errors.make_failure(
                errors.INDEX_REBUILDING,
                f"namespace {name!r} is rebuilding its index",
                structured_data={"namespace": name, "index_state": "rebuilding"},
                namespace=name,
            )
        if isinstance(outcome, TimeoutError | SearchCancelled):
            cancel.cancel()  # a running search stops at its next checkpoint
            self.metrics.cancelled.inc()
            return errors.make_failure(
                errors.NAMESPACE_TIMEOUT,
                f"namespace {name!r} did not answer within {budget_ms} ms",
                structured_data={"namespace": name, "timeout_ms": budget_ms},
                namespace=name,
            )
        if isinstance(outcome, BaseException):
            # A bug or a broken index costs this namespace, not the whole answer.
            log.error("search of namespace %s failed", name, exc_info=outcome)
            return errors.make_failure(
                errors.INTERNAL,
                f"searching namespace {name!r} failed unexpectedly; it was logged",
                structured_data={"namespace": name},
                namespace=name,
            )
        return outcome

    def _respond(
        self,
        request: pb.QueryRequest,
        requested: list[str],
        outcomes: Mapping[str, Answer],
        top_k: int,
        forwarded: grpc.aio.ServicerContext | None = None,
    ) -> pb.QueryResponse:
        """The answer. ``forwarded``: the context of a search another member sent, which
        gets the retrievers' scores of partition hits in its trailing metadata."""
        per_namespace: dict[str, list[Hit]] = {}
        failed = []
        answered = 0.0  # namespaces, a partly answered one by the share of it that did
        succeeded = []
        for name in requested:
            outcome = outcomes[name]
            if isinstance(outcome, pf_pb2.PartialFailure):
                failed.append(outcome)
            elif isinstance(outcome, PartlyAnswered):
                failed.append(outcome.failure)
                per_namespace[name] = outcome.hits
                answered += outcome.share
            else:
                per_namespace[name] = outcome
                succeeded.append(name)
                answered += 1
        coverage = answered / len(requested) if requested else 0.0
        self.metrics.observe(coverage, failed)
        if failed and request.HasField("allow_partial") and not request.allow_partial:
            # Retrying the whole query only helps when every missing part may come back.
            retryable = all(f.retryable for f in failed)
            raise errors.ReachstoreError(
                errors.INCOMPLETE_RESULT if retryable else errors.INCOMPLETE_RESULT_PERMANENT,
                f"{len(failed)} of {len(requested)} namespaces did not answer and allow_partial "
                "is false",
                retry_after_ms=max(f.retry_after_ms for f in failed) if retryable else None,
                structured_data={
                    "coverage_ratio": coverage,
                    "namespaces_failed": [f.namespace for f in failed],
                },
                details=failed,
            )
        # A partition's hits are fused again by the member that forwarded its search (with
        # the other partitions'): it gets all of them, not the first top_k of the call.
        lists = {n: h for n, h in per_namespace.items() if isinstance(h, PartitionHits)}
        if forwarded is not None and lists:
            top_k = sum(len(h) for h in per_namespace.values())
        merged = merge_hits(per_namespace, top_k)
        results = [
            pb.QueryResult(
                namespace=name,
                document_id=hit.document_id,
                chunk_index=hit.chunk_index,
                text=hit.text,
                score=hit.score,
                metadata=hit.metadata,
            )
            for name, hit in merged
        ]
        if forwarded is not None and lists:
            forwarded.set_trailing_metadata(
                ((RAW_SCORES_TRAILER, raw_scores([h for _, h in merged], lists)),)
            )
        meta = pb.QueryMeta(
            coverage_ratio=coverage,
            namespaces_queried=requested,
            namespaces_succeeded=succeeded,
            namespaces_failed=failed,
        )
        return pb.QueryResponse(results=results, meta=meta)

    def _search_blocking(
        self, slot: Slot, head_seq: int, plan: _Plan, cancel: CancelToken
    ) -> list[Hit]:
        """One namespace's whole search, in a worker thread."""
        if not slot.ready.is_set():
            # A loading index gets most of the budget; if it is still not there the answer
            # is "rebuilding, retry later", which tells the agent more than a timeout would.
            waited = plan.budget_ms / 1000 * REBUILD_WAIT_SHARE if plan.waits_for_index else 0
            if not slot.ready.wait(waited):
                raise _Rebuilding(slot.name)
        cancel.check()
        self._indexes.catch_up(slot, head_seq, cancel)
        delay_ms = self._fault_delay_ms.get(slot.name, 0)
        if delay_ms:  # fault injection for drills and tests; empty in production
            until = time.monotonic() + delay_ms / 1000
            while time.monotonic() < until:
                cancel.check()
                time.sleep(0.005)
        return self._indexes.search(
            slot,
            plan.vector,
            plan.text,
            plan.top_k,
            plan.metadata_filter,
            cancel,
            plan.lexical_stats.get(slot.name),
        )

    # --- documents --------------------------------------------------------------------------

    async def _namespace(self, who: Caller, name: str) -> NamespaceInfo:
        """The namespace, if it exists and the caller's key may use it; both refusals are
        the same answer after the same look-up (anti-enumeration)."""
        names.check_namespace_name(name, "namespace")
        heads = await asyncio.to_thread(self._store.namespace_heads, who.tenant, [name])
        if name not in heads or not who.may_use(name):
            raise errors.namespace_unavailable(name)
        return heads[name]

    async def GetDocument(
        self, request: pb.GetDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetDocumentResponse:
        who = caller(context)
        tenant = who.tenant
        await self._namespace(who, request.namespace)
        names.check_document_id(request.document_id, "document_id")
        doc = await asyncio.to_thread(
            self._store.get_document, tenant, request.namespace, request.document_id
        )
        if doc is None:
            raise errors.document_not_found(request.namespace, request.document_id)
        return pb.GetDocumentResponse(document=_document_to_pb(doc))

    async def ListDocuments(
        self, request: pb.ListDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDocumentsResponse:
        who = caller(context)
        tenant = who.tenant
        namespace = await self._namespace(who, request.namespace)
        size = names.page_size(request.page_size)
        after = paging.decode_token(request.page_token)
        rows = await asyncio.to_thread(
            self._store.list_documents, tenant, namespace.id, namespace.name, size + 1, after
        )
        page = rows[:size]
        token = paging.encode_token(page[-1].document_id) if len(rows) > size else ""
        return pb.ListDocumentsResponse(
            documents=[_document_to_pb(d) for d in page], next_page_token=token
        )

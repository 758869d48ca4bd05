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
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import grpc

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from reachstore_server.common import errors
from reachstore_server.common.grpc_server import GRPC_OPTIONS
from reachstore_server.common.tls import TlsFiles, secure_aio_channel
from reachstore_server.query.fanout import PREPARE_ALLOWANCE_S
from reachstore_server.query.index import Hit
from reachstore_server.query.shards.membership import HOP_HEADER, Membership, hop_of
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


def shard_unavailable(
    namespace: str, tried: Sequence[Member], reason: str
) -> pf_pb2.PartialFailure:
    return errors.make_failure(
        errors.SHARD_UNAVAILABLE,
        f"no query process holding namespace {namespace!r} answered ({reason})",
        structured_data={
            "namespace": namespace,
            "reason": "shard_unavailable",
            "owners_tried": [m.member_id for m in tried],
            "detail": reason,
        },
        namespace=namespace,
    )


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

    def _stub(self, address: str) -> pb_grpc.QueryServiceStub:
        stub = self._stubs.get(address)  # on the event loop: no lock
        if stub is None:
            # The owner's answer may be as large as any the tier gives a caller.
            channel = secure_aio_channel(address, self._tls, GRPC_OPTIONS)
            self._channels.append(channel)
            stub = self._stubs[address] = pb_grpc.QueryServiceStub(channel)
        return stub

    def is_forwarded(self, request: object, metadata: Sequence[tuple[str, str | bytes]]) -> bool:
        """The gRPC layer's check (``Guards.forwarded``): a Query another member signed."""
        header = hop_of(metadata)
        if not header or not isinstance(request, pb.QueryRequest):
            return False
        return self.membership.verify(header, request.SerializeToString(deterministic=True))

    async def search(
        self,
        request: pb.QueryRequest,
        owners: Mapping[str, Sequence[Member]],
        metadata: tuple[tuple[str, str], ...],
        deadline: float,
    ) -> dict[str, Outcome | BaseException]:
        """Every namespace of ``owners`` (name -> its owners, best first) searched by its
        first owner that answers: one call per owner asked, the calls concurrent. An owner
        that refuses or cannot be reached is passed over at once; one that has not
        answered after ``HEDGE_AFTER_SHARE`` of the time left (paused, stalled, loading)
        is asked again through the next owner, and the first answer wins. A namespace no
        owner answered in time gets ``TimeoutError``."""
        return await _Search(self, request, owners, metadata, deadline).run()

    async def _ask(
        self,
        member: Member,
        request: pb.QueryRequest,
        names: list[str],
        metadata: tuple[tuple[str, str], ...],
        deadline: float,
    ) -> dict[str, Outcome] | str | TimeoutError:
        """One owner's answer for ``names``, why there was none, or the time running out."""
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return TimeoutError(",".join(names))
        hop = pb.QueryRequest()
        hop.CopyFrom(request)
        del hop.namespaces[:]
        hop.namespaces.extend(names)
        hop.allow_partial = True
        hop.timeout_ms = max(1, int(left_s * 1000))
        signed = self.membership.sign(hop.SerializeToString(deterministic=True))
        self.forwarded_calls += 1
        try:
            # The owner's namespaces get what is left of the budget, after its own read and
            # embedding, as this member's own do: wait for that too, so that one slow
            # namespace ends as its NAMESPACE_TIMEOUT and not with its neighbours' answers.
            response = await self._stub(member.address).Query(
                hop,
                timeout=left_s + PREPARE_ALLOWANCE_S,
                metadata=(*metadata, (HOP_HEADER, signed)),
            )
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
        out: dict[str, Outcome] = dict(hits)
        for failure in response.meta.namespaces_failed:
            out[failure.namespace] = failure
        return out

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
    ) -> None:
        self._router, self._request, self._metadata = router, request, metadata
        self._deadline = deadline
        self._untried = {name: list(candidates) for name, candidates in owners.items()}
        self._tried: dict[str, list[Member]] = {name: [] for name in owners}
        self._reasons = {name: "no owner is serving" for name in owners}
        self._asking = {name: 0 for name in owners}  # calls under way that include it
        self._calls: dict[asyncio.Future[Any], list[str]] = {}
        self.outcomes: dict[str, Outcome | BaseException] = {}

    def _ask_next(self, names: Sequence[str]) -> None:
        """Asks each name's next untried owner, one call per owner."""
        groups: dict[str, tuple[Member, list[str]]] = {}
        for name in names:
            member = self._untried[name].pop(0)
            self._tried[name].append(member)
            self._asking[name] += 1
            groups.setdefault(member.member_id, (member, []))[1].append(name)
        for member, group in groups.values():
            call = asyncio.ensure_future(
                self._router._ask(member, self._request, group, self._metadata, self._deadline)
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

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
from typing import TypeAlias

import grpc

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc
from reachstore_server.common import errors
from reachstore_server.common.tls import TlsFiles, secure_aio_channel
from reachstore_server.query.index import Hit
from reachstore_server.query.shards.membership import HOP_HEADER, Membership, hop_of
from reachstore_server.storage.query_members import Member

# Metadata of the caller's call that the owner needs: the credentials and the trace.
FORWARDED_METADATA = ("authorization", "traceparent", "tracestate", "x-trace-id")
# Failures an owner reports that another owner may not have: try the next one.
_TRY_NEXT = {errors.INDEX_REBUILDING.code, errors.SERVICE_OVERLOADED.code}

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
            channel = secure_aio_channel(address, self._tls)
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
        first owner that answers: one call per owner asked, the calls concurrent. A
        namespace whose time ran out gets ``TimeoutError``."""
        pending = {name: list(candidates) for name, candidates in owners.items()}
        tried: dict[str, list[Member]] = {name: [] for name in owners}
        reasons: dict[str, str] = {name: "no owner is serving" for name in owners}
        outcomes: dict[str, Outcome | BaseException] = {}
        while pending:
            groups: dict[str, list[str]] = {}
            for name, candidates in pending.items():
                groups.setdefault(candidates[0].member_id, []).append(name)
            asked = [(pending[names[0]][0], names) for names in groups.values()]
            answers = await asyncio.gather(
                *(self._ask(member, request, names, metadata, deadline) for member, names in asked)
            )
            for (_, names), answer in zip(asked, answers, strict=True):
                for name in names:
                    tried[name].append(pending[name].pop(0))
                    outcome = answer.get(name) if isinstance(answer, dict) else None
                    if isinstance(answer, BaseException):
                        outcomes[name] = answer
                    elif isinstance(answer, str):
                        reasons[name] = answer
                    if name in outcomes:
                        del pending[name]
                    elif outcome is not None and not (
                        isinstance(outcome, pf_pb2.PartialFailure)
                        and outcome.error_code in _TRY_NEXT
                        and pending[name]
                    ):
                        outcomes[name] = outcome
                        del pending[name]
                    elif not pending[name]:
                        outcomes[name] = shard_unavailable(name, tried[name], reasons[name])
                        del pending[name]
                    else:
                        self.failovers += 1
        return outcomes

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
            response = await self._stub(member.address).Query(
                hop, timeout=left_s, metadata=(*metadata, (HOP_HEADER, signed))
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return TimeoutError(",".join(names))
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

"""ListNamespaceHealth: the caller's namespaces, their index state in this replica and how
often they were missing from this replica's recent answers.

A mixin of ``QueryServicer`` (it uses the servicer's store, indexes and coverage log), kept
apart because it serves the people running the query side, not the agents asking.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import grpc

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore_server.common import errors, names, paging
from reachstore_server.common.config import process_name
from reachstore_server.common.identity import caller
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.query.coverage import KEEP_MINUTES, MINUTE_S, CoverageLog
from reachstore_server.query.indexes import IndexManager
from reachstore_server.query.shards.partitions import parts, unit_key
from reachstore_server.query.shards.router import Router
from reachstore_server.storage.repository import NamespaceInfo, SemanticStore

MIN_WINDOW_S = 60
MAX_WINDOW_S = KEEP_MINUTES * MINUTE_S
DEFAULT_WINDOW_S = 3600
MAX_REASONS = 20
REPLICA = process_name()


class NamespaceHealthCalls:
    _store: SemanticStore
    _indexes: IndexManager
    coverage: CoverageLog
    _router: Router | None

    async def ListNamespaceHealth(
        self, request: pb.ListNamespaceHealthRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListNamespaceHealthResponse:
        who = caller(context)
        window_s = request.window_s or DEFAULT_WINDOW_S
        if not MIN_WINDOW_S <= window_s <= MAX_WINDOW_S:
            raise errors.invalid(
                "window_s", f"{MIN_WINDOW_S} to {MAX_WINDOW_S} seconds (0: {DEFAULT_WINDOW_S})"
            )
        size = names.page_size(request.page_size)
        after = paging.decode_token(request.page_token)
        rows = await asyncio.to_thread(self._store.list_namespaces, who.tenant, size + 1, after)
        page = rows[:size]
        token = paging.encode_token(page[-1].name) if len(rows) > size else ""
        response = pb.ListNamespaceHealthResponse(
            next_page_token=token, window_s=window_s, replica=REPLICA
        )
        for info in page:
            if not who.may_use(info.name):
                continue  # outside the key's grants: not shown, as everywhere else
            seen = self.coverage.coverage(who.tenant, info.name, window_s)
            entry = response.namespaces.add(
                name=info.name,
                document_count=info.document_count,
                chunk_count=info.chunk_count,
                index_state=self._indexes.state_of(info.id),
                queries=seen.queries,
                missing=seen.missing,
                coverage_ratio=seen.ratio,
            )
            if self._router is not None:
                owners, warming = self._placement(who.tenant, info)
                entry.owners.extend(owners)
                entry.warming_owners.extend(m for m in warming if m not in owners)
            for category, code, count in seen.by_reason[:MAX_REASONS]:
                entry.missing_by.add(category=category, error_code=code, count=count)
            if seen.last_missing_at:
                entry.last_missing_at = rfc3339(
                    dt.datetime.fromtimestamp(seen.last_missing_at, dt.UTC)
                )
        return response

    def _placement(self, tenant: str, info: NamespaceInfo) -> tuple[list[str], list[str]]:
        """The members serving the namespace with its index ready, best first, and those it
        is moving to that are still loading. Of a namespace split into partitions
        (docs/SHARDS.md), the members serving any of its partitions, and those loading
        any of the partitions it is being split into."""
        assert self._router is not None
        view = self._router.membership.view
        owners: list[str] = []
        warming: list[str] = []
        for count in sorted({info.partitions, info.partitions_next}):
            for part in parts(count):
                key = unit_key(tenant, info.name, part)
                placed = view.route_owners(key)
                if count == info.partitions:
                    owners.extend(m.member_id for m in placed if view.ready(m, key))
                warming.extend(
                    m.member_id
                    for m in view.members
                    if (m.state == "warming" and view.would_hold(m.member_id, key))
                    or (m in placed and not (count == info.partitions and view.ready(m, key)))
                )
        return list(dict.fromkeys(owners)), list(dict.fromkeys(warming))

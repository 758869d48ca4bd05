"""What this member holds in memory as members come and go, and namespaces grow.

On start the member is ``warming``: it loads the index of every namespace it will own
(placed over the serving members and itself) and only then turns ``serving``, so it takes
no traffic for a namespace before it can answer for it; meanwhile the old owners keep
answering. Afterwards, on each pass of the follow loop (``reachstore_server/query/main.py``),
it starts loading namespaces it has come to own (a member left, or one was created) and
drops the indexes of namespaces it has not owned for ``DROP_AFTER_LEASES`` member leases:
long enough for every other member to have seen the same membership, so a router with an
older view that still sends it a namespace finds it there.

Partitions (docs/SHARDS.md, "Partitions") are placed the same way, each on its own. A
member that holds a namespace (or a partition) larger than the partition size asks for
the namespace to be split (``partitions_next``); every member then loads the partitions
of the new count placed on it, beside what it holds of the old one, and searches are
routed by the new count only once every new partition has had an owner serving it for a
whole lease. The old indexes then go as any namespace a member stopped owning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from reachstore_server.query.indexes import IndexManager, SlotKey
from reachstore_server.query.shards.membership import Membership
from reachstore_server.query.shards.partitions import Part, count_for, parts, unit_key
from reachstore_server.storage.repository import NamespaceInfo, SemanticStore

log = logging.getLogger(__name__)

# Every member's view has moved on by then (each renews it five times per lease).
DROP_AFTER_LEASES = 3
# How long a warming member waits for its indexes before it serves anyway (a namespace
# still loading then answers INDEX_REBUILDING, and routers try its other owner first).
WARM_WAIT_S = 300.0
# How long every partition of a new count must have had a serving owner, as the members'
# heartbeats tell, before searches go to them: a member newly placed may be listed as
# ready for a few heartbeats while it loads (membership.py, ``View.ready``).
ROUTE_AFTER_LEASES = 1.0

Unit = tuple[str, NamespaceInfo, Part]


class Ownership:
    def __init__(
        self,
        indexes: IndexManager,
        membership: Membership,
        store: SemanticStore,
        partition_chunks: int,
    ) -> None:
        self._indexes = indexes
        self._membership = membership
        self._store = store
        self._partition_chunks = partition_chunks
        self._unowned_since: dict[SlotKey, float] = {}
        # Namespace id -> when every partition of its new count was first seen served.
        self._served_since: dict[int, float] = {}
        self._routed: dict[tuple[str, str], int] = {}
        self._files_checked = 0.0  # time.monotonic() of the last look at the snapshots
        membership.loading = self.loading

    def loading(self) -> list[str]:
        """The shard keys this member holds but has not loaded yet."""
        return [unit_key(t, n, p) for t, n, p in self._indexes.loading_named()]

    def partitions(self, tenant: str, name: str) -> int:
        """How many partitions searches of the namespace go to (1: whole)."""
        return self._routed.get((tenant, name), 1)

    def held(self, namespaces: Iterable[tuple[str, NamespaceInfo]]) -> list[Unit]:
        """The namespaces and partitions this member should hold: of the count searches
        are routed by, and of the count being loaded while a split warms."""
        view = self._membership.view
        out: list[Unit] = []
        for tenant, info in namespaces:
            for count in sorted({info.partitions, info.partitions_next}):
                out.extend(
                    (tenant, info, part)
                    for part in parts(count)
                    if view.holds(unit_key(tenant, info.name, part))
                )
        return out

    def warm(self, namespaces: Iterable[tuple[str, NamespaceInfo]]) -> int:
        """Loads what this member will own, waits for it, then serves. Blocking."""
        namespaces = list(namespaces)
        self._routed = {(t, i.name): i.partitions for t, i in namespaces}
        slots = [self._indexes.slot(t, i, p) for t, i, p in self.held(namespaces)]
        until = time.monotonic() + WARM_WAIT_S
        for slot in slots:
            slot.ready.wait(max(0.0, until - time.monotonic()))
        self._membership.serve()
        log.info(
            "query member %s serving, holding %d indexes", self._membership.member_id, len(slots)
        )
        return len(slots)

    def rebalance(self, namespaces: Iterable[tuple[str, NamespaceInfo]]) -> list[Unit]:
        """Starts loading what this member now owns, drops what it has long stopped
        owning, asks for splits and routes by them once loaded; returns what it holds
        (for the follow loop to keep current)."""
        namespaces = list(namespaces)
        self._routed = {(t, i.name): i.partitions for t, i in namespaces}
        held = self.held(namespaces)
        held_keys = {(i.id, p) for _, i, p in held}
        now = time.monotonic()
        for tenant, info, part in held:
            self._unowned_since.pop((info.id, part), None)
            self._indexes.slot(tenant, info, part)
        for key in self._indexes.loaded():
            if key in held_keys:
                continue
            since = self._unowned_since.setdefault(key, now)
            if now - since >= DROP_AFTER_LEASES * self._membership.lease_s:
                self._indexes.drop(*key)
                del self._unowned_since[key]
                log.info("namespace %d partition %s: index dropped", key[0], key[1].label)
        if now >= self._files_checked + self._membership.lease_s:
            self._files_checked = now
            self._indexes.drop_files_except(held_keys)
        self._split(namespaces)
        self._route_splits(namespaces, now)
        return held

    def _split(self, namespaces: list[tuple[str, NamespaceInfo]]) -> None:
        """Asks for a split of every namespace of which this member holds a part (at the
        count being loaded) larger than the partition size."""
        latest = {info.id: info for _, info in namespaces}
        for slot in self._indexes.held_ready():
            info = latest.get(slot.namespace_id)
            if info is None or slot.index is None or slot.part.count != info.partitions_next:
                continue
            wanted = count_for(slot.index.chunk_count, slot.part.count, self._partition_chunks)
            if wanted > info.partitions_next and self._store.split_namespace(info.id, wanted):
                log.info(
                    "namespace %s: splitting into %d partitions (%d chunks in one of %d)",
                    info.name,
                    wanted,
                    slot.index.chunk_count,
                    slot.part.count,
                )

    def _route_splits(self, namespaces: list[tuple[str, NamespaceInfo]], now: float) -> None:
        """Routes searches of a split namespace by its new count once every new partition
        has had a serving owner that has it loaded for ``ROUTE_AFTER_LEASES``."""
        view = self._membership.view
        for tenant, info in namespaces:
            if info.partitions_next <= info.partitions:
                self._served_since.pop(info.id, None)
                continue
            keys = [unit_key(tenant, info.name, p) for p in parts(info.partitions_next)]
            served = all(any(view.ready(m, k) for m in view.route_owners(k)) for k in keys)
            if not served:
                self._served_since.pop(info.id, None)
                continue
            since = self._served_since.setdefault(info.id, now)
            if now - since < ROUTE_AFTER_LEASES * self._membership.lease_s:
                continue
            if self._store.route_partitions(info.id, info.partitions_next):
                log.info(
                    "namespace %s: searches now go to its %d partitions",
                    info.name,
                    info.partitions_next,
                )

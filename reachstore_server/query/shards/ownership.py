"""What this member holds in memory as members come and go.

On start the member is ``warming``: it loads the index of every namespace it will own
(placed over the serving members and itself) and only then turns ``serving``, so it takes
no traffic for a namespace before it can answer for it; meanwhile the old owners keep
answering. Afterwards, on each pass of the follow loop (``reachstore_server/query/main.py``),
it starts loading namespaces it has come to own (a member left, or one was created) and
drops the indexes of namespaces it has not owned for ``DROP_AFTER_LEASES`` member leases:
long enough for every other member to have seen the same membership, so a router with an
older view that still sends it a namespace finds it there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from reachstore_server.query.indexes import IndexManager
from reachstore_server.query.shards.membership import Membership
from reachstore_server.query.shards.placement import shard_key
from reachstore_server.storage.repository import NamespaceInfo

log = logging.getLogger(__name__)

# Every member's view has moved on by then (each renews it five times per lease).
DROP_AFTER_LEASES = 3
# How long a warming member waits for its indexes before it serves anyway (a namespace
# still loading then answers INDEX_REBUILDING, and routers try its other owner first).
WARM_WAIT_S = 300.0


class Ownership:
    def __init__(self, indexes: IndexManager, membership: Membership) -> None:
        self._indexes = indexes
        self._membership = membership
        self._unowned_since: dict[int, float] = {}
        membership.loading = self.loading

    def loading(self) -> list[str]:
        """The shard keys this member holds but has not loaded yet."""
        return [shard_key(t, n) for t, n in self._indexes.loading_named()]

    def held(
        self, namespaces: Iterable[tuple[str, NamespaceInfo]]
    ) -> list[tuple[str, NamespaceInfo]]:
        view = self._membership.view
        return [(t, i) for t, i in namespaces if view.holds(shard_key(t, i.name))]

    def warm(self, namespaces: Iterable[tuple[str, NamespaceInfo]]) -> int:
        """Loads what this member will own, waits for it, then serves. Blocking."""
        slots = [self._indexes.slot(t, i) for t, i in self.held(namespaces)]
        until = time.monotonic() + WARM_WAIT_S
        for slot in slots:
            slot.ready.wait(max(0.0, until - time.monotonic()))
        self._membership.serve()
        log.info(
            "query member %s serving, holding %d namespaces", self._membership.member_id, len(slots)
        )
        return len(slots)

    def rebalance(
        self, namespaces: Iterable[tuple[str, NamespaceInfo]]
    ) -> list[tuple[str, NamespaceInfo]]:
        """Starts loading what this member now owns, drops what it has long stopped
        owning; returns the namespaces it holds (for the follow loop to keep current)."""
        namespaces = list(namespaces)
        held = self.held(namespaces)
        held_ids = {i.id for _, i in held}
        now = time.monotonic()
        for tenant, info in held:
            self._unowned_since.pop(info.id, None)
            self._indexes.slot(tenant, info)
        for namespace_id in self._indexes.loaded_ids():
            if namespace_id in held_ids:
                continue
            since = self._unowned_since.setdefault(namespace_id, now)
            if now - since >= DROP_AFTER_LEASES * self._membership.lease_s:
                self._indexes.drop(namespace_id)
                del self._unowned_since[namespace_id]
                log.info("namespace %d: index dropped, placed on other members", namespace_id)
        return held

"""This process as a member of the query tier: its heartbeat, its view of the others, and
the signatures of the searches members forward to each other.

The view is what the last heartbeat returned (``reachstore_server/storage/query_members.py``),
renewed every ``lease_s / 5`` seconds, so a member that dies leaves the view of the others
within about one lease. Until then they may still pick it; the router then tries the
next owner (``router.py``).

A forwarded search carries ``x-reachstore-hop: <member id>.<unix seconds>.<hmac>``, an
HMAC-SHA256 under the sending member's secret (in its row of the shared database, which
only the deployment's processes read) over the timestamp and the request's bytes. A
member that verifies it searches its own indexes only (no second routing) and does not
charge the caller's call rate or audit the call a second time: the member that took the
call from the caller did both. A header that does not verify is ignored and the call is
handled as any caller's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence

from reachstore_server.query.shards import placement
from reachstore_server.storage.query_members import Member, MemberTable

log = logging.getLogger(__name__)

HOP_HEADER = "x-reachstore-hop"
# A signed hop older (or newer, by the clocks of two machines) than this does not verify.
HOP_SKEW_S = 60.0


@dataclasses.dataclass(frozen=True)
class View:
    """The members one heartbeat saw, and this member's place among them."""

    me: str
    members: tuple[Member, ...]
    replicas: int

    def route_owners(self, key: str) -> list[Member]:
        """The members to send a search of ``key`` to, best first: the owners among those
        serving. A warming member takes no traffic (it is still loading)."""
        ids = [m.member_id for m in self.members if m.state == "serving"]
        by_id = {m.member_id: m for m in self.members}
        return [
            by_id[i] for i in placement.owners(key, ids, placement.replicas_for(ids, self.replicas))
        ]

    def holds(self, key: str) -> bool:
        """Whether this member should hold ``key``'s index: it would own it once serving."""
        return self.would_hold(self.me, key)

    def would_hold(self, member_id: str, key: str) -> bool:
        """Whether ``member_id`` owns ``key`` among the serving members and itself."""
        ids = [
            m.member_id for m in self.members if m.state == "serving" or m.member_id == member_id
        ]
        return member_id in placement.owners(key, ids, placement.replicas_for(ids, self.replicas))

    def member(self, member_id: str) -> Member | None:
        return next((m for m in self.members if m.member_id == member_id), None)


class Membership:
    def __init__(
        self,
        table: MemberTable,
        address: str,
        replicas: int,
        lease_s: float,
        member_id: str | None = None,
        on_change: Callable[[View], None] | None = None,
    ) -> None:
        self.member_id = member_id or secrets.token_hex(8)
        self.address = address
        self._table = table
        self._replicas = replicas
        self.lease_s = lease_s
        self._secret = secrets.token_hex(32)
        self._state = "warming"
        self._on_change = on_change
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.view = View(self.member_id, (), replicas)

    @property
    def state(self) -> str:
        return self._state

    def beat(self) -> View:
        """One heartbeat: renews this member's row and refreshes the view."""
        members = self._table.heartbeat(
            self.member_id, self.address, self._state, self._secret, self.lease_s
        )
        old, self.view = self.view, View(self.member_id, tuple(members), self._replicas)
        if [(m.member_id, m.state) for m in old.members] != [
            (m.member_id, m.state) for m in members
        ]:
            log.info(
                "query members: %s",
                ", ".join(f"{m.member_id}@{m.address} {m.state}" for m in members),
            )
            if self._on_change is not None:
                self._on_change(self.view)
        return self.view

    def serve(self) -> None:
        """This member has loaded what it owns: it takes traffic from the next beat on."""
        self._state = "serving"
        self.beat()

    def start(self) -> None:
        self.beat()
        self._thread = threading.Thread(target=self._loop, name="query-members", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.lease_s / 5):
            try:
                self.beat()
            except Exception:  # noqa: BLE001 - the next beat retries; the lease allows four misses
                log.exception("query member heartbeat failed")

    def stop(self) -> None:
        self._stop.set()
        try:
            self._table.leave(self.member_id)
        except Exception:  # noqa: BLE001 - the lease removes the row anyway
            log.exception("leaving the query members failed")

    # --- forwarded searches ---------------------------------------------------------------

    def sign(self, body: bytes, now: float | None = None) -> str:
        stamp = str(int(time.time() if now is None else now))
        mac = hmac.new(self._secret.encode(), f"{stamp}\n".encode() + body, hashlib.sha256)
        return f"{self.member_id}.{stamp}.{mac.hexdigest()}"

    def verify(self, header: str, body: bytes, now: float | None = None) -> bool:
        """Whether ``header`` is a live member's signature of ``body``, recent enough."""
        parts = header.split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            return False
        member = self.view.member(parts[0])
        if member is None:
            return False
        if abs((time.time() if now is None else now) - int(parts[1])) > HOP_SKEW_S:
            return False
        mac = hmac.new(member.hop_secret.encode(), f"{parts[1]}\n".encode() + body, hashlib.sha256)
        return hmac.compare_digest(mac.hexdigest(), parts[2])


def hop_of(metadata: Sequence[tuple[str, str | bytes]]) -> str:
    """The hop header of a call's metadata, or ""."""
    for key, value in metadata:
        if key == HOP_HEADER and isinstance(value, str):
            return value
    return ""

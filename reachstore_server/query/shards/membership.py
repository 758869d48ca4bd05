"""This process as a member of the query tier: its heartbeat, its view of the others, and
the signatures of the searches members forward to each other.

The view is what the last heartbeat returned (``reachstore_server/storage/query_members.py``),
renewed every ``lease_s / 5`` seconds, so a member that dies leaves the view of the others
within about one lease. Until then they may still pick it; the router then tries the
next owner (``router.py``).

A forwarded search carries ``x-reachstore-hop: <member id>.<seconds>.<hmac>``, an
HMAC-SHA256 under the members' shared secret (``REACHSTORE_QUERY_HOP_SECRET``, set in
every member's environment and never written to the database, so reading the members
table, a backup or a replica does not let anyone sign) over the member id, the time and
the request's bytes. The time is the database's clock as this member last read it plus
the time since, the one clock every member shares, so a member whose host clock is off
still signs hops the others accept. A member that verifies a hop searches its own
indexes only (no second routing) and does not charge the caller's call rate or audit the
call a second time: the member that took the call from the caller did both. A header that
does not verify is ignored and the call is handled as any caller's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Collection, Sequence

from reachstore_server.query.shards import placement
from reachstore_server.storage.query_members import Member, MemberTable

log = logging.getLogger(__name__)

HOP_HEADER = "x-reachstore-hop"
_STAMP = re.compile(r"[0-9]{1,12}")
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
        serving, the ones still loading it last. A warming member takes no traffic."""
        ids = [m.member_id for m in self.members if m.state == "serving"]
        by_id = {m.member_id: m for m in self.members}
        owners = placement.owners(key, ids, placement.replicas_for(ids, self.replicas))
        return sorted((by_id[i] for i in owners), key=lambda m: key in m.loading)  # stable

    @staticmethod
    def ready(member: Member, key: str) -> bool:
        """Whether ``member`` holds ``key`` ready, as its last heartbeat tells: a member
        publishes the namespaces placed on it that it is still loading. For a few heartbeats
        after the change that places a namespace on it, it may be listed as ready while it
        loads; a forwarded search then gets INDEX_REBUILDING at once and goes to the other
        owner (docs/SHARDS.md, "Seeing it")."""
        return key not in member.loading

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
        hop_secret: str,
        member_id: str | None = None,
        on_change: Callable[[View], None] | None = None,
    ) -> None:
        # The shard keys placed here whose index is still loading (set by the owner of the
        # indexes, ownership.py), published with every heartbeat.
        self.loading: Callable[[], Collection[str]] = lambda: ()
        self.member_id = member_id or secrets.token_hex(8)
        self.address = address
        self._table = table
        self._replicas = replicas
        self.lease_s = lease_s
        self._hop_key = hop_secret.encode()
        # The database's clock minus this host's, as of the last heartbeat.
        self._clock_offset = 0.0
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
        sent = time.time()
        members = self._table.heartbeat(
            self.member_id, self.address, self._state, self.lease_s, self.loading()
        )
        mine = next((m for m in members if m.member_id == self.member_id), None)
        if mine is not None:  # stamped by the database's clock in the same transaction
            self._clock_offset = mine.heartbeat_at - (sent + time.time()) / 2
        old, self.view = self.view, View(self.member_id, tuple(members), self._replicas)
        changed = [(m.member_id, m.state) for m in old.members] != [
            (m.member_id, m.state) for m in members
        ]
        if changed:
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

    def clock(self) -> float:
        """Epoch seconds by the database's clock, without asking the database."""
        return time.time() + self._clock_offset

    def _mac(self, member_id: str, stamp: str, body: bytes) -> str:
        head = f"{member_id}.{stamp}\n".encode()
        return hmac.new(self._hop_key, head + body, hashlib.sha256).hexdigest()

    def sign(self, body: bytes, now: float | None = None) -> str:
        stamp = str(int(self.clock() if now is None else now))
        return f"{self.member_id}.{stamp}.{self._mac(self.member_id, stamp, body)}"

    def verify(self, header: str, body: bytes, now: float | None = None) -> bool:
        """Whether ``header`` is a member's signature of ``body``, recent enough. Any member
        holding the shared secret may have signed, one that joined a moment ago too: its
        row need not be in this member's view yet."""
        parts = header.split(".")
        # The stamp is epoch seconds: ASCII digits, and few of them. Anything else from a
        # caller must not reach int(), which refuses (raises on) strings of thousands of
        # digits and reads digits of other scripts.
        if len(parts) != 3 or not _STAMP.fullmatch(parts[1]) or not self._hop_key:
            return False
        if abs((self.clock() if now is None else now) - int(parts[1])) > HOP_SKEW_S:
            return False
        return hmac.compare_digest(self._mac(parts[0], parts[1], body), parts[2])


def metadata_value(metadata: Sequence[tuple[str, str | bytes]], key: str) -> str:
    """The first text value of ``key`` in a call's metadata, or ""."""
    for k, value in metadata:
        if k == key and isinstance(value, str):
            return value
    return ""


def hop_of(metadata: Sequence[tuple[str, str | bytes]]) -> str:
    """The hop header of a call's metadata, or ""."""
    return metadata_value(metadata, HOP_HEADER)

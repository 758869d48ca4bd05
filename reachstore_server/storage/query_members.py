"""The live members of the query tier, one row each (``QueryMemberRow``).

A member registers when it starts, renews its heartbeat every few seconds by the
database's clock (``clock.py``: the one clock every process shares, so a member's lease
does not depend on the clocks of the others) and deletes its row when it stops. A row not
renewed within the lease is a member that died: whoever notices deletes it, and the
namespaces it held are placed on the others (``reachstore_server/query/shards/``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.storage.clock import db_clock
from reachstore_server.storage.models import QueryMemberRow


@dataclasses.dataclass(frozen=True)
class Member:
    member_id: str
    address: str
    state: str  # "warming" or "serving"
    started_at: float
    heartbeat_at: float
    # Shard keys placed on it whose index it was still loading at its last heartbeat.
    loading: frozenset[str] = frozenset()


def _member(row: QueryMemberRow) -> Member:
    return Member(
        row.member_id,
        row.address,
        row.state,
        row.started_at,
        row.heartbeat_at,
        frozenset(json.loads(row.loading or "[]")),
    )


class MemberTable:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def heartbeat(
        self,
        member_id: str,
        address: str,
        state: str,
        lease_s: float,
        loading: Collection[str] = (),
    ) -> list[Member]:
        """Registers or renews this member, deletes the members whose lease ran out, and
        returns the live ones (this one included), oldest first. One transaction."""
        with self._sessions.begin() as session:
            now = db_clock(session)
            row = session.get(QueryMemberRow, member_id)
            if row is None:
                # A first start, or a member that stalled past its lease and was deleted
                # by another: it comes back as a new arrival would.
                session.add(
                    QueryMemberRow(
                        member_id=member_id,
                        address=address,
                        state=state,
                        loading=json.dumps(sorted(loading)),
                        started_at=now,
                        heartbeat_at=now,
                    )
                )
            else:
                row.address, row.state, row.heartbeat_at = address, state, now
                row.loading = json.dumps(sorted(loading))
            # A row from the future is one written before the database's clock stepped
            # back (an NTP step, a restored VM): its member may have died since, and judged
            # by the clock it would stay placed until the clock caught up. A live member
            # re-registers on its next beat, a fifth of a lease later.
            session.execute(
                delete(QueryMemberRow).where(
                    or_(
                        QueryMemberRow.heartbeat_at < now - lease_s,
                        QueryMemberRow.heartbeat_at > now + lease_s,
                    )
                )
            )
            session.flush()
            rows = session.scalars(
                select(QueryMemberRow).order_by(QueryMemberRow.started_at, QueryMemberRow.member_id)
            ).all()
            return [_member(r) for r in rows]

    def leave(self, member_id: str) -> None:
        """Deletes this member's row (a clean stop): the others re-place at once instead of
        waiting for the lease."""
        with self._sessions.begin() as session:
            session.execute(delete(QueryMemberRow).where(QueryMemberRow.member_id == member_id))

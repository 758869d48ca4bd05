"""The live members of the query tier, one row each (``QueryMemberRow``).

A member registers when it starts, renews its heartbeat every few seconds by the
database's clock (``clock.py``: the one clock every process shares, so a member's lease
does not depend on the clocks of the others) and deletes its row when it stops. A row not
renewed within the lease is a member that died: whoever notices deletes it, and the
namespaces it held are placed on the others (``reachstore_server/query/shards/``).
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.storage.clock import db_clock
from reachstore_server.storage.models import QueryMemberRow


@dataclasses.dataclass(frozen=True)
class Member:
    member_id: str
    address: str
    state: str  # "warming" or "serving"
    hop_secret: str
    started_at: float
    heartbeat_at: float


def _member(row: QueryMemberRow) -> Member:
    return Member(
        row.member_id, row.address, row.state, row.hop_secret, row.started_at, row.heartbeat_at
    )


class MemberTable:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def heartbeat(
        self, member_id: str, address: str, state: str, hop_secret: str, lease_s: float
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
                        hop_secret=hop_secret,
                        started_at=now,
                        heartbeat_at=now,
                    )
                )
            else:
                row.address, row.state, row.heartbeat_at = address, state, now
            session.execute(
                delete(QueryMemberRow).where(QueryMemberRow.heartbeat_at < now - lease_s)
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

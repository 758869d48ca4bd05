"""The audit tables' reader and writer: appending to the chains, checkpoints, listing,
and feeding ``verify.py``.

Appending locks each tenant's head row (``appending.py``; SQLite has one writer at a
time), so a tenant's events get consecutive positions and each links to the one before,
even with several audit replicas. Event ids are unique: a batch shipped twice (the
shipper did not see the acknowledgement) stores nothing the second time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import func, or_, select, tuple_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.audit.appending import Appender
from reachstore_server.audit.chain import GENESIS, HASHED_FIELDS, STORED_FIELDS, NewEvent, new_event
from reachstore_server.audit.parallel_walk import parallel_walker
from reachstore_server.audit.signing import CheckpointKeys, PrivateKey
from reachstore_server.audit.verify import (
    INSERTED,
    Break,
    Cadence,
    Report,
    WitnessedHeads,
    verify_chain,
)
from reachstore_server.audit.witness import APPENDED, CHECKPOINT, UNVOUCHED, Head
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.storage.audit_models import AuditCheckpointRow, AuditEventRow, AuditHeadRow

# Rows read per statement while verifying (keyset pages keep memory flat).
VERIFY_PAGE = 5000


@dataclasses.dataclass(frozen=True)
class EventFilter:
    tenant: str
    caller_key_id: str = ""
    service: str = ""
    method: str = ""
    idempotency_key: str = ""
    trace_id: str = ""
    since: str = ""
    until: str = ""


class AuditStore:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self._appender = Appender(sessions.kw["bind"])

    # --- appending -------------------------------------------------------------------------

    def append(
        self, events: Sequence[Mapping[str, Any]], record: Mapping[str, Any] | None = None
    ) -> tuple[int, int]:
        """Stores the events not stored yet, each at the end of its tenant's chain, in one
        transaction. Returns (appended, duplicates). ``record``, the event of the append
        call itself (a fresh id), is stored in the same transaction and not counted."""
        return self.append_new(
            [_new(e) for e in events], _new(record) if record is not None else None
        )

    def append_new(
        self, events: Sequence[NewEvent], record: NewEvent | None = None
    ) -> tuple[int, int]:
        """``append`` of events prepared by ``chain.new_event`` (their canonical JSON made
        before any lock is taken).

        The first try takes the ids to be new, as they are but for a batch sent again, and
        skips reading which are stored; a stored one fails that try on the ids'
        uniqueness, storing nothing, and the next tries look first."""
        batch = [*events, record] if record is not None else list(events)
        look = False
        for _ in range(5):
            try:
                appended = self._appender.append(batch, look_for_stored=look)
            except IntegrityError:
                # One of these ids is stored (this batch was sent before, or another
                # appender stored it first): read again and store only what is missing.
                look = True
                continue
            return appended - (record is not None), len(batch) - appended
        raise RuntimeError("appending kept conflicting with concurrent appends")

    # --- checkpoints -----------------------------------------------------------------------

    def checkpoint(self, key: PrivateKey, now: dt.datetime | None = None) -> list[Head]:
        """Signs the head of every chain that moved since its last checkpoint; returns the
        heads signed, for the witnesses."""
        signed_at = rfc3339(now or dt.datetime.now(dt.UTC))
        written: list[Head] = []
        with self._sessions.begin() as session:
            heads = session.scalars(select(AuditHeadRow)).all()
            for head in heads:
                last = self._latest(session, head.tenant)
                if last is not None and last.seq >= head.seq:
                    continue
                signed = _signed(head, key, signed_at, CHECKPOINT)
                session.add(AuditCheckpointRow(**signed.fields()))
                written.append(signed)
        return written

    def appended_heads(
        self, key: PrivateKey, tenants: Sequence[str], now: dt.datetime | None = None
    ) -> list[Head]:
        """The heads of ``tenants``' chains now, as ``appended`` heads signed now (for the
        witnesses, right after an append: ``Checkpointer.witness_appends``)."""
        signed_at = rfc3339(now or dt.datetime.now(dt.UTC))
        with self._sessions() as session:
            rows = session.scalars(
                select(AuditHeadRow).where(AuditHeadRow.tenant.in_(sorted(set(tenants))))
            ).all()
            return [_signed(row, key, signed_at, APPENDED) for row in rows if row.seq > 0]

    def unsigned_heads(self, key: PrivateKey, now: dt.datetime | None = None) -> list[Head]:
        """Each chain whose head is beyond its latest checkpoint, as an ``unvouched`` head
        signed now (not stored: it is for the witnesses, ``Checkpointer.start``)."""
        signed_at = rfc3339(now or dt.datetime.now(dt.UTC))
        found: list[Head] = []
        with self._sessions() as session:
            for head in session.scalars(select(AuditHeadRow)).all():
                last = self._latest(session, head.tenant)
                if head.seq == 0 or (last is not None and last.seq >= head.seq):
                    continue
                found.append(_signed(head, key, signed_at, UNVOUCHED))
        return found

    def latest_checkpoints(self) -> list[Head]:
        """Each tenant's latest checkpoint."""
        with self._sessions() as session:
            found = [self._latest(session, t) for t in session.scalars(select(AuditHeadRow.tenant))]
        return [_head(c) for c in found if c is not None]

    def last_signed_at(self) -> str | None:
        """When the newest checkpoint of any tenant was signed."""
        with self._sessions() as session:
            return session.scalar(
                select(AuditCheckpointRow.signed_at).order_by(AuditCheckpointRow.id.desc()).limit(1)
            )

    @staticmethod
    def _latest(session: Session, tenant: str) -> AuditCheckpointRow | None:
        return session.scalar(
            select(AuditCheckpointRow)
            .where(AuditCheckpointRow.tenant == tenant)
            .order_by(AuditCheckpointRow.seq.desc(), AuditCheckpointRow.id.desc())
            .limit(1)
        )

    def latest_checkpoint(self, tenant: str) -> AuditCheckpointRow | None:
        with self._sessions() as session:
            return self._latest(session, tenant)

    # --- reading ---------------------------------------------------------------------------

    def get(self, event_id: str) -> AuditEventRow | None:
        with self._sessions() as session:
            return session.scalar(select(AuditEventRow).where(AuditEventRow.event_id == event_id))

    def events(self, where: EventFilter, limit: int, after_seq: int) -> list[AuditEventRow]:
        """Events of one tenant in chain order, after position ``after_seq``."""
        with self._sessions() as session:
            stmt = select(AuditEventRow).where(
                AuditEventRow.tenant == where.tenant, AuditEventRow.seq > after_seq
            )
            for column, value in (
                (AuditEventRow.caller_key_id, where.caller_key_id),
                (AuditEventRow.service, where.service),
                (AuditEventRow.method, where.method),
                (AuditEventRow.idempotency_key, where.idempotency_key),
                (AuditEventRow.trace_id, where.trace_id),
            ):
                if value:
                    stmt = stmt.where(column == value)
            if where.since:
                stmt = stmt.where(AuditEventRow.time >= where.since)
            if where.until:
                stmt = stmt.where(AuditEventRow.time < where.until)
            return list(session.scalars(stmt.order_by(AuditEventRow.seq).limit(limit)))

    def tenants(self) -> list[str]:
        """Every tenant with a chain (a head, or events left after a head was removed)."""
        with self._sessions() as session:
            heads = set(session.scalars(select(AuditHeadRow.tenant)))
            heads |= set(session.scalars(select(AuditEventRow.tenant).distinct()))
            heads |= set(session.scalars(select(AuditCheckpointRow.tenant).distinct()))
            return sorted(heads)

    # --- verifying -------------------------------------------------------------------------

    def verify(
        self,
        tenant: str,
        keys: CheckpointKeys,
        from_seq: int = 1,
        to_seq: int | None = None,
        witnesses: Sequence[WitnessedHeads] = (),
        cadence: Cadence | None = None,
    ) -> Report:
        """Verifies one chain (or the range ``from_seq``..``to_seq`` of it) against its
        checkpoints, the witnesses' heads of this tenant, and the cadence when given."""
        start = (0, GENESIS)
        if from_seq > 1:
            with self._sessions() as session:
                before = session.scalar(
                    select(AuditEventRow).where(
                        AuditEventRow.tenant == tenant, AuditEventRow.seq == from_seq - 1
                    )
                )
            if before is not None:
                start = (before.seq, before.hash)
        with self._sessions() as session:
            stmt = select(AuditCheckpointRow).where(
                AuditCheckpointRow.tenant == tenant, AuditCheckpointRow.seq >= from_seq
            )
            checkpoints = [_head(c) for c in session.scalars(stmt.order_by(AuditCheckpointRow.seq))]
        with self._sessions() as session:
            last_seq = session.scalar(
                select(func.max(AuditEventRow.seq)).where(AuditEventRow.tenant == tenant)
            )
        bind = self._sessions.kw["bind"]
        walked = parallel_walker(
            bind.url.render_as_string(hide_password=False),
            tenant,
            from_seq,
            last_seq or 0,
            to_seq,
        )
        report = verify_chain(
            tenant,
            self.chain_rows(tenant, from_seq, to_seq),
            checkpoints,
            keys,
            lambda digest: self._seq_of_hash(tenant, digest),
            start_after=start,
            to_seq=to_seq,
            witnesses=[
                WitnessedHeads(w.name, [h for h in w.heads if h.tenant == tenant])
                for w in witnesses
            ],
            cadence=cadence,
            walked=walked,
        )
        stray = self._outside_the_chain(tenant) if from_seq <= 1 else None
        if stray is not None:
            report.first_break = stray  # before position 1, so before any break in the chain
        return report

    def _outside_the_chain(self, tenant: str) -> Break | None:
        """An event of ``tenant`` at no position of its chain (below 1, or none at all): no
        walk reads it, yet reads of the trail serve it, so it is an insertion."""
        columns = AuditEventRow.__table__.c
        with self._sessions() as session:
            row = session.execute(
                select(columns.seq, columns.event_id)
                .where(columns.tenant == tenant, or_(columns.seq < 1, columns.seq.is_(None)))
                .order_by(columns.seq.nulls_first())
                .limit(1)
            ).first()
        if row is None:
            return None
        where = "no position" if row.seq is None else f"position {row.seq}"
        return Break(
            INSERTED,
            tenant,
            row.seq or 0,
            row.event_id or "",
            f"an event at {where}, outside the chain (which starts at 1), was added",
        )

    def chain_rows(self, tenant: str, from_seq: int, to_seq: int | None) -> Iterator[Any]:
        """Plain rows (named columns), not ORM objects: building an object per event was
        most of the cost of verifying."""
        columns = AuditEventRow.__table__.c
        wanted = [columns[name] for name in (*HASHED_FIELDS, "seq", "hash", "id")]
        # Pages follow (seq, id), not seq alone: two rows at one position (someone dropped
        # the uniqueness) must both be read, even when they straddle a page's end.
        after: Any = columns.seq >= from_seq
        while True:
            with self._sessions() as session:
                stmt = select(*wanted).where(columns.tenant == tenant, after)
                if to_seq is not None:
                    stmt = stmt.where(columns.seq <= to_seq)
                # ``all()`` fetches the page in one go; iterating the result fetched row by row.
                stmt = stmt.order_by(columns.seq, columns.id).limit(VERIFY_PAGE)
                page = session.execute(stmt).all()
            yield from page
            if len(page) < VERIFY_PAGE:
                return
            after = tuple_(columns.seq, columns.id) > (page[-1].seq, page[-1].id)

    def _seq_of_hash(self, tenant: str, digest: str) -> int | None:
        with self._sessions() as session:
            return session.scalar(
                select(AuditEventRow.seq).where(
                    AuditEventRow.tenant == tenant, AuditEventRow.hash == digest
                )
            )


def _head(row: AuditCheckpointRow) -> Head:
    return Head(row.tenant, row.seq, row.head_hash, row.signed_at, row.key_id, row.signature)


def _signed(head: AuditHeadRow, key: PrivateKey, signed_at: str, kind: str) -> Head:
    """A chain's head signed by ``key`` at ``signed_at``, as a ``kind`` head
    (``reachstore_server/audit/witness.py`` says what each kind vouches for)."""
    return Head(
        tenant=head.tenant,
        seq=head.seq,
        head_hash=head.hash,
        signed_at=signed_at,
        key_id=key.key_id,
        signature=key.sign(head.tenant, head.seq, head.hash, signed_at),
        kind=kind,
    )


def _new(event: Mapping[str, Any]) -> NewEvent:
    return new_event(tuple(event[field] for field in STORED_FIELDS))

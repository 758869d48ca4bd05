"""One append to the chains: one transaction, on the database driver's own connection.

In order, for the tenants of the batch:

1. each tenant's head is created (at the genesis) or locked, in one lock order for every
   appender, and read, by one statement (an upsert whose no-op update locks an existing
   head as ``SELECT ... FOR UPDATE`` would); on SQLite ``BEGIN IMMEDIATE`` first takes
   the one write lock;
2. the batch's event ids already stored are read, after the heads are held: an appender
   that stored some of them meanwhile has committed by now (a batch sent twice is stored
   once). ``AuditStore.append_new`` skips this on its first try, as ids are new but for a
   batch sent again: the ids' uniqueness then refuses the whole transaction and the retry
   reads them;
3. each new event is linked after its tenant's head, in the order given (``chain.link``:
   one SHA-256 over bytes made before the lock);
4. the rows go in (PostgreSQL: ``COPY``; SQLite: one ``executemany``), the heads move, and
   the transaction commits.

On PostgreSQL, 1 and 2 go in one round trip and the heads' update with the commit in
another (psycopg's pipeline mode); ``COPY`` is the third. Each statement used to be its
own round trip through SQLAlchemy, the rows one multi-row INSERT (README, "Audit:
appending and verifying", has the figures of ``bench/bench_audit.py`` before and after).
Plain DBAPI errors leave as SQLAlchemy's, so the servicer and the retry of
``AuditStore.append_new`` see the same exceptions as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from reachstore_server.audit.chain import GENESIS, STORED_FIELDS, NewEvent, link

# A stored row: the STORED_FIELDS, then its position, the previous hash and its hash.
ROW_COLUMNS = (*STORED_FIELDS, "seq", "prev_hash", "hash")
_EVENT_ID = STORED_FIELDS.index("event_id")
_TENANT = STORED_FIELDS.index("tenant")

_COPY = f"COPY audit_events ({', '.join(ROW_COLUMNS)}) FROM STDIN"
_INSERT = (
    f"INSERT INTO audit_events ({', '.join(ROW_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(ROW_COLUMNS))})"
)


def _lock_heads(tenants: int, mark: str) -> str:
    values = ", ".join([f"({mark}, 0, {mark})"] * tenants)
    return (
        f"INSERT INTO audit_heads (tenant, seq, hash) VALUES {values} "
        "ON CONFLICT (tenant) DO UPDATE SET seq = audit_heads.seq "
        "RETURNING tenant, seq, hash"
    )


@dataclasses.dataclass(frozen=True)
class _Batch:
    """One append: its events by id (the first of an id given twice), its tenants in lock
    order, and whether to read which ids are stored before linking."""

    unique: Mapping[str, NewEvent]
    tenants: list[str]
    look_for_stored: bool

    @property
    def head_params(self) -> list[str]:
        """(tenant, genesis) of each tenant, for ``_lock_heads``."""
        return [value for tenant in self.tenants for value in (tenant, GENESIS)]


class Appender:
    """Appends prepared events (``chain.new_event``) to their tenants' chains."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._postgres = engine.dialect.name == "postgresql"
        self._error: type[Exception] = engine.dialect.loaded_dbapi.Error

    def append(self, events: Sequence[NewEvent], look_for_stored: bool = True) -> int:
        """Stores the events whose ids are not stored yet (the first of ids given twice);
        returns how many. Without ``look_for_stored`` the ids are taken to be new: one
        that is not fails the whole transaction on the ids' uniqueness (IntegrityError),
        storing nothing, and the caller tries again looking."""
        unique: dict[str, NewEvent] = {}
        for event in events:
            unique.setdefault(event.values[_EVENT_ID], event)
        batch = _Batch(
            unique, sorted({e.values[_TENANT] for e in unique.values()}), look_for_stored
        )
        raw = self._engine.raw_connection()
        try:
            driver = raw.driver_connection
            if self._postgres:
                return self._on_postgres(driver, batch)
            return self._on_sqlite(driver, batch)
        except self._error as exc:
            raise sa_exc.DBAPIError.instance(None, None, exc, self._error) from exc
        finally:
            raw.close()  # back to the pool, which rolls back whatever was left open

    def _on_postgres(self, conn: Any, batch: _Batch) -> int:
        with conn.pipeline():
            heads_read = conn.execute(_lock_heads(len(batch.tenants), "%s"), batch.head_params)
            stored_read = None
            if batch.look_for_stored:
                # Never prepared: a plan cached while the table was small reads every row.
                stored_read = conn.execute(
                    "SELECT event_id FROM audit_events WHERE event_id = ANY(%s)",
                    [list(batch.unique)],
                    prepare=False,
                )
            heads = {tenant: (seq, digest) for tenant, seq, digest in heads_read.fetchall()}
            stored = set() if stored_read is None else {row[0] for row in stored_read.fetchall()}
        rows = self._chain(batch.unique, stored, heads)
        if rows:
            with conn.cursor() as cursor, cursor.copy(_COPY) as copy:
                for row in rows:
                    copy.write_row(row)
        with conn.pipeline():
            if rows:
                conn.cursor().executemany(
                    "UPDATE audit_heads SET seq = %s, hash = %s WHERE tenant = %s",
                    _moved(rows),
                )
            conn.commit()
        return len(rows)

    def _on_sqlite(self, conn: Any, batch: _Batch) -> int:
        cursor = conn.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
            found = cursor.execute(_lock_heads(len(batch.tenants), "?"), batch.head_params)
            found = found.fetchall()
            heads = {tenant: (seq, digest) for tenant, seq, digest in found}
            stored: set[str] = set()
            if batch.look_for_stored:
                marks = ", ".join("?" * len(batch.unique))
                ids = cursor.execute(
                    f"SELECT event_id FROM audit_events WHERE event_id IN ({marks})",
                    list(batch.unique),
                )
                stored = {event_id for (event_id,) in ids}
            rows = self._chain(batch.unique, stored, heads)
            if rows:
                cursor.executemany(_INSERT, rows)
                cursor.executemany(
                    "UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = ?", _moved(rows)
                )
            conn.commit()
        finally:
            cursor.close()
        return len(rows)

    @staticmethod
    def _chain(
        unique: Mapping[str, NewEvent], stored: set[str], heads: dict[str, tuple[int, str]]
    ) -> list[tuple[Any, ...]]:
        """The rows of the events not stored yet, each linked after its tenant's head (which
        moves along), in the order given. Runs with the heads held."""
        rows = []
        for event_id, event in unique.items():
            if event_id in stored:
                continue
            tenant = event.values[_TENANT]
            seq, prev = heads[tenant]
            digest = link(event, prev)
            heads[tenant] = (seq + 1, digest)
            rows.append((*event.values, seq + 1, prev, digest))
        return rows


def _moved(rows: list[tuple[Any, ...]]) -> list[tuple[int, str, str]]:
    """(seq, hash, tenant) of each tenant's last row: its new head."""
    last = {row[_TENANT]: row for row in rows}
    return [(row[-3], row[-1], tenant) for tenant, row in last.items()]

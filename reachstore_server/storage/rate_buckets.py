"""The call-rate buckets of the whole deployment, one row each in the shared database.

``reachstore_server/common/limits.py`` (``FleetLimiter``) leases a few tokens at a time from here;
this module is only the transaction: read and lock the call's buckets, refill each by the
time passed on the database's clock (``clock.py``: the one clock every process shares), and
take the same number from each, or from none, writing back with a compare-and-set on each
row's version, as the reach channel buckets do (``reachstore_server/reach/shared_bucket.py``).
A refusal writes nothing.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from sqlalchemy import select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.common import database_errors
from reachstore_server.common.limits import BucketRule, Limits, RequestLimiter
from reachstore_server.storage.clock import db_clock
from reachstore_server.storage.models import RateBucketRow

# Compare-and-set attempts before advising the caller to come back after one token's time.
_ATTEMPTS = 20
_NAME_LEN = 200
# Float drift must not refuse a caller who waited exactly the advised time.
_EPSILON = 1e-6
# The longest a lease waits for another transaction's lock on a bucket row (PostgreSQL).
# Leases hold their rows for milliseconds; a lock held longer is a process stopped in the
# middle of one, and the lease fails (OperationalError) so its callers fall back to their
# process's own buckets (``limits.py``, ``RequestLimiter``) instead of waiting with it.
LOCK_WAIT_MS = 1000


class _Lost(Exception):
    """Another process changed a bucket between our read and our write."""


def row_name(name: str) -> str:
    """The bucket's key in the table: its name, or a digest of a longer one."""
    if len(name) <= _NAME_LEN:
        return name
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


class SqlRateBuckets:
    """``LeaseStore`` on the deployment's database."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def lease(self, parts: Sequence[BucketRule], want: int) -> tuple[int, float]:
        rules = {row_name(p.name): p for p in parts}
        for _ in range(_ATTEMPTS):
            try:
                with self._sessions.begin() as session:
                    return self._lease_once(session, rules, want)
            except (_Lost, IntegrityError):
                continue
        return 0, 1.0 / min(p.rate for p in parts)

    def _lease_once(
        self, session: Session, rules: dict[str, BucketRule], want: int
    ) -> tuple[int, float]:
        names = sorted(rules)
        if session.get_bind().dialect.name == "postgresql":
            session.execute(text(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}"))
        # On PostgreSQL the rows are locked as they are read, in name order (two leases of
        # overlapping buckets then cannot deadlock), so a lease that comes second waits for
        # the first and reads what it wrote. Without the lock it read the old row, lost the
        # compare-and-set below and started again: 32 processes leasing at once exhausted
        # their attempts and refused callers while the bucket held hundreds of tokens.
        # SQLite has no row locks; its one writer at a time keeps the compare-and-set rare.
        rows = {
            row.name: row
            for row in session.scalars(
                select(RateBucketRow)
                .where(RateBucketRow.name.in_(names))
                .order_by(RateBucketRow.name)
                .with_for_update()
            )
        }
        now = db_clock(session)  # after the wait for the locks
        tokens = {}
        for name in names:
            rule, row = rules[name], rows.get(name)
            if row is None:
                tokens[name] = float(rule.burst)
            else:
                # A clock stepping back grants nothing, and breaks nothing.
                refill = max(0.0, now - row.stamp) * rule.rate
                tokens[name] = min(float(rule.burst), row.tokens + refill)
        grant = min(want, *(math.floor(t + _EPSILON) for t in tokens.values()))
        if grant < 1:
            return 0, max((1.0 - tokens[n]) / rules[n].rate for n in names)
        for name in names:
            left = max(0.0, tokens[name] - grant)
            row = rows.get(name)
            if row is None:
                with session.begin_nested():  # another process may create it first
                    session.add(RateBucketRow(name=name, tokens=left, stamp=now, version=0))
                continue
            changed = session.execute(
                update(RateBucketRow)
                .where(RateBucketRow.name == name, RateBucketRow.version == row.version)
                .values(tokens=left, stamp=max(now, row.stamp), version=row.version + 1)
                .execution_options(synchronize_session=False)
            )
            if changed.rowcount != 1:  # type: ignore[attr-defined]
                raise _Lost
        return grant, 0.0


def fleet_limiter(limits: Limits, sessions: sessionmaker[Session]) -> RequestLimiter:
    """The call-rate limits every service applies: counted in the shared database, so any
    number of processes admit what one would (docs/LIMITS.md)."""
    return RequestLimiter(
        limits, store=SqlRateBuckets(sessions), store_down=database_errors.is_transient
    )

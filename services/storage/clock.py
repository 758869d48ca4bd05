"""The database's clock, for times that several processes compare.

Leases, due times and rate buckets are written by one process and judged by another; if
each judged by its own wall clock, a worker whose clock runs 20 s behind would see a live
lease as expired and take over a send still in flight. So they are all read and written
on one clock: PostgreSQL's. SQLite is a file on one machine and has no clock of its own;
its processes share that machine's clock (see docs/AT_MOST_ONCE.md).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, cast, extract, func, literal_column, select
from sqlalchemy.orm import Session

# julianday() counts days from noon, 24 November 4714 BC; the Unix epoch is this day.
_UNIX_EPOCH_JULIAN_DAY = 2440587.5


def db_clock(session: Session) -> float:
    """Epoch seconds now by the database's clock (one short statement)."""
    if session.get_bind().dialect.name == "postgresql":
        # clock_timestamp(), not now(): now() is when the transaction began.
        expr: Any = cast(extract("epoch", func.clock_timestamp()), Float)
    else:
        expr = (func.julianday(literal_column("'now'")) - _UNIX_EPOCH_JULIAN_DAY) * 86400.0
    return float(session.scalar(select(expr)))

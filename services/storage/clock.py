"""The database's clock, for times that several processes compare.

Leases, due times and rate buckets are written by one process and judged by another; if
each judged by its own wall clock, a worker whose clock runs 20 s ahead would see a live
lease as expired and take over a send still in flight. So they are all read and written
on one clock that no single process can move:

- PostgreSQL: the server's ``clock_timestamp()``.
- SQLite has no server, and ``julianday('now')`` is the calling process's own wall clock
  (a process run under a faked or stepped clock would bring its error along). Every
  process of a SQLite database runs on one machine, so they share that machine's boot
  clock (``/proc/uptime``, seconds since boot, which no process can fake or step). The
  clock is the boot clock plus one offset to wall time, fixed by the first process that
  asks after each boot and kept in the database (``machine_clock``), so every process
  reads the same time. Where there is no ``/proc/uptime`` (not Linux), the process's wall
  clock is used.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Float, String, cast, extract, func, select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, Session, mapped_column

from services.storage.models import Base

_UPTIME = Path("/proc/uptime")
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class MachineClockRow(Base):
    """For SQLite: wall time at this machine's boot, as fixed by the first process that
    asked (one row per boot)."""

    __tablename__ = "machine_clock"

    boot_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    wall_at_boot: Mapped[float] = mapped_column(Float)


def db_clock(session: Session) -> float:
    """Epoch seconds now by the database's clock."""
    if session.get_bind().dialect.name == "postgresql":
        # clock_timestamp(), not now(): now() is when the transaction began.
        expr: Any = cast(extract("epoch", func.clock_timestamp()), Float)
        value: Any = session.scalar(select(expr))
        return float(value)
    return _MACHINE.now(session)


class _MachineClock:
    """The shared boot-clock reading for SQLite; the offset is read once per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset: dict[str, float] = {}  # database URL -> wall time at boot

    def now(self, session: Session) -> float:
        since_boot = _seconds_since_boot()
        if since_boot is None:
            return time.time()
        bind: Any = session.get_bind()
        url = str(bind.url)
        offset = self._offset.get(url)
        if offset is None:
            offset = _agreed_offset(session, time.time() - since_boot)
            with self._lock:
                self._offset[url] = offset
        return offset + since_boot


_MACHINE = _MachineClock()


def _seconds_since_boot() -> float | None:
    try:
        return float(_UPTIME.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _agreed_offset(session: Session, mine: float) -> float:
    """The offset the first process of this boot wrote (``mine`` if this is the first).
    Written outside the caller's transaction, which may be read-only or roll back."""
    try:
        boot_id = _BOOT_ID.read_text().strip()
    except OSError:
        boot_id = "unknown"
    bind: Any = session.get_bind()
    with bind.connect() as connection:
        connection.execute(
            sqlite_insert(MachineClockRow)
            .values(boot_id=boot_id, wall_at_boot=mine)
            .on_conflict_do_nothing()
        )
        connection.commit()
        agreed: Any = connection.scalar(
            select(MachineClockRow.wall_at_boot).where(MachineClockRow.boot_id == boot_id)
        )
        return float(agreed)

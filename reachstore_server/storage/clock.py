"""The database's clock, for times that several processes compare.

Leases, due times and rate buckets are written by one process and judged by another; if
each judged by its own clock, a worker whose clock runs 20 s ahead would see a live lease
as expired and take over a send still in flight. So they are all read and written on one
clock that no single process can move:

- PostgreSQL: the server's ``clock_timestamp()``.
- SQLite has no server, and ``julianday('now')`` is the calling process's own idea of the
  time, which a process can have wrong on its own: a faked clock (an ``LD_PRELOAD`` library
  such as libfaketime) or a time namespace (which moves the boot and monotonic clocks,
  ``/proc/uptime`` included). Every process of a SQLite database runs on one machine, and
  the one clock they all share is the kernel's real-time clock, read here by the system
  call itself (namespaces do not move it; preloaded libraries do not see a raw system
  call). Where that call is not known (not Linux on x86-64 or arm64), the process's wall
  clock is used.
"""

from __future__ import annotations

import ctypes
import platform
import time
from typing import Any

from sqlalchemy import Float, cast, extract, func, select
from sqlalchemy.orm import Session

# clock_gettime's system call number, and CLOCK_REALTIME.
_SYS_CLOCK_GETTIME = {"x86_64": 228, "aarch64": 113}.get(platform.machine())
_CLOCK_REALTIME = 0


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc() if platform.system() == "Linux" and _SYS_CLOCK_GETTIME else None


def pg_clock() -> Any:
    """PostgreSQL's clock as an expression, epoch seconds: ``clock_timestamp()``, not
    ``now()``, which is when the transaction began."""
    return cast(extract("epoch", func.clock_timestamp()), Float)


def db_clock(session: Session) -> float:
    """Epoch seconds now by the database's clock."""
    if session.get_bind().dialect.name == "postgresql":
        value: Any = session.scalar(select(pg_clock()))
        return float(value)
    return machine_clock()


def machine_clock() -> float:
    """The kernel's real-time clock, as every process on this machine reads it."""
    if _LIBC is not None:
        ts = _Timespec()
        if _LIBC.syscall(_SYS_CLOCK_GETTIME, _CLOCK_REALTIME, ctypes.byref(ts)) == 0:
            return ts.tv_sec + ts.tv_nsec / 1e9
    return time.time()

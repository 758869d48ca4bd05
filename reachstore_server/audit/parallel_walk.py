"""Walking a long chain on every core: the chain is cut into one stretch per worker
process, each walks its own (reads its rows, hashes each event, checks the links inside
it), and the stretches are joined where they meet. An event's hash covers only its own
row, its link only the row before, so stretches are independent but for their edges.

Only a chain every stretch of which passes is answered this way; when one does not, the
caller walks the chain one event at a time to name the first break exactly
(``reachstore_server/audit/verify.py``). Hashing stays in this program, never in the database:
the database is what Verify does not trust.

Workers come from a forkserver: forking the audit service itself, with its gRPC threads,
is not safe, and a fresh interpreter per verify would cost more than it saves.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import logging
import multiprocessing
import os
from collections.abc import Callable

from sqlalchemy.engine import make_url

from reachstore_server.audit.copy_walk import copy_walk
from reachstore_server.audit.verify import Stops, Walk, quick_walk
from reachstore_server.common.cores import usable_cores

log = logging.getLogger(__name__)

# Below this many events one process is quicker than starting workers; the tests set it
# low to walk small chains in parallel too.
MIN_EVENTS_SETTING = "REACHSTORE_AUDIT_VERIFY_PARALLEL_MIN"
DEFAULT_MIN_EVENTS = 200_000

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(
    ["reachstore_server.audit.store", "reachstore_server.storage.engine"]
)


def min_events() -> int:
    raw = os.environ.get(MIN_EVENTS_SETTING, "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() else DEFAULT_MIN_EVENTS


def workers() -> int:
    return min(8, usable_cores())


def _walk_stretch(url: str, tenant: str, lo: int, hi: int | None, stops: Stops) -> Walk | None:
    # Imported here: the store imports this module.
    from reachstore_server.audit.store import AuditStore
    from reachstore_server.storage.engine import make_engine, make_sessions

    engine = make_engine(url)
    try:
        if engine.dialect.name == "postgresql":
            return copy_walk(engine, tenant, lo, hi, stops)
        return quick_walk(AuditStore(make_sessions(engine)).chain_rows(tenant, lo, hi), stops)
    finally:
        engine.dispose()


def stretches(from_seq: int, last_seq: int, count: int) -> list[tuple[int, int | None]]:
    """``count`` ranges of positions covering ``from_seq``.. the end (the last open, so
    events appended meanwhile are walked too)."""
    size = max(1, (last_seq - from_seq + 1 + count - 1) // count)
    bounds: list[tuple[int, int | None]] = []
    lo = from_seq
    while lo <= last_seq and len(bounds) < count - 1:
        bounds.append((lo, min(last_seq, lo + size - 1)))
        lo += size
    bounds.append((lo, None))
    return bounds


def parallel_walker(
    url: str, tenant: str, from_seq: int, last_seq: int, to_seq: int | None
) -> Callable[[Stops], Walk | None] | None:
    """A ``walked`` for ``verify_chain``, or None when the chain is too short to gain."""
    end = last_seq if to_seq is None else min(last_seq, to_seq)
    count = workers()
    if count < 2 or end - from_seq + 1 < min_events():
        return None
    if make_url(url).database in (None, "", ":memory:"):
        return None  # a database only this process can see

    def walk(stops: Stops) -> Walk | None:
        ranges = stretches(from_seq, end, count)
        if to_seq is not None:
            ranges[-1] = (ranges[-1][0], to_seq)
        try:
            with concurrent.futures.ProcessPoolExecutor(len(ranges), mp_context=_context) as pool:
                futures = [
                    pool.submit(_walk_stretch, url, tenant, lo, hi, stops) for lo, hi in ranges
                ]
                parts = [future.result() for future in futures]
        except (concurrent.futures.process.BrokenProcessPool, OSError) as exc:
            # Workers could not start or died: the walk one event at a time still answers.
            log.warning("verifying %s in one process: workers failed (%s)", tenant, exc)
            return None
        joined: Walk | None = Walk(0, "", 0, "", 0, {}, {})
        for part in parts:
            if part is None or joined is None:
                return None
            joined = joined.then(part)
        return joined

    return walk

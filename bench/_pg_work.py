"""What PostgreSQL did for a piece of work, and how much room the data takes.

``snapshot`` reads the cumulative counters of one database from ``pg_stat_database``
through a connection to *another* database (the admin URL), so reading them adds nothing
to what is measured. The services' backends report their counters to the statistics
system when a transaction ends, but at most once a second and, once idle, only after
about 10 s (PostgreSQL 15), so ``settled_snapshot`` waits that out first.

``pg_stat_statements`` would split the work by statement, but it must be in
``shared_preload_libraries``, which takes a server restart; ``statements_available`` says
whether it is loaded, and the reports say when it was not.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "blks_hit",
    "blks_read",
)
STATS_FLUSH_WAIT_SECONDS = 11.0  # an idle backend reports after ~10 s (PGSTAT_IDLE_INTERVAL)


def database_name(sqlalchemy_url: str) -> str:
    return str(make_url(sqlalchemy_url).database)


def libpq_url(sqlalchemy_url: str) -> str:
    return make_url(sqlalchemy_url).set(drivername="postgresql").render_as_string(False)


def snapshot(admin_url: str, database: str) -> dict[str, float]:
    """The counters of ``database`` now, and the time they were read."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT {', '.join(COUNTERS)} FROM pg_stat_database WHERE datname = %s",  # noqa: S608 - fixed names
            (database,),
        ).fetchone()
    if row is None:
        raise RuntimeError(f"pg_stat_database has no row for {database}")
    out = {name: float(value) for name, value in zip(COUNTERS, row, strict=True)}
    out["at"] = time.perf_counter()
    return out


def settled_snapshot(admin_url: str, database: str) -> dict[str, float]:
    """``snapshot`` after the backends have had time to report what they did."""
    time.sleep(STATS_FLUSH_WAIT_SECONDS)
    return snapshot(admin_url, database)


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in (*COUNTERS, "at")}


def per_operation(
    work: Mapping[str, float], idle: Mapping[str, float], operations: int
) -> dict[str, float]:
    """Counters of ``work`` (a delta) less the background that ``idle`` (a delta measured
    with no load) accrues in as many seconds, divided by ``operations``. The background is
    the services' polling: reach's due-action claims, the ingest worker's, the shippers'
    outbox reads."""
    seconds = work["at"]
    rate = {name: idle[name] / idle["at"] for name in COUNTERS}
    return {name: (work[name] - rate[name] * seconds) / operations for name in COUNTERS}


def idle_rates(idle: Mapping[str, float]) -> dict[str, float]:
    return {name: idle[name] / idle["at"] for name in COUNTERS}


TABLE_COUNTERS = ("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch")


def table_scans(database_url: str) -> dict[str, dict[str, float]]:
    """Per table: sequential scans and the rows they read, index scans and the rows they
    fetched (``pg_stat_user_tables``) - which table the ``tup_returned`` of
    ``pg_stat_database`` comes from. Read in the measured database itself, so the reading
    adds one short transaction to it."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT relname, {', '.join(TABLE_COUNTERS)} FROM pg_stat_user_tables"  # noqa: S608
        ).fetchall()
    return {
        str(r[0]): {c: float(v or 0) for c, v in zip(TABLE_COUNTERS, r[1:], strict=True)}
        for r in rows
    }


def scans_per_operation(
    before: Mapping[str, Mapping[str, float]],
    after: Mapping[str, Mapping[str, float]],
    operations: int,
) -> dict[str, dict[str, float]]:
    """Per-table scan counters per operation, tables that moved only (background
    included: the idle rate is not subtracted here)."""
    out = {}
    for table, values in after.items():
        d = {c: (values[c] - before.get(table, {}).get(c, 0.0)) / operations for c in values}
        if any(abs(v) >= 0.01 for v in d.values()):
            out[table] = d
    return out


def connections(admin_url: str, database: str) -> int:
    """Open connections to ``database`` now (each service process keeps a pool)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchone()
    return int(row[0]) if row else 0


def statements_available(admin_url: str) -> bool:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        libs = str(conn.execute("SHOW shared_preload_libraries").fetchone()[0])  # type: ignore[index]
    return "pg_stat_statements" in libs


def table_sizes(database_url: str) -> dict[str, int]:
    """``pg_total_relation_size`` (heap, indexes, TOAST) of every table of the public
    schema, in bytes, after a plain ``VACUUM``: that gives back the empty tail of tables
    whose rows are deleted once used (the audit outbox) and marks dead row versions
    reusable, as autovacuum would in a long run. The space of dead versions left by
    updates (an action's row is updated at each step) is still counted, so for tables that
    are updated the figure is an upper bound of the steady state."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        conn.execute("VACUUM")
        rows = conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY c.relname"
        ).fetchall()
    return {str(name): int(size) for name, size in rows}


def row_counts(database_url: str, tables: list[str]) -> dict[str, int]:
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        return {
            t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0])  # type: ignore[index]  # noqa: S608
            for t in tables
        }


def growth_per_million(
    small: Mapping[str, int], large: Mapping[str, int], n_small: int, n_large: int
) -> dict[str, Any]:
    """Bytes per item and per million items of each table, from the sizes at two counts
    (the slope, so fixed costs such as empty tables and first pages drop out); a straight
    line is assumed between and beyond them."""
    out = {}
    for name in large:
        slope = (large[name] - small.get(name, 0)) / (n_large - n_small)
        out[name] = {"bytes_per_item": slope, "mib_per_million": slope * 1e6 / 2**20}
    return out


def next_xid(admin_url: str) -> int:
    """The next transaction id the server hands out (to any database)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()
    assert row is not None
    return int(row[0])


def writing_transactions(admin_url: str, database: str, since_xid: int) -> int:
    """The reach transactions since ``since_xid`` that reserved a task or changed an
    action's state, counted by the transaction ids on the rows they inserted: every such
    transaction inserts history rows, which are never updated, so each keeps its xmin.
    ``pg_stat_database`` cannot tell these from read-only transactions, which an
    autocommit read counts as commits too; claims (which only update action rows that a
    later change updates again) are not in it."""
    url = make_url(admin_url).set(database=database).render_as_string(False)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT xmin::text) FROM reach_history WHERE xmin::text::bigint >= %s",
            (since_xid % (1 << 32),),  # xmin is the 32-bit transaction id
        ).fetchone()
    assert row is not None
    return int(row[0])

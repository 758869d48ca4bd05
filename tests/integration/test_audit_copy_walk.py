"""The COPY walk of a chain on PostgreSQL (``reachstore_server/audit/copy_walk.py``) against the
walk over plain rows: on values COPY escapes, JSON escapes, both or neither, and on a
NULL someone wrote into the table, both must agree on every event: what passes, what each
stretch's edges and kept hashes are, and where a change breaks the chain.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text

from reachstore_server.audit.chain import event_hash
from reachstore_server.audit.copy_walk import copy_walk
from reachstore_server.audit.store import AuditStore
from reachstore_server.audit.verify import EDITED, Stops, quick_walk
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head
from tests.integration.test_audit_tamper import (
    KEY,
    KEYS,
    audit_event,
    drop_append_only_triggers,
)

# Values each of which takes some path other than the plain one: COPY escapes the
# backslash and the whitespace controls, JSON escapes quotes and every control character,
# COPY sends the other controls as they are, and ``\N`` is COPY's NULL (as text it must
# stay text).
AWKWARD = [
    'say "hi"',
    "back\\slash",
    "tab\there",
    "new\nline",
    "carriage\rreturn",
    "bell\x07 and \x01 and \x1f",
    "\b\f\v",
    "record\x1eseparator",
    "del\x7f",
    "ünïcødé 漢字 🙂",
    "",
    "\\N",
    "\\",
    '\\"',
]
# More events than one batch of the COPY walk, the awkward ones in the middle, so a batch
# holds plain and awkward lines together.
EVENTS = 2600
AWKWARD_FROM = 1400


@pytest.fixture
def engine(pg_database: str) -> Iterator[Engine]:
    engine = make_engine(pg_database)
    migrate_to_head(engine)
    yield engine
    engine.dispose()


def awkward_chain(store: AuditStore) -> None:
    events = []
    for n in range(1, EVENTS + 1):
        changes: dict[str, Any] = {}
        k = n - AWKWARD_FROM
        if 0 <= k < len(AWKWARD):
            value = AWKWARD[k]
            changes = {"params_json": value, "idempotency_key": value, "error_code": value}
        if n == AWKWARD_FROM + len(AWKWARD):
            changes = {"duration_ms": -7}
        events.append(audit_event("acme", n, **changes))
    store.append(events)
    store.checkpoint(KEY)


def both_walks(engine: Engine, lo: int, hi: int | None, stops: Stops) -> tuple[Any, Any]:
    rows = AuditStore(make_sessions(engine)).chain_rows("acme", lo, hi)
    return copy_walk(engine, "acme", lo, hi, stops), quick_walk(rows, stops)


STOPS = Stops(
    frozenset({1, AWKWARD_FROM + 3, EVENTS}), frozenset({1, AWKWARD_FROM + 5, AWKWARD_FROM + 12})
)


def test_awkward_values_walk_alike_both_ways(engine: Engine) -> None:
    awkward_chain(AuditStore(make_sessions(engine)))
    for lo, hi in [(1, None), (1, AWKWARD_FROM + 5), (AWKWARD_FROM + 6, None), (5, 5)]:
        by_copy, by_rows = both_walks(engine, lo, hi, STOPS)
        assert by_rows is not None, (lo, hi)
        assert by_copy == by_rows, (lo, hi)
    assert both_walks(engine, 1, None, STOPS)[0].count == EVENTS


def test_a_null_written_with_its_hash_walks_alike_both_ways(engine: Engine) -> None:
    """A NULL in a text column, hashed as JSON's null (what ``values_hash`` does with any
    value that is not text): not a break, and read the same either way."""
    store = AuditStore(make_sessions(engine))
    awkward_chain(store)
    with engine.begin() as conn:
        drop_append_only_triggers(conn)
        conn.execute(text("ALTER TABLE audit_events ALTER COLUMN error_code DROP NOT NULL"))
        n = AWKWARD_FROM + 2
        row = dict(
            conn.execute(
                text("SELECT * FROM audit_events WHERE tenant = 'acme' AND seq = :n"), {"n": n}
            )
            .mappings()
            .one()
        )
        row["error_code"] = None
        digest = event_hash(row)
        conn.execute(
            text("UPDATE audit_events SET error_code = NULL, hash = :h WHERE seq = :n"),
            {"h": digest, "n": n},
        )
        conn.execute(
            text("UPDATE audit_events SET prev_hash = :h WHERE tenant = 'acme' AND seq = :n"),
            {"h": digest, "n": n + 1},
        )
    # The event after it now links to a changed hash without hashing to its own: both
    # walks must stop there, and agree on the stretch before.
    by_copy, by_rows = both_walks(engine, 1, None, STOPS)
    assert by_copy is None and by_rows is None
    by_copy, by_rows = both_walks(engine, 1, AWKWARD_FROM + 2, STOPS)
    assert by_rows is not None and by_copy == by_rows


@pytest.mark.parametrize("position", [100, AWKWARD_FROM + 1, AWKWARD_FROM + 5])
def test_an_edit_to_a_plain_or_an_awkward_event_is_found(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, position: int
) -> None:
    """One character changed in an event COPY sends plain (100), or one it escapes: the
    parallel walk, which reads with COPY, must not pass it, and Verify names the edit."""
    monkeypatch.setenv("REACHSTORE_AUDIT_VERIFY_PARALLEL_MIN", "1")
    store = AuditStore(make_sessions(engine))
    awkward_chain(store)
    assert store.verify("acme", KEYS).walkers >= 2, "the chain is walked in parallel"
    with engine.begin() as conn:
        drop_append_only_triggers(conn)
        conn.execute(
            text(
                "UPDATE audit_events SET params_json = params_json || 'x'"
                " WHERE tenant = 'acme' AND seq = :n"
            ),
            {"n": position},
        )
    assert both_walks(engine, 1, None, STOPS) == (None, None)
    found = store.verify("acme", KEYS).first_break
    assert found is not None and (found.kind, found.seq) == (EDITED, position), found

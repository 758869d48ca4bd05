"""Attack 15c: the COPY walk (``reachstore_server/audit/copy_walk.py``) hashes ``duration_ms`` from
its text, whatever the column now is; the canonical hash (``reachstore_server/audit/chain.py``)
hashes the value the database returns, and a text value is hashed as a JSON string.

Whoever can alter the table changes ``duration_ms`` to a text column. Then:

- on a plain line, the text ``20`` is put bare into the template and hashes as the
  integer 20 did, so the parallel walk passes every event, while the one-process walk
  (and ``event_hash`` of the row as stored) finds the first event edited;
- on a line COPY escapes (here: params holding a quote, which JSON writes as ``\\"``),
  ``_decoded`` turns any text that ``str.isdigit`` accepts into an int: ``0020`` or
  ``２０`` (full-width digits) hash as the integer 20, so a value the event never had
  passes the parallel walk.

So on PostgreSQL, a chain of at least REACHSTORE_AUDIT_VERIFY_PARALLEL_MIN events passes
Verify with content the one-process walk rejects as edited. Each test asserts the parallel
Verify names a break as the one-process Verify does; they fail today because the parallel
walk passes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from reachstore_server.audit.chain import canonical_json
from reachstore_server.audit.signing import CheckpointKeys, PrivateKey
from reachstore_server.audit.store import AuditStore
from reachstore_server.audit.verify import EDITED
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head
from tests.integration.test_audit_tamper import audit_event, drop_append_only_triggers

KEY = PrivateKey.generate()
KEYS = CheckpointKeys(KEY.public)
QUOTED = 20  # the event whose params hold a quote: COPY sends a backslash for it


@pytest.fixture
def engine(pg_database: str) -> Iterator[Engine]:
    engine = make_engine(pg_database)
    migrate_to_head(engine)
    store = AuditStore(make_sessions(engine))
    events = [audit_event("acme", n) for n in range(1, 41)]
    events[QUOTED - 1]["params_json"] = canonical_json({"note": 'say "hi"'})
    store.append(events)
    store.checkpoint(KEY)
    yield engine
    engine.dispose()


def verify_both_ways(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    store = AuditStore(make_sessions(engine))
    monkeypatch.setenv("REACHSTORE_AUDIT_VERIFY_PARALLEL_MIN", "1000000000")
    one = store.verify("acme", KEYS)
    monkeypatch.setenv("REACHSTORE_AUDIT_VERIFY_PARALLEL_MIN", "1")
    parallel = store.verify("acme", KEYS)
    return one, parallel


def test_the_untouched_chain_passes_both_ways(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, parallel = verify_both_ways(engine, monkeypatch)
    assert one.first_break is None and parallel.first_break is None  # type: ignore[attr-defined]
    assert parallel.walkers >= 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [None, "0020", "２０"], ids=["as-is", "zero-padded", "fullwidth"])
def test_duration_ms_turned_into_text_is_found_by_the_parallel_walk_too(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    with engine.begin() as conn:
        drop_append_only_triggers(conn)
        conn.execute(
            text(
                "ALTER TABLE audit_events ALTER COLUMN duration_ms TYPE text"
                " USING duration_ms::text"
            )
        )
        if value is not None:
            conn.execute(
                text("UPDATE audit_events SET duration_ms = :v WHERE tenant = 'acme' AND seq = :n"),
                {"v": value, "n": QUOTED},
            )
        stored = conn.execute(
            text("SELECT duration_ms FROM audit_events WHERE tenant = 'acme' AND seq = :n"),
            {"n": QUOTED},
        ).scalar_one()
    assert stored == (value or "20") and stored != 20

    one, parallel = verify_both_ways(engine, monkeypatch)
    found = one.first_break  # type: ignore[attr-defined]
    assert found is not None and found.kind == EDITED, found
    assert parallel.first_break == found, (  # type: ignore[attr-defined]
        f"the one-process walk finds {found}; the COPY walk passes the chain: {parallel}"
    )

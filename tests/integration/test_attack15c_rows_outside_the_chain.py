"""Attack 15c: rows of a tenant's ``audit_events`` that Verify never reads.

Verify walks the rows of a chain at positions 1, 2, ... (``seq > 0``, in keyset pages of
``VERIFY_PAGE`` rows on the one-process walk; ``seq >= 1`` in the COPY walk), and checks
that they hash and link. It never checks that the table holds nothing else. But the
readers of the trail do not ask for positions 1, 2, ...: ``GetEvent`` and ``audit list``
read by event id or row id, ``ListEvents`` reads by ``seq > after``. So whoever can write
the database (the signing key and the witness out of reach) can put rows where the
readers see them and Verify does not:

- a made-up event at position 0 (or any position below 1): a plain INSERT, which the
  append-only triggers do not even refuse; ``GetEvent`` serves it, the chain around it is
  untouched, Verify passes;
- a second, changed copy of an existing event at the last position of a verify page
  (position 5000): the keyset paging asks the next page for ``seq > 5000`` and so never
  sees the second row at 5000; the COPY walk does see it, stops, and hands over to the
  one-process walk, which then passes. ``ListEvents`` shows both copies.

Each test makes the attack from the outside (SQL on the database) against a trail whose
every checkpoint and append is in a witness file, and asserts that Verify reports a
break. They fail today because Verify reports none.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from reachstore_server.audit.checkpointing import Checkpointer
from reachstore_server.audit.signing import CheckpointKeys, PrivateKey
from reachstore_server.audit.store import VERIFY_PAGE, AuditStore, EventFilter
from reachstore_server.audit.verify import Cadence, Report
from reachstore_server.audit.verify_settings import Verifier
from reachstore_server.audit.witness import Delivery, FileWitness
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head
from tests.integration.test_audit_tamper import audit_event, drop_append_only_triggers

KEY = PrivateKey.generate()
KEYS = CheckpointKeys(KEY.public)


@pytest.fixture(autouse=True, params=["one-process", "parallel"])
def walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "parallel":
        monkeypatch.setenv("REACHSTORE_AUDIT_VERIFY_PARALLEL_MIN", "1")
    return str(request.param)


@dataclasses.dataclass
class Witnessed:
    engine: Engine
    store: AuditStore
    witness: Path

    def verify(self, tenant: str = "acme") -> Report:
        cadence = Cadence(60.0, 300.0, dt.datetime.now(dt.UTC))
        verifier = Verifier(KEYS, [FileWitness(self.witness)], cadence)
        [(_, report)] = verifier.verify(self.store, [tenant])
        return report


def fresh(tenant: str, first: int, last: int) -> list[dict[str, Any]]:
    stamp = (
        (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5))
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
    return [audit_event(tenant, n, time=stamp) for n in range(first, last + 1)]


def build(database_url: str, tmp_path: Path, events: int) -> Iterator[Witnessed]:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    store = AuditStore(make_sessions(engine))
    witness = tmp_path / "other-volume" / "audit_witness.jsonl"
    checkpointer = Checkpointer(store, KEY, Delivery([FileWitness(witness)], KEY))
    store.append(fresh("acme", 1, events) + fresh("globex", 1, 3))
    checkpointer.witness_appends(["acme", "globex"])
    assert checkpointer.tick() == 2
    trail = Witnessed(engine, store, witness)
    report = trail.verify()
    assert report.first_break is None and report.events_checked == events, report
    yield trail
    engine.dispose()


@pytest.fixture
def witnessed(database_url: str, tmp_path: Path) -> Iterator[Witnessed]:
    yield from build(database_url, tmp_path, 20)


def insert_row(engine: Engine, row: dict[str, Any]) -> None:
    row = {k: v for k, v in row.items() if k != "id"}
    with engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO audit_events ({', '.join(row)}) "
                f"VALUES ({', '.join(':' + k for k in row)})"
            ),
            row,
        )


def stored(engine: Engine, tenant: str, seq: int) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(
            conn.execute(
                text("SELECT * FROM audit_events WHERE tenant = :t AND seq = :s"),
                {"t": tenant, "s": seq},
            )
            .mappings()
            .one()
        )


@pytest.mark.parametrize("position", [0, -1])
def test_a_made_up_event_below_position_1_is_found(witnessed: Witnessed, position: int) -> None:
    """A plain INSERT (no trigger refuses it) of an event that never happened, at a
    position no walk reads. ``GetEvent`` (``AuditStore.get``) serves it as acme's."""
    model = stored(witnessed.engine, "acme", 20)
    forged = {
        **model,
        "seq": position,
        "event_id": "acme-made-up",
        "caller_key_id": "key_ceo",
        "service": "admin",
        "method": "DeleteEverything",
        "params_json": '{"confirm":true}',
    }
    insert_row(witnessed.engine, forged)

    served = witnessed.store.get("acme-made-up")
    assert served is not None and (served.tenant, served.method) == ("acme", "DeleteEverything")

    report = witnessed.verify()
    assert report.first_break is not None, (
        f"acme's audit_events holds an event at position {position} that is in no chain, "
        f"GetEvent serves it, and Verify passes: {report}"
    )


@pytest.fixture
def paged(pg_database: str, tmp_path: Path) -> Iterator[Witnessed]:
    """One full verify page of events (5000), so the chain's last event is the last row of
    the one-process walk's first page."""
    yield from build(pg_database, tmp_path, VERIFY_PAGE)


def test_a_changed_second_copy_of_the_event_at_a_page_boundary_is_found(
    paged: Witnessed,
) -> None:
    """PostgreSQL: (tenant, seq) and event_id uniqueness dropped, a changed copy of event
    5000 added at position 5000. The one-process walk reads ``seq > 0 ... LIMIT 5000``
    (the original comes first among the ties), then ``seq > 5000``: the copy is never read.
    ``ListEvents`` (``AuditStore.events``) shows it."""
    with paged.engine.begin() as conn:
        drop_append_only_triggers(conn)
        conn.execute(text("ALTER TABLE audit_events DROP CONSTRAINT uq_audit_events_seq"))
        conn.execute(text("ALTER TABLE audit_events DROP CONSTRAINT uq_audit_events_event_id"))
    original = stored(paged.engine, "acme", VERIFY_PAGE)
    insert_row(paged.engine, {**original, "result_status": "ok", "error_code": "",
                              "params_json": '{"document_id":"someone-elses"}'})  # fmt: skip

    listed = paged.store.events(EventFilter("acme"), 10, VERIFY_PAGE - 1)
    assert [r.seq for r in listed] == [VERIFY_PAGE, VERIFY_PAGE], "ListEvents shows both"
    assert {r.params_json for r in listed} >= {'{"document_id":"someone-elses"}'}

    report = paged.verify()
    assert report.first_break is not None, (
        f"acme holds two different events at position {VERIFY_PAGE} and Verify passes: {report}"
    )

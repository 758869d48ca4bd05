"""The outbox on a real store: a call's event commits with its change or not at all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.audit_client import outbox
from reachstore_server.audit_client.calls import CallAuditor, service_label
from reachstore_server.storage.audit_models import AuditOutboxRow
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.keys import KeySpec, KeyStore
from reachstore_server.storage.schema import migrate_to_head


@pytest.fixture
def sessions(database_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    made = make_sessions(engine)
    outbox.install(made)
    yield made
    engine.dispose()


def _draft() -> outbox.Draft:
    return outbox.Draft("acme", "k1", "admin", "CreateKey", {"name": "[field:x]"}, "")


def _outbox(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(AuditOutboxRow)) or 0)


def test_the_event_commits_with_the_change(sessions: sessionmaker[Session]) -> None:
    draft = _draft()
    token = outbox.open_draft(draft)
    try:
        KeyStore(sessions).create("acme", KeySpec("ops", ("read",)))
        KeyStore(sessions).create("acme", KeySpec("second write of the same call", ("read",)))
    finally:
        outbox.close_draft(token)
    assert draft.written and _outbox(sessions) == 1


def test_a_change_that_rolls_back_leaves_no_event_and_the_retry_carries_it(
    sessions: sessionmaker[Session],
) -> None:
    draft = _draft()
    token = outbox.open_draft(draft)
    try:
        with pytest.raises(RuntimeError), sessions.begin() as session:
            # Any ORM write counts as the call's change; this one is then rolled back.
            session.add(AuditOutboxRow(service="x", event_json="{}", created_at=0.0, attempts=0))
            session.flush()
            raise RuntimeError("the change fails after writing")
        assert not draft.written and _outbox(sessions) == 0
        KeyStore(sessions).create("acme", KeySpec("ops", ("read",)))
    finally:
        outbox.close_draft(token)
    assert draft.written and _outbox(sessions) == 1


def test_without_a_draft_nothing_is_recorded(sessions: sessionmaker[Session]) -> None:
    KeyStore(sessions).create("acme", KeySpec("ops", ("read",)))
    assert _outbox(sessions) == 0


def test_reads_are_audited_only_when_asked(sessions: sessionmaker[Session]) -> None:
    from reachstore_server.common.pii import Masker

    quiet = CallAuditor(sessions, Masker(b"x" * 16), audit_reads=False)
    loud = CallAuditor(sessions, Masker(b"x" * 16), audit_reads=True)
    query = "/reachstore.query.v1.QueryService/Query"
    assert not quiet.wants(query, "read") and loud.wants(query, "read")
    assert quiet.wants("/reachstore.reach.v1.ReachService/SubmitTask", "reach")
    assert not loud.wants("/reachstore.audit.v1.AuditService/AppendEvents", "internal")
    assert service_label("/reachstore.admin.v1.KeyService/CreateKey") == "admin"

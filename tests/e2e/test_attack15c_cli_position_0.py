"""Attack 15c from the command line: a made-up event INSERTed at position 0 of acme's
chain (the append-only triggers refuse UPDATE and DELETE, not INSERT). `reachstore audit
list` shows it among acme's events; `reachstore audit verify`, with the witness on
another volume and the public key kept apart, must exit 1. Today it exits 0: no walk reads
positions below 1."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from reachstore_server.storage.engine import make_engine
from tests.e2e.test_attack15_cli import Deployed
from tests.e2e.test_audit_cli import reachstore

pytestmark = pytest.mark.e2e


def test_a_made_up_event_at_position_0_exits_1(tmp_path: Path) -> None:
    deployed = Deployed(tmp_path)
    code, lines = deployed.verify()
    assert code == 0, lines
    engine = make_engine(f"sqlite:///{deployed.folder / 'reachstore.db'}")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO audit_events (tenant, seq, event_id, time, caller_key_id, service,"
                " method, idempotency_key, params_json, result_status, error_code, category,"
                " duration_ms, trace_id, prev_hash, hash)"
                " SELECT tenant, 0, 'acme-made-up', time, 'key_ceo', 'admin', 'DeleteEverything',"
                " '', '{}', 'ok', '', '', 1, '', prev_hash, hash"
                " FROM audit_events WHERE tenant = 'acme' AND seq = 1"
            )
        )
    engine.dispose()
    listed = reachstore("audit", "list", "--data-dir", str(deployed.folder))
    assert "DeleteEverything" in listed.stdout, listed.stdout + listed.stderr
    code, lines = deployed.verify()
    assert code == 1, "\n".join(["a made-up event at position 0 passed verify:", *lines])

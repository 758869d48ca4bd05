"""A service started with a setting missing or wrong refuses to start the way it refuses
an old schema (reachstore_server/storage/schema.py): exit status 2 and one line on stderr naming
the variable and the rule, no traceback. An operator's mistake is not a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from reachstore_server.storage.engine import make_engine
from reachstore_server.storage.schema import migrate_to_head
from tests.e2e.system import start_service_once

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

# (component, extra environment, what the line must name)
CASES = [
    ("audit", {}, "REACHSTORE_AUDIT_SIGNING_KEY"),
    ("reach", {}, "REACHSTORE_PII_SECRET"),
    ("query", {"REACHSTORE_QUERY_TIMEOUT_CAP_MS": "soon"}, "REACHSTORE_QUERY_TIMEOUT_CAP_MS"),
    ("ingest", {"REACHSTORE_QUERY_TIMEOUT_CAP_MS": "0"}, "REACHSTORE_QUERY_TIMEOUT_CAP_MS"),
    ("audit", {"REACHSTORE_AUDIT_CHECKPOINT_S": "x"}, "REACHSTORE_AUDIT_CHECKPOINT_S"),
    ("reach", {"REACHSTORE_QUERY_TIMEOUT_CAP_MS": "-1"}, "REACHSTORE_QUERY_TIMEOUT_CAP_MS"),
    ("bridge", {"REACHSTORE_QUERY_TIMEOUT_CAP_MS": "x"}, "REACHSTORE_QUERY_TIMEOUT_CAP_MS"),
]


@pytest.mark.parametrize(("component", "extra", "named"), CASES)
def test_a_bad_setting_is_one_line_and_status_2(
    component: str, extra: dict[str, str], named: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    engine = make_engine(f"sqlite:///{data / 'reachstore.db'}")
    migrate_to_head(engine)
    engine.dispose()
    result = start_service_once(component, data, extra)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if named in line]
    assert lines and lines[-1].startswith(f"reachstore {component}: refusing to start: "), (
        result.stderr[-2000:]
    )

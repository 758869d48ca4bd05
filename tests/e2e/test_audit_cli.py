"""`reachstore audit verify|list` as an operator runs it: a subprocess against a data
folder (the SQLite file and the audit.key that `reachstore up` keeps there), with its
exit code as the contract for scripts: 0 ok, 1 broken, 2 could not check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from services.audit.chain import Signer
from services.audit.store import AuditStore
from services.common.kept_secrets import KEPT_SECRETS
from services.storage.engine import init_schema, make_engine, make_sessions
from tests.integration.test_audit_tamper import drop_append_only_triggers, events

pytestmark = pytest.mark.e2e

KEY = "0123456789abcdef" * 4
KEY_FILE = KEPT_SECRETS["REACHSTORE_AUDIT_KEY"]


def reachstore(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command line, with no audit key or database in the environment unless given:
    the data folder alone must be enough."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REACHSTORE_AUDIT_KEY", "REACHSTORE_DATABASE_URL", "REACHSTORE_DATA_DIR")
    }
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data folder as `up` leaves it: acme with 12 events (checkpoints at 6 and 12),
    globex with 3 (checkpoint at 3), and the signing key readable by its owner only."""
    folder = tmp_path / "data"
    engine = make_engine(f"sqlite:///{folder / 'reachstore.db'}")
    init_schema(engine)
    store = AuditStore(make_sessions(engine))
    signer = Signer(KEY.encode("utf-8"))
    store.append(events("acme", 1, 6) + events("globex", 1, 3))
    store.checkpoint(signer)
    store.append(events("acme", 7, 12))
    store.checkpoint(signer)
    engine.dispose()
    fd = os.open(folder / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(KEY + "\n")
    return folder


def edit_event(folder: Path, seq: int, column: str = "params_json", value: str = "{}") -> None:
    """Changes one of acme's events in place, as the database's owner could."""
    engine = make_engine(f"sqlite:///{folder / 'reachstore.db'}")
    with engine.begin() as conn:
        drop_append_only_triggers(conn)
        conn.execute(
            text(f"UPDATE audit_events SET {column} = :value WHERE tenant = 'acme' AND seq = :seq"),
            {"value": value, "seq": seq},
        )
    engine.dispose()


def test_a_clean_trail_verifies(data_dir: Path) -> None:
    done = reachstore("audit", "verify", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "acme: 12 events, 2 checkpoints checked: ok" in lines
    assert "globex: 3 events, 1 checkpoint checked: ok" in lines
    assert lines[-1] == "ok: 2 tenants verified"


def test_a_tampered_trail_fails_naming_the_break(data_dir: Path) -> None:
    edit_event(data_dir, 4)
    done = reachstore("audit", "verify", "--data-dir", str(data_dir))
    assert done.returncode == 1, done.stderr
    [acme] = [line for line in done.stdout.splitlines() if line.startswith("acme:")]
    assert "edited at position 4 (event acme-0004)" in acme
    assert "globex: 3 events, 1 checkpoint checked: ok" in done.stdout
    assert done.stdout.splitlines()[-1] == "BROKEN: 1 of 2 tenants: acme"


def test_a_tamperers_text_cannot_rewrite_the_report_on_a_terminal(data_dir: Path) -> None:
    """The break names an event id read from the tampered rows; a carriage return and an
    erase-line sequence in it would otherwise overwrite the line with a fake "ok"."""
    edit_event(data_dir, 4, "event_id", "x\r\x1b[2Kacme: 12 events, 2 checkpoints checked: ok")
    done = reachstore("audit", "verify", "--data-dir", str(data_dir))
    assert done.returncode == 1
    assert "\x1b" not in done.stdout and "\r" not in done.stdout
    assert "edited at position 4 (event x\\r\\x1b[2Kacme: " in done.stdout


def test_json_output_parses_and_names_the_break(data_dir: Path) -> None:
    edit_event(data_dir, 4)
    done = reachstore("audit", "verify", "--data-dir", str(data_dir), "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["tenants_checked"] == 2
    acme, globex = report["tenants"]
    assert acme["first_break"]["kind"] == "edited"
    assert (acme["first_break"]["seq"], acme["first_break"]["event_id"]) == (4, "acme-0004")
    assert globex == {
        "tenant": "globex",
        "ok": True,
        "events_checked": 3,
        "checkpoints_checked": 1,
        "first_break": None,
    }


def test_one_tenant_and_a_key_from_the_environment(data_dir: Path) -> None:
    """REACHSTORE_AUDIT_KEY wins over the file: a wrong one makes the checkpoints fail."""
    (data_dir / KEY_FILE).unlink()
    ok = reachstore(
        "audit", "verify", "--data-dir", str(data_dir), "--tenant", "globex", "--json",
        env={"REACHSTORE_AUDIT_KEY": KEY},
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert [t["tenant"] for t in json.loads(ok.stdout)["tenants"]] == ["globex"]
    wrong = reachstore(
        "audit", "verify", "--data-dir", str(data_dir), "--tenant", "globex",
        env={"REACHSTORE_AUDIT_KEY": "another-key-of-enough-bytes"},
    )  # fmt: skip
    assert wrong.returncode == 1
    assert "forged_checkpoint at position 3" in wrong.stdout


def test_without_a_key_it_exits_2_with_one_line(data_dir: Path) -> None:
    (data_dir / KEY_FILE).unlink()
    done = reachstore("audit", "verify", "--data-dir", str(data_dir))
    assert done.returncode == 2
    assert done.stdout == ""
    [message] = done.stderr.splitlines()
    assert "REACHSTORE_AUDIT_KEY" in message and KEY_FILE in message


def test_a_folder_without_a_database_exits_2(tmp_path: Path, data_dir: Path) -> None:
    """A mistyped --data-dir is an error, not an empty trail that verifies."""
    done = reachstore(
        "audit", "verify", "--data-dir", str(tmp_path / "nowhere"),
        env={"REACHSTORE_AUDIT_KEY": KEY},
    )  # fmt: skip
    assert done.returncode == 2
    [message] = done.stderr.splitlines()
    assert "no database at" in message
    assert not (tmp_path / "nowhere").exists()


def test_list_shows_the_latest_events(data_dir: Path) -> None:
    done = reachstore("audit", "list", "--data-dir", str(data_dir), "--tenant", "acme")
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    assert header.split("  ")[0] == "SEQ" and header.endswith("IDEMPOTENCY KEY")
    assert [line.split()[0] for line in lines] == [str(n) for n in range(1, 13)]
    assert lines[-1].split()[2:] == ["ingest", "CreateDocument", "key_acme", "ok", "idem-12"]

    scripted = reachstore("audit", "list", "--data-dir", str(data_dir), "--limit", "2", "--json")
    assert scripted.returncode == 0, scripted.stderr
    latest = json.loads(scripted.stdout)["events"]
    assert [(e["tenant"], e["seq"]) for e in latest] == [("acme", 11), ("acme", 12)]
    assert latest[1]["prev_hash"] == latest[0]["hash"]

"""`reachstore audit verify|list` as an operator runs it: a subprocess against a data
folder (the SQLite file, the audit public key and the witness file that `reachstore up`
keeps there), with its exit code as the contract for scripts: 0 ok, 1 broken, 2 could not
check. The private key is kept outside the folder, as a deployment keeps it."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from reachstore_server.audit.signing import PrivateKey
from reachstore_server.audit.store import AuditStore
from reachstore_server.audit.witness import FileWitness
from reachstore_server.common.kept_secrets import AUDIT_PUBLIC_KEY_FILE, AUDIT_WITNESS_FILE
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head
from tests.integration.test_audit_tamper import START, drop_append_only_triggers, events

pytestmark = pytest.mark.e2e

KEY = PrivateKey.generate()
KEY_FILE = AUDIT_PUBLIC_KEY_FILE


def reachstore(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command line, with no audit key or database in the environment unless given:
    the data folder alone must be enough."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("REACHSTORE_AUDIT_")
        and k not in ("REACHSTORE_DATABASE_URL", "REACHSTORE_DATA_DIR")
    }
    return subprocess.run(
        [sys.executable, "-m", "reachstore_server.cli", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def build_trail(folder: Path, database_url: str) -> None:
    """acme with 12 events (checkpoints at 6 and 12), globex with 3 (checkpoint at 3),
    each checkpoint signed 30 s after the events (on time) and in the witness file, and
    the public key beside them."""
    engine = make_engine(database_url)
    migrate_to_head(engine)
    store = AuditStore(make_sessions(engine))
    witness = FileWitness(folder / AUDIT_WITNESS_FILE)
    store.append(events("acme", 1, 6) + events("globex", 1, 3))
    witness.append(KEY, store.checkpoint(KEY, START + dt.timedelta(seconds=30)))
    store.append(events("acme", 7, 12))
    witness.append(KEY, store.checkpoint(KEY, START + dt.timedelta(seconds=40)))
    engine.dispose()
    (folder / KEY_FILE).write_text(KEY.public.pem())


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data folder as `up` leaves it, without the private key."""
    folder = tmp_path / "data"
    build_trail(folder, f"sqlite:///{folder / 'reachstore.db'}")
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
    assert lines[0] == f"witness file {data_dir / AUDIT_WITNESS_FILE}: 3 heads: ok"
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
    assert report["witnesses"] == [
        {"witness": f"file {data_dir / AUDIT_WITNESS_FILE}", "ok": True, "heads": 3, "broken": None}
    ]
    assert globex == {
        "tenant": "globex",
        "ok": True,
        "events_checked": 3,
        "checkpoints_checked": 1,
        "first_break": None,
    }


def test_one_tenant_and_a_key_from_the_environment(data_dir: Path, tmp_path: Path) -> None:
    """A public key given wins over the one in the folder: a wrong one makes the
    checkpoints fail, and the witness's lines with them (the cadence is left out: with no
    valid checkpoint, the events' wait for one would be the first break)."""
    (data_dir / KEY_FILE).unlink()
    ok = reachstore(
        "audit", "verify", "--data-dir", str(data_dir), "--tenant", "globex", "--json",
        env={"REACHSTORE_AUDIT_PUBLIC_KEY": KEY.public.pem()},
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert [t["tenant"] for t in json.loads(ok.stdout)["tenants"]] == ["globex"]
    pinned = tmp_path / "pinned.pub"
    pinned.write_text(PrivateKey.generate().public.pem())
    wrong = reachstore(
        "audit", "verify", "--data-dir", str(data_dir), "--tenant", "globex",
        "--public-key", str(pinned), "--no-cadence",
    )  # fmt: skip
    assert wrong.returncode == 1
    assert "forged_checkpoint at position 3" in wrong.stdout
    assert "witness_broken at line 1" in wrong.stdout


def test_the_folders_public_key_is_used_with_a_warning(data_dir: Path) -> None:
    done = reachstore("audit", "verify", "--data-dir", str(data_dir))
    assert done.returncode == 0
    assert "whoever can write the data folder can replace it" in done.stderr


def test_without_a_key_it_exits_2_with_one_line(data_dir: Path) -> None:
    (data_dir / KEY_FILE).unlink()
    done = reachstore("audit", "verify", "--data-dir", str(data_dir))
    assert done.returncode == 2
    assert done.stdout == ""
    [message] = done.stderr.splitlines()
    assert "--public-key" in message and KEY_FILE in message


def delete_sql(folder: Path, *statements: str, url: str | None = None) -> None:
    engine = make_engine(url or f"sqlite:///{folder / 'reachstore.db'}")
    with engine.begin() as conn:
        drop_append_only_triggers(conn)
        for statement in statements:
            conn.execute(text(statement))
    engine.dispose()


@pytest.mark.parametrize("engine_name", ["sqlite", "postgresql"])
def test_a_cut_tail_with_its_checkpoint_gone_exits_1_naming_it(
    engine_name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The events after acme's first checkpoint and the checkpoint over them deleted, the
    head wound back: the database alone is consistent, the witness is not."""
    folder = tmp_path / "data"
    url = f"sqlite:///{folder / 'reachstore.db'}"
    env: dict[str, str] = {}
    if engine_name == "postgresql":
        url = request.getfixturevalue("pg_database")
        env["REACHSTORE_DATABASE_URL"] = url
    folder.mkdir()
    build_trail(folder, url)
    delete_sql(
        folder,
        "DELETE FROM audit_events WHERE tenant = 'acme' AND seq > 6",
        "DELETE FROM audit_checkpoints WHERE tenant = 'acme' AND seq > 6",
        "UPDATE audit_heads SET seq = 6, hash = (SELECT hash FROM audit_events"
        " WHERE tenant = 'acme' AND seq = 6) WHERE tenant = 'acme'",
        url=url,
    )
    done = reachstore("audit", "verify", "--data-dir", str(folder), env=env)
    assert done.returncode == 1, done.stderr
    [acme] = [line for line in done.stdout.splitlines() if line.startswith("acme:")]
    assert "truncated at position 7" in acme and AUDIT_WITNESS_FILE in acme
    assert done.stdout.splitlines()[-1] == "BROKEN: 1 of 2 tenants: acme"
    # Without the witness it would have passed: that is what the witness is for.
    (folder / AUDIT_WITNESS_FILE).unlink()
    alone = reachstore("audit", "verify", "--data-dir", str(folder), env=env)
    assert alone.returncode == 0, alone.stdout
    assert "no witness: checked against the database's own checkpoints only" in alone.stdout


def test_the_witness_files_last_line_removed_exits_1(data_dir: Path) -> None:
    witness = data_dir / AUDIT_WITNESS_FILE
    lines = witness.read_text().splitlines()
    witness.write_text("\n".join(lines[:-1]) + "\n")
    done = reachstore("audit", "verify", "--data-dir", str(data_dir))
    assert done.returncode == 1
    assert "acme: 12 events, 2 checkpoints checked: witness_incomplete at position 12" in (
        done.stdout
    )


def test_a_trail_checkpointed_late_is_a_cadence_gap(data_dir: Path) -> None:
    """The fixture signed 30 s after the events; with a 10 s interval and 5 s of grace
    that is late."""
    late = reachstore(
        "audit", "verify", "--data-dir", str(data_dir), "--checkpoint-s", "10",
        "--cadence-grace-s", "5",
    )  # fmt: skip
    assert late.returncode == 1
    assert "cadence_gap at position 1" in late.stdout
    unchecked = reachstore(
        "audit", "verify", "--data-dir", str(data_dir), "--checkpoint-s", "10", "--no-cadence"
    )
    assert unchecked.returncode == 0, unchecked.stdout


def test_a_folder_without_a_database_exits_2(tmp_path: Path, data_dir: Path) -> None:
    """A mistyped --data-dir is an error, not an empty trail that verifies."""
    done = reachstore(
        "audit", "verify", "--data-dir", str(tmp_path / "nowhere"),
        env={"REACHSTORE_AUDIT_PUBLIC_KEY": KEY.public.pem()},
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

"""`reachstore audit verify` against attacks by whoever holds the database and the data
folder, with the witness file on another volume and the public key kept apart, as a
deployment runs it: the exit code must be 1 whenever the trail was changed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from reachstore_server.audit.chain import Signer
from reachstore_server.audit.store import AuditStore
from reachstore_server.common.kept_secrets import (
    AUDIT_PUBLIC_KEY_FILE,
    AUDIT_WITNESS_FILE,
    LEGACY_AUDIT_KEY_FILE,
)
from reachstore_server.storage.engine import make_engine, make_sessions
from tests.e2e.test_audit_cli import build_trail, delete_sql, reachstore
from tests.integration.test_audit_tamper import START, drop_append_only_triggers, events

pytestmark = pytest.mark.e2e

WIPE_ACME = (
    "DELETE FROM audit_events WHERE tenant = 'acme'",
    "DELETE FROM audit_checkpoints WHERE tenant = 'acme'",
    "DELETE FROM audit_heads WHERE tenant = 'acme'",
)


class Deployed:
    """The data folder (database, and whatever else `up` keeps there), the witness file on
    another volume and a copy of the public key the attacker cannot replace."""

    def __init__(self, root: Path) -> None:
        self.folder = root / "data"
        self.folder.mkdir()
        build_trail(self.folder, f"sqlite:///{self.folder / 'reachstore.db'}")
        self.witness = root / "other-volume" / AUDIT_WITNESS_FILE
        self.witness.parent.mkdir()
        (self.folder / AUDIT_WITNESS_FILE).rename(self.witness)
        self.public_key = root / "keys" / "audit.pub"
        self.public_key.parent.mkdir()
        self.public_key.write_text((self.folder / AUDIT_PUBLIC_KEY_FILE).read_text())

    def verify(self, *extra: str) -> tuple[int, list[str]]:
        done = reachstore(
            "audit", "verify", "--data-dir", str(self.folder),
            "--public-key", str(self.public_key), "--witness-file", str(self.witness), *extra,
        )  # fmt: skip
        return done.returncode, done.stdout.splitlines()


@pytest.fixture
def deployed(tmp_path: Path) -> Deployed:
    found = Deployed(tmp_path)
    code, lines = found.verify()
    assert code == 0, lines
    return found


def test_a_tenant_deleted_entirely_exits_1(deployed: Deployed) -> None:
    """acme's events, checkpoints and head deleted: the witness holds acme's heads at 6
    and 12, yet verifying every tenant looks only at the tenants the database lists."""
    delete_sql(deployed.folder, *WIPE_ACME)
    code, lines = deployed.verify()
    assert code == 1, lines
    assert any(line.startswith("acme:") and "truncated" in line for line in lines), lines


def test_the_whole_trail_deleted_exits_1(deployed: Deployed) -> None:
    """Every audit row gone: the witness still holds three signed heads."""
    delete_sql(
        deployed.folder,
        "DELETE FROM audit_events",
        "DELETE FROM audit_checkpoints",
        "DELETE FROM audit_heads",
    )
    code, lines = deployed.verify()
    assert code == 1, lines
    assert "no audit events in the database: nothing to verify" not in lines


def test_one_deleted_tenant_is_reported_as_truncated_not_as_nothing_to_verify(
    deployed: Deployed,
) -> None:
    """With --tenant acme the exit code is right, but the line must say where the break is,
    not that there was nothing to verify."""
    delete_sql(deployed.folder, *WIPE_ACME)
    code, lines = deployed.verify("--tenant", "acme")
    [acme] = [line for line in lines if line.startswith("acme:")]
    assert code == 1, lines
    assert "truncated at position 1" in acme, acme


def test_an_hmac_key_planted_in_the_folder_signs_nothing(deployed: Deployed) -> None:
    """This folder never had an HMAC key. The attacker writes one, adds a tenant's worth of
    events and an HMAC checkpoint over them: a checkpoint signed with a key of their own
    must be forged, not a valid checkpoint that also satisfies the cadence."""
    planted = "planted-by-whoever-owns-the-folder"
    (deployed.folder / LEGACY_AUDIT_KEY_FILE).write_text(planted)
    engine = make_engine(f"sqlite:///{deployed.folder / 'reachstore.db'}")
    store = AuditStore(make_sessions(engine))
    store.append(events("initech", 1, 5))
    signer = Signer(planted.encode())
    signed_at = (START + dt.timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    with engine.begin() as conn:
        drop_append_only_triggers(conn)
        last = conn.exec_driver_sql(
            "SELECT hash FROM audit_events WHERE tenant = 'initech' AND seq = 5"
        ).scalar_one()
        conn.exec_driver_sql(
            "INSERT INTO audit_checkpoints (tenant, seq, head_hash, signed_at, key_id, signature)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            ("initech", 5, last, signed_at, signer.key_id,
             signer.sign("initech", 5, last, signed_at)),
        )  # fmt: skip
    engine.dispose()
    code, lines = deployed.verify()
    assert code == 1, lines
    [initech] = [line for line in lines if line.startswith("initech:")]
    # Not counted, the checkpoint leaves the events unsigned past the cadence: the first
    # break by position is that gap. Without the cadence check the forgery itself shows.
    assert "cadence_gap at position 1" in initech, initech
    code, lines = deployed.verify("--no-cadence")
    assert code == 1, lines
    [initech] = [line for line in lines if line.startswith("initech:")]
    assert "forged_checkpoint" in initech, initech

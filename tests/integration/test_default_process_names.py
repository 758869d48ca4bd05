"""Default process names on a host with a long name: the pid must survive the cut that
leases make, or a starting ingest process takes another live one's tasks back as its own
earlier run's (docs/SCALE_OUT.md, "Restarts": other processes' tasks are left to the lease)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy.orm import sessionmaker

from reachstore_server.common.config import PROCESS_NAME_CHARS, process_name
from reachstore_server.storage.engine import make_engine
from reachstore_server.storage.schema import migrate_to_head
from reachstore_server.storage.tasks import NewTask, TaskStore

# A common cloud default: 46 characters.
LONG_HOST = "ip-172-31-16-100.eu-central-1.compute.internal"


def test_default_names_keep_the_pid_within_the_leases_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: LONG_HOST)
    names = set()
    for pid in (7, 4242, 4194304):
        monkeypatch.setattr("os.getpid", lambda pid=pid: pid)
        name = process_name()
        assert len(name) <= PROCESS_NAME_CHARS and name.endswith(f"-{pid}")
        names.add(name[:PROCESS_NAME_CHARS])
    assert len(names) == 3


def test_a_starting_process_leaves_another_live_process_tasks_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    migrate_to_head(engine)
    sessions = sessionmaker(bind=engine)
    monkeypatch.setattr(socket, "gethostname", lambda: LONG_HOST)
    monkeypatch.setattr("os.getpid", lambda: 4242)
    live = TaskStore(sessions)  # a running process with the default name
    live.enqueue("t", [NewTask("ns", "d1", "text", {}, "error")])
    (claimed,) = live.claim(10)
    monkeypatch.setattr("os.getpid", lambda: 5151)
    starting = TaskStore(sessions)  # another process on the same host, starting up
    assert starting.recover() == 0
    with engine.connect() as c:
        state, owner = c.execute(
            sqlalchemy.text("SELECT state, lease_owner FROM ingest_tasks")
        ).one()
    assert (state, owner) == ("processing", claimed.lease)
    engine.dispose()

"""The database's clock is the one every process agrees on: a process run under a faked
wall clock (libfaketime, an hour ahead) reads the same time from it as this one, on SQLite
(the machine's boot clock with an offset fixed in the database) and on PostgreSQL (the
server's clock). Leases judged on it cannot be broken by a worker's clock
(docs/AT_MOST_ONCE.md, section 3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from reachstore_server.storage.clock import db_clock
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head
from tests.e2e.processes import ROOT

READ_CLOCK = """
import json, sys, time
from reachstore_server.storage.clock import db_clock
from reachstore_server.storage.engine import make_engine, make_sessions
sessions = make_sessions(make_engine(sys.argv[1]))
with sessions() as session:
    print(json.dumps({"wall": time.time(), "db": db_clock(session)}))
"""


def _read_in_a_skewed_process(url: str, skew: str) -> dict[str, float]:
    faketime = shutil.which("faketime")
    assert faketime, "faketime is installed by `make faults-install` (part of `make test`)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients/python")])}
    out = subprocess.run(
        [faketime, "-f", skew, sys.executable, "-c", READ_CLOCK, url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("skew", ["+1h", "-1h"])
def test_a_process_with_a_skewed_clock_reads_the_same_database_clock(
    database_url: str, skew: str
) -> None:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    sessions = make_sessions(engine)
    with sessions() as session:
        mine = db_clock(session)
    now = time.time()  # before the child, whose start takes seconds on a loaded machine
    theirs = _read_in_a_skewed_process(database_url, skew)
    engine.dispose()
    assert abs(theirs["wall"] - now) > 3000, f"the child's clock was not skewed: {theirs}"
    # The child read the database's clock a few seconds after this process did at most.
    assert -1.0 < theirs["db"] - mine < 30.0, (mine, theirs)
    assert abs(mine - now) < 5.0

"""The pid files of `reachstore up` name only its own processes. Fault drills and
benchmarks signal the processes these files name (tests/e2e/system.py ``pids``), so a file
left by an earlier `up` of the same data folder, one that ran more query processes, would
point them at whatever process now has that pid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.system import RunningSystem

pytestmark = pytest.mark.e2e


def test_an_earlier_runs_pid_files_are_gone_and_stop_removes_its_own(tmp_path: Path) -> None:
    data = tmp_path / "data"
    run = data / "run"
    run.mkdir(parents=True)
    # What an earlier `up --query-processes 3` left: two of them now name this test.
    for stale in ("query-1.pid", "query-2.pid"):
        (run / stale).write_text(f"{os.getpid()}\n")
    system = RunningSystem(data)
    system.start()
    try:
        files = sorted(p.name for p in run.glob("*.pid"))
        assert files == sorted(
            f"{name}.pid" for name in ("audit", "bridge", "ingest", "query", "reach")
        ), files
        assert system.pids("query") == [system.pid("query")]
        assert os.getpid() not in {int(p.read_text()) for p in run.glob("*.pid")}
    finally:
        assert system.stop() == 0, "".join(system.output[-40:])
    assert list(run.glob("*.pid")) == []

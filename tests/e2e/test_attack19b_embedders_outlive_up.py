"""The ingest service's forked embedders are processes `up` never started itself: killing
`up` outright (SIGKILL), or the ingest process (what the supervision alarm does to a stop
that hangs), must not leave them running (docs/OPERATIONS.md, "Supervision under
`reachstore up`")."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.system import RunningSystem
from tests.e2e.test_ingest_embed_processes import children
from tests.e2e.test_supervision import _alive

pytestmark = pytest.mark.e2e
GONE_WITHIN_SECONDS = 10.0


def _gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + GONE_WITHIN_SECONDS
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def _start(tmp_path: Path) -> tuple[RunningSystem, int, list[int]]:
    system = RunningSystem(tmp_path, {"REACHSTORE_INGEST_EMBED_PROCESSES": "2"})
    system.start()
    ingest = system.pid("ingest")
    embedders = children(ingest)
    assert len(embedders) >= 2, embedders
    return system, ingest, embedders


def test_embedders_end_when_up_is_killed_outright(tmp_path: Path) -> None:
    """Covers an attack not tested before; held when written."""
    system, ingest, embedders = _start(tmp_path)
    assert system.process is not None
    system.process.kill()
    system.wait_exit()
    alive = _gone([ingest, *embedders])
    assert not alive, f"{alive} outlived `up` by {GONE_WITHIN_SECONDS:.0f} s"


def test_embedders_end_when_ingest_itself_is_killed(tmp_path: Path) -> None:
    """Covers an attack not tested before; held when written."""
    system, ingest, embedders = _start(tmp_path)
    try:
        os.kill(ingest, signal.SIGKILL)
        alive = _gone(embedders)
        assert not alive, f"embedders {alive} outlived their ingest process"
    finally:
        system.stop()

"""`reachstore up` as a supervisor, attacked from outside: killed outright, stopped by a
signal, or losing a child. Every process it started must be gone afterwards and every port
it listened on free again (docs/OPERATIONS.md, "Supervision under `reachstore up`")."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.e2e.system import RunningSystem
from tests.e2e.test_lifecycle import _alive

# Every component `up` starts, each with its pid file in <data>/run.
COMPONENTS = ("query", "ingest", "reach", "audit", "bridge")
GONE_WITHIN_SECONDS = 10.0


def _ports(system: RunningSystem) -> list[int]:
    base = system.grpc_port_base
    return [base, base + 1, base + 2, base + 3, base + 8, base + 9, system.http_port]


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _children(system: RunningSystem) -> dict[str, int]:
    pids = {name: system.pid(name) for name in COMPONENTS}
    assert len(set(pids.values())) == len(COMPONENTS)
    return pids


def _assert_all_gone(system: RunningSystem, pids: dict[str, int]) -> None:
    deadline = time.monotonic() + GONE_WITHIN_SECONDS
    while time.monotonic() < deadline:
        alive = [name for name, pid in pids.items() if _alive(pid)]
        busy = [port for port in _ports(system) if not _port_free(port)]
        if not alive and not busy:
            return
        time.sleep(0.1)
    assert not alive, f"{alive} outlived `up` by {GONE_WITHIN_SECONDS:.0f}s"
    assert not busy, f"ports {busy} still taken {GONE_WITHIN_SECONDS:.0f}s after `up` ended"


def test_every_child_and_port_is_released_when_up_is_killed_outright(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path)
    system.start()
    pids = _children(system)
    assert system.process is not None
    system.process.kill()  # SIGKILL: `up` gets no chance to stop anything itself
    system.wait_exit()
    _assert_all_gone(system, pids)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_stops_every_child_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    system = RunningSystem(tmp_path)
    system.start()
    pids = _children(system)
    code = system.stop(sig)
    output = "".join(system.output)
    assert code == 0, output[-2000:]
    assert "Traceback" not in output
    _assert_all_gone(system, pids)


def test_each_child_runs_in_a_process_group_of_its_own(tmp_path: Path) -> None:
    """A terminal's Ctrl-C goes to `up`'s group only: `up` alone decides how its children
    stop, and each child's group holds exactly what that child started."""
    system = RunningSystem(tmp_path)
    system.start()
    try:
        assert system.process is not None
        up_group = os.getpgid(system.process.pid)
        for name, pid in _children(system).items():
            assert os.getpgid(pid) == pid, f"{name} is not the leader of its own group"
            assert os.getpgid(pid) != up_group, f"{name} shares `up`'s process group"
    finally:
        assert system.stop() == 0


def test_a_crashed_child_is_reported_and_the_rest_stopped(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path)
    system.start()
    pids = _children(system)
    system.kill_component("reach")
    code = system.wait_exit(timeout=60)
    output = "".join(system.output)
    assert code == 1, output[-2000:]
    assert "reachstore: reach exited; stopping everything" in output
    _assert_all_gone(system, pids)

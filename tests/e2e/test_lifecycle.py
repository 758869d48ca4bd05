"""`reachstore up` as a process: health and reflection on every gRPC server, clean stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.e2e.system import RunningSystem


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _services(address: str) -> set[str]:
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        [reply] = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        return {s.name for s in reply.list_services_response.service}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_up_serves_health_and_reflection_and_stops_every_process(tmp_path: Path, sig) -> None:  # type: ignore[no-untyped-def]
    system = RunningSystem(tmp_path)
    system.start()
    pids = {name: system.pid(name) for name in ("query", "ingest", "bridge")}
    try:
        for address, service in [
            (system.query_addr, "reachstore.query.v1.QueryService"),
            (system.ingest_addr, "reachstore.ingest.v1.IngestService"),
        ]:
            with grpc.insecure_channel(address) as channel:
                health = health_pb2_grpc.HealthStub(channel)
                reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
            assert {service, "grpc.health.v1.Health"} <= _services(address)
    finally:
        code = system.stop(sig)
    assert code == 0, "".join(system.output[-20:])
    assert not any(_alive(pid) for pid in pids.values()), "a component outlived `up`"
    assert "Traceback" not in "".join(system.output)


def test_up_refuses_a_bad_setting_before_starting_anything(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path, {"REACHSTORE_QUERY_TIMEOUT_DEFAULT_MS": "soon"})
    with pytest.raises(RuntimeError, match="REACHSTORE_QUERY_TIMEOUT_DEFAULT_MS"):
        system.start()
    assert system.stop() != 0


def test_services_stop_when_up_is_killed_outright(tmp_path: Path) -> None:
    system = RunningSystem(tmp_path)
    system.start()
    pids = [system.pid(name) for name in ("query", "ingest", "bridge")]
    assert system.process is not None
    system.process.kill()  # SIGKILL: `up` gets no chance to stop anything itself
    system.wait_exit()
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids), "a service outlived a killed `up`"


def test_up_refuses_to_listen_beyond_loopback_without_keys(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reachstore_server.cli",
            "up",
            "--host",
            "0.0.0.0",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--require-keys" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists(), "nothing was started"

"""Starting and stopping a real `reachstore up` for end-to-end tests."""

from __future__ import annotations

import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

READY_PREFIX = "reachstore ready: "
START_TIMEOUT_SECONDS = 90.0


def start_service_once(
    component: str, data_dir: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m reachstore_server.<component>.main`` with no REACHSTORE_* setting but the data
    folder and ``extra_env``, run to its end: for a service that must refuse to start."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REACHSTORE_")}
    env.update(extra_env or {}, REACHSTORE_DATA_DIR=str(data_dir))
    return subprocess.run(
        [sys.executable, "-m", f"reachstore_server.{component}.main"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ports_free(ports: list[int]) -> bool:
    for port in ports:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def wait_ports_free(ports: list[int], *, seconds: float) -> None:
    """Waits for fixed ports a closing connection may still hold (TIME_WAIT does not
    block a listener, but a live outgoing connection's local port does)."""
    deadline = time.monotonic() + seconds
    while not _ports_free(ports):
        if time.monotonic() > deadline:
            raise RuntimeError(f"ports {ports[0]}-{ports[-1]} still taken after {seconds} s")
        time.sleep(0.5)


def _port_range() -> tuple[int, int]:
    """Where this test process picks ports: below the kernel's ephemeral range (there, a
    port seen free can be taken as the local port of any outgoing connection before the
    service binds it), and, under pytest-xdist, a slice of its own per worker, so that two
    workers never pick the same port (docs/OPERATIONS.md, "Test suite")."""
    start, end = 10000, 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            end = max(int(f.read().split()[0]), start + 2000)
    except (OSError, ValueError, IndexError):
        pass
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and worker[2:].isdigit() and workers > 1:
        span = (end - start) // workers
        start += int(worker[2:]) % workers * span
        end = start + span
    return start, end


def free_port_block(count: int) -> int:
    """The first of ``count`` consecutive free ports."""
    start, end = _port_range()
    for _ in range(200):
        base = random.randint(start, end - count)
        if _ports_free(list(range(base, base + count))):
            return base
    raise RuntimeError("no block of free ports found")


class RunningSystem:
    """One `reachstore up` process tree on free ports and its own data folder."""

    def __init__(
        self,
        data_dir: Path,
        extra_env: dict[str, str] | None = None,
        *,
        grpc_port_base: int | None = None,
        http_port: int | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = data_dir
        self.extra_env = dict(extra_env or {})
        self.extra_args = extra_args
        base = grpc_port_base or free_port_block(10)
        self.grpc_port_base = base
        self.http_port = http_port or base + 4
        self.metrics_port = base + 9  # the default of `reachstore up`
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        # `up` serves the bridge over TLS when it is given a certificate.
        scheme = "https" if "--tls-cert" in extra_args else "http"
        self.http_url = f"{scheme}://127.0.0.1:{self.http_port}"
        self.query_addr = f"127.0.0.1:{base}"
        self.ingest_addr = f"127.0.0.1:{base + 1}"
        self.reach_addr = f"127.0.0.1:{base + 2}"
        self.reach_metrics_url = f"http://127.0.0.1:{base + 8}/metrics"
        self.process: subprocess.Popen[str] | None = None
        self._pump = threading.Thread()
        self.output: list[str] = []

    def start(self) -> None:
        env = {**os.environ, **self.extra_env, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reachstore_server.cli",
                "up",
                "--data-dir",
                str(self.data_dir),
                "--http-port",
                str(self.http_port),
                "--grpc-port-base",
                str(self.grpc_port_base),
                *self.extra_args,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line)
                lines.put(line)
            lines.put(None)

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        while True:
            try:
                line = lines.get(timeout=START_TIMEOUT_SECONDS)
            except queue.Empty:
                self.stop()
                raise RuntimeError(  # noqa: B904 - the output says more than the Empty
                    "reachstore up did not become ready:\n" + "".join(self.output[-40:])
                )
            if line is None:
                self._reap()  # closes the pipe: a leaked one warns later, in another test
                raise RuntimeError("reachstore up exited:\n" + "".join(self.output[-40:]))
            if line.startswith(READY_PREFIX):
                assert line.strip() == f"{READY_PREFIX}{self.http_url}"
                return

    def pid(self, component: str) -> int:
        return int((self.data_dir / "run" / f"{component}.pid").read_text())

    def pids(self, component: str) -> list[int]:
        """Every process of a component `up` runs several of (the query processes:
        query.pid, query-1.pid, ...)."""
        run = self.data_dir / "run"
        return [self.pid(component)] + [
            int(p.read_text()) for p in sorted(run.glob(f"{component}-*.pid"))
        ]

    def kill_component(self, component: str) -> None:
        """SIGKILL one service process: no chance to finish anything."""
        os.kill(self.pid(component), signal.SIGKILL)

    def _reap(self) -> int:
        """Waits for the exit, drains the output and closes the pipe."""
        assert self.process is not None and self.process.stdout is not None
        code = self.process.wait()
        self._pump.join(timeout=10)
        self.process.stdout.close()
        return code

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.process is not None
        self.process.wait(timeout=timeout)
        return self._reap()

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """Asks `up` to stop (SIGTERM, or SIGINT as Ctrl-C sends) and waits for it."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self._reap()

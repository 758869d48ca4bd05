"""One reachstore service as a real process of its own (not `up`): started on a free port,
ready when its gRPC health service says so, stopped with SIGTERM or killed with SIGKILL.
Its log (JSON lines) goes to a file named after it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from reachstore_server.common.config import ConfigError, Settings
from reachstore_server.storage.engine import make_engine
from reachstore_server.storage.schema import migrate_to_head
from tests.e2e.system import free_port_block

ROOT = Path(__file__).resolve().parents[2]
# Fast reconnects, so that a restarted process is found as soon as it listens.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 300),
]


class ServiceProcess:
    def __init__(
        self,
        module: str,
        service: str,
        workdir: Path,
        name: str,
        env: dict[str, str],
        address: str | None = None,
    ) -> None:
        self.module = module
        self.service = service
        self.name = name
        self.address = address or f"127.0.0.1:{free_port_block(1)}"
        self.log_path = workdir / f"{name}.log"
        self._env = self.base_env()
        self._env.update(REACHSTORE_LISTEN=self.address, **env)
        self.process: subprocess.Popen[bytes] | None = None
        self.channel: grpc.Channel | None = None

    @staticmethod
    def base_env() -> dict[str, str]:
        """This environment without any reachstore setting, unbuffered."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("REACHSTORE_")}
        env["PYTHONUNBUFFERED"] = "1"
        return env

    @staticmethod
    def free_port() -> int:
        return free_port_block(1)

    def command(self) -> list[str]:
        """What runs the service; a subclass may wrap it (another clock, a namespace)."""
        return [sys.executable, "-m", self.module]

    def migrate(self) -> None:
        """What a deployment's migrate step does before any service starts (services refuse
        a schema not at head): the database this process's settings name, brought to head.
        Settings the process itself refuses are left for it to refuse."""
        try:
            url = Settings.from_env(self._env).database_url
        except ConfigError:
            return
        engine = make_engine(url)
        try:
            migrate_to_head(engine)
        finally:
            engine.dispose()

    def start(self, timeout: float = 60.0, migrate: bool = True) -> ServiceProcess:
        """Starts the process (after the migrate step, unless told not to) and returns once
        its health service reports SERVING."""
        if migrate:
            self.migrate()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                cwd=ROOT,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            try:
                reply = health.Check(
                    health_pb2.HealthCheckRequest(service=self.service),
                    timeout=0.5,
                    wait_for_ready=True,
                )
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return self
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not become ready:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no chance to finish a send, commit or close anything."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self._close_channel()

    def stop(self) -> int | None:
        """SIGTERM and wait (SIGKILL after 20 s); the exit code, None if never started."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._close_channel()
        return self.process.returncode

    def _close_channel(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def shipper_key(env: dict[str, str]) -> str:
    """A deployment service key, made with the command line on the database ``env`` names
    (``REACHSTORE_DATABASE_URL``, ``REACHSTORE_DATA_DIR``): services started one by one
    ship their audit events with it, as `up` does with the one it mints (the keyless
    caller of local mode may not append events)."""
    done = subprocess.run(
        [sys.executable, "-m", "reachstore_server.cli", "keys", "create", "--service", "--json"]
        + ["--data-dir", env["REACHSTORE_DATA_DIR"], "--name", "test: ships audit events"],
        cwd=ROOT,
        env={**ServiceProcess.base_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    secret: str = json.loads(done.stdout)["secret"]
    return secret

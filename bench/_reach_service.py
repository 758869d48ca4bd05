"""The services under test: their processes (the reach service with its configuration),
and a scratch PostgreSQL database for them.

``ServiceProcess`` starts ``python -m <module>`` of a reachstore service in its own session
on a free port of 127.0.0.1 with a database URL and none of the caller's ``REACHSTORE_*``
settings, waits for the gRPC health check, and stops it with SIGTERM. Its log goes to
``<name>.log`` in its folder. A subclass names the module and adds its own settings.

``ReachProcess`` is the reach service with a configuration of one webhook channel
(``bench-hook``: action type ``notify``, no quota so nothing is rate limited, keyed by the
parameter ``n``, no time window, no status look-up so a 200 means succeeded).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Self

import grpc
import psycopg
from grpc_health.v1 import health_pb2, health_pb2_grpc
from psycopg import sql
from sqlalchemy.engine import make_url

from reachstore_server.storage.engine import make_engine
from reachstore_server.storage.schema import migrate_to_head

ROOT = Path(__file__).resolve().parent.parent
CHANNEL = "bench-hook"
ACTION_TYPE = "notify"
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 20.0

_CONFIG = """\
# Written by bench/bench_reach.py. One webhook channel to the benchmark's receiver: no
# quota (nothing is rate limited), no status_url (a 200 means succeeded).
[channels.{channel}]
kind = "webhook"
description = "The reach benchmark's local receiver."
action_types = ["{action_type}"]
idempotency_params = ["n"]
window = "none"

[channels.{channel}.webhook]
url = "{url}"
"""


def migrate(database_url: str) -> None:
    """Brings the database to the newest schema (``reachstore migrate``); a database
    already there is left as it is."""
    engine = make_engine(database_url)
    try:
        migrate_to_head(engine)
    finally:
        engine.dispose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServiceProcess:
    """One ``python -m <module>`` process on a free port of 127.0.0.1."""

    module = ""  # set by each subclass, e.g. "reachstore_server.reach.main"
    name = ""  # "reach": its log file and its messages

    def __init__(self, folder: Path, database_url: str, log_level: str):
        self.folder = folder
        self.database_url = database_url
        self.log_level = log_level
        self.address = ""
        self.log_path = folder / f"{self.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def own_settings(self) -> dict[str, str]:
        """The service's own ``REACHSTORE_*`` settings (it may write files into its folder
        first); the database, address, data folder, PII secret and log level are set for
        every service."""
        return {}

    def start(self) -> Self:
        self.folder.mkdir(parents=True, exist_ok=True)
        migrate(self.database_url)  # services refuse a database not at the newest schema
        self.address = f"127.0.0.1:{free_port()}"
        # Nothing of the caller's REACHSTORE_* settings leaks in (REQUIRE_KEYS, limits ...).
        env = {k: v for k, v in os.environ.items() if not k.startswith("REACHSTORE_")}
        env.update(
            {
                "REACHSTORE_DATA_DIR": str(self.folder),
                "REACHSTORE_DATABASE_URL": self.database_url,
                "REACHSTORE_LISTEN": self.address,
                "REACHSTORE_PII_SECRET": secrets.token_hex(32),
                "REACHSTORE_LOG_LEVEL": self.log_level,
                **self.own_settings(),
            }
        )
        self._log = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", self.module],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the benchmark, which stops it in order
        )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                assert self._proc is not None
                if self._proc.poll() is not None:
                    raise RuntimeError(
                        f"the {self.name} service exited with {self._proc.returncode} during "
                        f"start-up:\n{self.log_tail()}"
                    )
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.1)
        raise RuntimeError(
            f"the {self.name} service was not healthy within {READY_TIMEOUT_SECONDS} s"
        )

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after ``STOP_TIMEOUT_SECONDS``; the exit code (None if it
        was not running)."""
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_SECONDS)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            code = proc.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def log_levels(self) -> dict[str, int]:
        """How many lines of each level the service logged (its log is JSON lines; any
        other line counts as "not_json": a traceback printed by a library, for example)."""
        levels: Counter[str] = Counter()
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return {}
        for line in text.splitlines():
            try:
                levels[str(json.loads(line).get("level", "?"))] += 1
            except (ValueError, AttributeError):
                levels["not_json"] += 1
        return dict(levels)

    def first_problem(self) -> str:
        """The message of the first warning or error line, or ""."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                return line[:300]
            if isinstance(entry, dict) and entry.get("level") in ("warning", "error", "critical"):
                return str(entry.get("msg", ""))[:300]
        return ""

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ReachProcess(ServiceProcess):
    """``reachstore_server.reach.main`` with one webhook channel to ``receiver_url``."""

    module = "reachstore_server.reach.main"
    name = "reach"

    # One secret for every reach process of a run: replicas of one deployment share it
    # (reachstore_server/reach/idempotency.py), or one intent would get a key per process.
    PII_SECRET = secrets.token_hex(32)

    def __init__(
        self,
        folder: Path,
        database_url: str,
        receiver_url: str,
        log_level: str,
        worker_id: str = "bench-reach",
    ):
        super().__init__(folder, database_url, log_level)
        self.receiver_url = receiver_url
        self.worker_id = worker_id

    def own_settings(self) -> dict[str, str]:
        config = self.folder / "reach.toml"
        config.write_text(
            _CONFIG.format(channel=CHANNEL, action_type=ACTION_TYPE, url=self.receiver_url),
            encoding="utf-8",
        )
        return {
            "REACHSTORE_REACH_CONFIG": str(config),
            "REACHSTORE_WORKER_ID": self.worker_id,
            "REACHSTORE_PII_SECRET": self.PII_SECRET,
        }


DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def add_engine_arguments(parser: argparse.ArgumentParser, service: str) -> None:
    """The options every service benchmark shares: which databases, and the service's
    log level."""
    parser.add_argument("--skip-postgres", action="store_true", help="SQLite only")
    parser.add_argument(
        "--postgres-url",
        default=DEFAULT_POSTGRES_URL,
        help="libpq URL of a database to connect to for CREATE/DROP DATABASE "
        f"(default {DEFAULT_POSTGRES_URL})",
    )
    parser.add_argument(
        "--log-level", default="INFO", help=f"REACHSTORE_LOG_LEVEL of the {service} service"
    )


@contextlib.contextmanager
def postgres_database(admin_url: str) -> Iterator[tuple[str, str]]:
    """A new, empty database ``reachstore_bench_<hex>`` on the server of ``admin_url``
    (a libpq URL); yields its SQLAlchemy URL and the server's version, and drops it at the
    end, sessions and all."""
    name = f"reachstore_bench_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = make_url(admin_url).set(drivername="postgresql+psycopg", database=name)
        yield url.render_as_string(hide_password=False), version
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

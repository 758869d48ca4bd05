"""A PostgreSQL server of the test's own, started from the machine's PostgreSQL binaries in
a throw-away data directory on a free port, so that a test can stop and restart it
without disturbing the shared server other tests use.

PostgreSQL refuses to run as root; when the tests run as root the server runs as the
``postgres`` user (``runuser``), in a directory that user owns.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.e2e.system import free_port_block


def _bin_dir() -> Path:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if versions:
        return versions[-1].parent
    found = shutil.which("pg_ctl")
    if found is None:
        raise RuntimeError("no PostgreSQL server binaries (pg_ctl) on this machine")
    return Path(found).parent


class PrivatePostgres:
    def __init__(self) -> None:
        self._bin = _bin_dir()
        self.port = free_port_block(1)
        self._as_root = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="reachstore-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        if self._as_root:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)

    def _run(self, *args: str) -> None:
        command = [str(self._bin / args[0]), *args[1:]]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> PrivatePostgres:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        # Durability is not under test here and fsync makes every commit slow on shared disks.
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.root}'\nfsync = off\n"
                "max_connections = 200\n"
            )
        return self.start()

    def start(self) -> PrivatePostgres:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stops the server; ``immediate`` drops every connection without a goodbye, like a
        crash, ``fast`` rolls back open transactions and closes connections."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def answers(self) -> bool:
        try:
            with psycopg.connect(self.admin_dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # already stopped
        deadline = time.monotonic() + 10
        while (self.data / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(self.root, ignore_errors=True)

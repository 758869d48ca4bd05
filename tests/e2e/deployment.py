"""A scaled-out reachstore, as an operator would run it: every component its own process
(`python -m reachstore_server.<component>.main`, what `reachstore serve` runs), two query replicas
and two reach workers, on a PostgreSQL server of the test's own that a test may stop.

The bridge reaches the replicas through one comma-separated address list per service
(gRPC round robin); the query replicas keep separate data folders, as on separate
machines, so each holds its own index snapshots.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from reachstore_server.audit.signing import PrivateKey
from tests.e2e.private_postgres import PrivatePostgres
from tests.e2e.processes import ROOT, ServiceProcess, shipper_key
from tests.e2e.system import free_port_block
from tests.reach.peers import HttpReceiver

SECRETS = {
    "REACHSTORE_PII_SECRET": "deployment-tests-pii-secret",
    "REACHSTORE_AUDIT_SIGNING_KEY": PrivateKey.generate().pem(),
}
CHANNEL = "hook"


def reach_config(path: Path, receiver: HttpReceiver) -> Path:
    """One webhook channel that sends ``Idempotency-Key`` (the receiver honours it, and the
    channel says so), with quick retries so that recoveries show within a test's
    patience."""
    path.write_text(
        f"""
[engine]
lease_s = 7

[channels.{CHANNEL}]
kind = "webhook"
description = "posts to the test receiver"
action_types = ["notify"]
idempotency_params = ["n"]
receiver_deduplicates = true

[channels.{CHANNEL}.webhook]
url = "{receiver.url}"
idempotency_header = true
connect_timeout_s = 1
read_timeout_s = 5

[channels.{CHANNEL}.retry]
base_s = 0.1
cap_s = 0.5
max_retries = 20

[channels.{CHANNEL}.unknown]
base_s = 0.2
cap_s = 0.5
max_polls = 2
""",
        encoding="utf-8",
    )
    return path


class Bridge:
    """The REST bridge as a process of its own; ready when /healthz answers."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.port = free_port_block(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self._env = {
            **ServiceProcess.base_env(),
            **env,
            "REACHSTORE_LISTEN": f"127.0.0.1:{self.port}",
        }
        self._log_path = workdir / "bridge.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> Bridge:
        with self._log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "reachstore_server.bridge.main"],
                cwd=ROOT,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, "the bridge exited at start"
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the bridge did not answer"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)


class Deployment:
    def __init__(self, workdir: Path, receiver: HttpReceiver) -> None:
        self.workdir = workdir
        self.postgres = PrivatePostgres().init()
        self.database_url = self.postgres.create_database("reachstore")
        audit_addr = f"127.0.0.1:{free_port_block(1)}"
        self.common = {
            **SECRETS,
            "REACHSTORE_DATABASE_URL": self.database_url,
            "REACHSTORE_DATA_DIR": str(workdir / "data"),
            "REACHSTORE_AUDIT_ADDR": audit_addr,
            "REACHSTORE_REACH_CONFIG": str(reach_config(workdir / "reach.toml", receiver)),
        }
        self.common["REACHSTORE_AUDIT_SHIPPER_KEY"] = shipper_key(self.common)
        self.audit = self._service("audit", "audit.v1.AuditService", "audit", address=audit_addr)
        self.ingest = self._service("ingest", "ingest.v1.IngestService", "ingest")
        self.queries = [
            self._service(
                "query",
                "query.v1.QueryService",
                f"query-{i}",
                REACHSTORE_DATA_DIR=str(workdir / f"query-{i}"),
            )
            for i in range(2)
        ]
        self.reaches = [
            self._service(
                "reach", "reach.v1.ReachService", f"reach-{i}", REACHSTORE_WORKER_ID=f"reach-{i}"
            )
            for i in range(2)
        ]
        self.bridge = Bridge(
            workdir,
            {
                **self.common,
                "REACHSTORE_QUERY_ADDR": ",".join(q.address for q in self.queries),
                "REACHSTORE_INGEST_ADDR": self.ingest.address,
                "REACHSTORE_REACH_ADDR": ",".join(r.address for r in self.reaches),
            },
        )

    def _service(
        self, component: str, service: str, name: str, address: str | None = None, **env: str
    ) -> ServiceProcess:
        return ServiceProcess(
            f"reachstore_server.{component}.main",
            f"reachstore.{service}",
            self.workdir,
            name,
            {**self.common, **env},
            address=address,
        )

    @property
    def processes(self) -> list[ServiceProcess]:
        return [self.audit, self.ingest, *self.queries, *self.reaches]

    def start(self) -> Deployment:
        for process in self.processes:
            process.start()
        self.bridge.start()
        return self

    def stop(self) -> None:
        self.bridge.stop()
        for process in self.processes:
            process.stop()
        self.postgres.destroy()

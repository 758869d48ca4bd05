"""A scaled-out deployment on one machine: each service its own process on one PostgreSQL
database, as ``reachstore serve <component>`` would run them, plus the webhook receiver.

The processes are ``_reach_service.ServiceProcess`` subclasses (free port, gRPC health
check, SIGTERM). Every one of them gets the same PII secret (so masked values agree across
processes, as in a real deployment) and the audit service's address, so their audit
events travel the way they do in production: outbox -> shipper -> ``AppendEvents``.

``Fleet`` starts what it is asked for - so many query replicas, reach workers, an ingest
and an audit service - and offers the clients' view: one address list per component,
which ``channel`` turns into a gRPC channel balancing round robin over the replicas with
the services' own client settings (``reachstore_server/common/channels.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
from _audit_load import AuditProcess
from _reach_receiver import ReceiverProcess
from _reach_service import ROOT, ReachProcess, ServiceProcess, add_engine_arguments

from reachstore_server.audit.signing import PrivateKey
from reachstore_server.bridge.backends import INGEST_SERVICE, QUERY_SERVICE, REACH_SERVICE
from reachstore_server.common.channels import grpc_target, service_config
from reachstore_server.common.grpc_server import GRPC_OPTIONS


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of every fleet benchmark: the corpus, a JSON copy of the result, the
    databases (``_reach_service.add_engine_arguments``) and quiet services."""
    parser.add_argument(
        "--corpus-dir", type=Path, default=ROOT.parent / "shared" / "bench", help="the corpus"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON result here")
    add_engine_arguments(parser, "every")
    parser.set_defaults(log_level="WARNING")


_HOSTED = {"query": QUERY_SERVICE, "ingest": INGEST_SERVICE, "reach": REACH_SERVICE}


@dataclasses.dataclass
class Shared:
    """Settings every process of one fleet shares; the audit address is filled in once
    the audit service listens, before the others start."""

    pii_secret: str = dataclasses.field(default_factory=lambda: secrets.token_hex(32))
    audit_addr: str = ""
    shipper_key: str = ""  # the deployment service key the audit process minted

    def settings(self) -> dict[str, str]:
        out = {"REACHSTORE_PII_SECRET": self.pii_secret}
        if self.audit_addr:
            out["REACHSTORE_AUDIT_ADDR"] = self.audit_addr
            out["REACHSTORE_AUDIT_SHIPPER_KEY"] = self.shipper_key
        return out


class FleetService(ServiceProcess):
    """A service of the fleet: ``module`` is set per component, settings are shared."""

    def __init__(self, folder: Path, database_url: str, log_level: str, shared: Shared):
        super().__init__(folder, database_url, log_level)
        self.shared = shared

    def own_settings(self) -> dict[str, str]:
        return self.shared.settings()


class QueryProcess(FleetService):
    module = "reachstore_server.query.main"

    @property
    def snapshot_bytes(self) -> int:
        """Bytes of this replica's index snapshots (``DATA_DIR/indexes/*.snap``)."""
        return sum(p.stat().st_size for p in (self.folder / "indexes").glob("*.snap"))


class IngestProcess(FleetService):
    module = "reachstore_server.ingest.main"


class ReachWorker(ReachProcess):
    """The benchmark's reach process (one webhook channel to the receiver) under its own
    worker id: leases are fenced by it, so two workers must not share one."""

    def __init__(
        self,
        folder: Path,
        database_url: str,
        receiver_url: str,
        log_level: str,
        shared: Shared,
        worker_id: str,
    ):
        super().__init__(folder, database_url, receiver_url, log_level, worker_id)
        self.shared = shared

    def own_settings(self) -> dict[str, str]:
        return {**super().own_settings(), **self.shared.settings()}


class Fleet:
    """The processes of one deployment, by name (``query-1``, ``reach-2``, ``audit`` ...).

    ``start`` brings them up in dependency order: receiver and audit first (the others
    ship to it), then ingest, reach workers and query replicas.
    """

    def __init__(self, root: Path, database_url: str, log_level: str = "WARNING") -> None:
        self.root = root
        self.database_url = database_url
        self.log_level = log_level
        self.shared = Shared()
        self.processes: dict[str, ServiceProcess] = {}
        self.receiver: ReceiverProcess | None = None

    def start(self, *, queries: int = 0, reach: int = 0, ingest: bool = False) -> Fleet:
        """An audit service always; the receiver when there are reach workers."""
        try:
            if reach:
                self.receiver = ReceiverProcess().start()
            audit = AuditProcess(
                self.root / "audit", self.database_url, self.log_level, PrivateKey.generate().pem()
            )
            self._add("audit", audit)
            self.shared.audit_addr = audit.address
            self.shared.shipper_key = audit.service_key
            if ingest:
                self._add("ingest", IngestProcess(*self._args("ingest")))
            for i in range(1, reach + 1):
                assert self.receiver is not None
                folder, url, level, shared = self._args(f"reach-{i}")
                worker = ReachWorker(
                    folder, url, self.receiver.delivery_url, level, shared, f"bench-reach-{i}"
                )
                self._add(f"reach-{i}", worker)
            for i in range(1, queries + 1):
                self._add(f"query-{i}", QueryProcess(*self._args(f"query-{i}")))
        except BaseException:
            self.stop()
            raise
        return self

    def _args(self, name: str) -> tuple[Path, str, str, Shared]:
        return self.root / name, self.database_url, self.log_level, self.shared

    def _add(self, name: str, process: ServiceProcess) -> None:
        process.name = name  # its log file and messages
        process.log_path = process.folder / f"{name}.log"
        process.start()
        self.processes[name] = process

    def stop(self) -> dict[str, int | None]:
        """Stops the services in reverse order (audit last, so the others' final events
        still find it), then the receiver; their exit codes."""
        codes = {name: p.stop() for name, p in reversed(list(self.processes.items()))}
        if self.receiver is not None:
            self.receiver.stop()
        return codes

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:  # the logs go with the temp folder: show them first
            self.print_log_tails()
        self.stop()

    def print_log_tails(self, lines: int = 15) -> None:
        for name, process in self.processes.items():
            tail = process.log_tail(lines)
            if tail:
                print(f"--- last lines of {name}'s log:\n{tail}", file=sys.stderr, flush=True)

    def named(self, component: str) -> list[ServiceProcess]:
        """The replicas of ``component`` (``query`` -> query-1, query-2 ...)."""
        return [p for n, p in self.processes.items() if n.split("-")[0] == component]

    def addresses(self, component: str) -> str:
        """The comma-separated address list a client is configured with."""
        return ",".join(p.address for p in self.named(component))

    def pids(self) -> dict[str, int]:
        out = {name: p.pid for name, p in self.processes.items() if p.alive()}
        if self.receiver is not None:
            out["receiver"] = self.receiver.pid
        return out

    @contextlib.contextmanager
    def channel(self, component: str) -> Iterator[grpc.Channel]:
        """A channel over every replica of ``component``: round robin, and safe reads sent
        again to another replica on UNAVAILABLE - what the bridge and the SDK do."""
        options = [*GRPC_OPTIONS, ("grpc.service_config", service_config([_HOSTED[component]]))]
        target = grpc_target(self.addresses(component), f"{component} addresses")
        channel = grpc.insecure_channel(target, options=options)
        try:
            grpc.channel_ready_future(channel).result(timeout=30)
            yield channel
        finally:
            channel.close()

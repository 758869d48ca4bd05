"""The `reachstore` command line.

`reachstore up` starts every service as its own process plus the REST bridge, waits until
each reports healthy, seeds the `demo` namespace, prints one ready line and stops
everything cleanly on Ctrl-C or SIGTERM. Its flags, the port layout (query on the base
port, ingest on base+1, reach on base+2, audit on base+3) and the ready line are an
interface other tools rely on. Each component's Prometheus metrics listen on a port of
their own: query base+9, reach base+8, ingest base+7, audit base+6, bridge base+5.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import ipaddress
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import Engine

from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from reachstore_server.cli_audit import add_audit_parser
from reachstore_server.cli_client import add_client_parsers
from reachstore_server.cli_client.exit_codes import TOP_LEVEL_HELP as EXIT_CODES_HELP
from reachstore_server.cli_keys import add_keys_parser
from reachstore_server.cli_mcp import add_mcp_parser
from reachstore_server.cli_migrate import add_migrate_parser, describe
from reachstore_server.cli_serve import add_serve_parser
from reachstore_server.common.auth import LOCAL_TENANT, SERVICE_TENANT
from reachstore_server.common.config import INSECURE, ConfigError, Settings
from reachstore_server.common.cores import usable_cores
from reachstore_server.common.hosts import is_loopback
from reachstore_server.common.kept_secrets import KEPT_SECRETS, kept_secret
from reachstore_server.common.pii import masker_from_env
from reachstore_server.common.supervised import SUPERVISOR_PID
from reachstore_server.common.tls import (
    CA_FILE,
    CERT_FILE,
    CLIENT_AUTH,
    CLIENT_AUTH_MODES,
    KEY_FILE,
    SERVER_NAME,
    TlsFiles,
    secure_channel,
)
from reachstore_server.kept_audit_keys import keep_audit_keys
from reachstore_server.reach.config import load_config
from reachstore_server.reach.idempotency import previous_secrets
from reachstore_server.reach.main import build_channels
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.keys import KeySpec, KeyStore
from reachstore_server.storage.schema import migrate_to_head

READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 15.0

DEMO_NAMESPACE = "demo"
DEMO_DOCUMENT_ID = "semantic-storage-intro"
DEMO_TEXT = (
    "Semantic storage keeps durable context close to the agents that use it: documents are "
    "stored once, split into chunks, embedded, and searched by meaning across namespaces. "
    "语义存储把持久的上下文放在离使用它的 Agent 更近的地方：文档只存一次，切分、向量化之后，"
    "可以跨多个命名空间按语义检索。"
)

# Offsets from --grpc-port-base, in this order. Reach and audit join in their own issues.
COMPONENT_PORT_OFFSETS = {"query": 0, "ingest": 1, "reach": 2, "audit": 3}
# The Prometheus endpoint of every component, derived from the base so that two systems
# on different bases never collide (docs/OPERATIONS.md, "Metrics").
METRICS_PORT_OFFSET = 9
REACH_METRICS_PORT_OFFSET = 8
METRICS_PORT_OFFSETS = {
    "query": METRICS_PORT_OFFSET,
    "reach": REACH_METRICS_PORT_OFFSET,
    "ingest": 7,
    "audit": 6,
    "bridge": 5,
}
# The flag that sets each one (`--metrics-port` is the query service's, as it always was).
METRICS_PORT_FLAGS = {
    "query": "metrics_port",
    "reach": "reach_metrics_port",
    "ingest": "ingest_metrics_port",
    "audit": "audit_metrics_port",
    "bridge": "bridge_metrics_port",
}


def _fail(message: str) -> None:
    print(f"reachstore: {message}", file=sys.stderr, flush=True)


class _System:
    """The child processes of one `up`, and how to stop them.

    Each child leads a process group of its own: a terminal's Ctrl-C reaches `up` alone,
    which then stops the children in order, and a child's group holds whatever that child
    started, so `up` can end it all. Each child also watches `up` (REACHSTORE_SUPERVISOR_PID,
    reachstore_server/common/supervised.py) and stops itself if `up` dies without stopping it."""

    def __init__(self, run_dir: Path) -> None:
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.run_dir = run_dir
        # Pid files left by an earlier `up` of this data folder (one that ran more query
        # processes, or was killed) would name processes that are no longer ours.
        self._remove_pid_files()

    def _remove_pid_files(self) -> None:
        for stale in self.run_dir.glob("*.pid"):
            stale.unlink(missing_ok=True)

    def start(self, name: str, module: str, env: dict[str, str]) -> None:
        process = subprocess.Popen(
            [sys.executable, "-m", module],
            env={**env, SUPERVISOR_PID: str(os.getpid())},
            stdin=subprocess.DEVNULL,
            process_group=0,
        )
        self.children[name] = process
        # Operators and fault drills find each component's process here.
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / f"{name}.pid").write_text(f"{process.pid}\n")

    def dead(self) -> list[str]:
        return [name for name, p in self.children.items() if p.poll() is not None]

    def stop(self) -> None:
        # SIGTERM to each child alone: it stops what it started itself, in its own order.
        for process in self.children.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for process in self.children.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(process.pid)
                process.wait()
        # Whatever a child left behind in its group (it crashed, or was killed) ends too.
        for process in self.children.values():
            _kill_group(process.pid)
        self._remove_pid_files()


def _kill_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _wait_grpc_healthy(address: str, system: _System, deadline: float, tls: TlsFiles) -> None:
    with secure_channel(address, tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if system.dead():
                raise RuntimeError(f"{', '.join(system.dead())} exited during start-up")
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"{address} did not become healthy in {READY_TIMEOUT_SECONDS:.0f}s")


def _wait_http_healthy(url: str, system: _System, deadline: float, tls: TlsFiles) -> None:
    verify: ssl.SSLContext | bool = tls.client_ssl_context() if tls.serving else True
    # The bridge's certificate names the host callers use, which the override gives
    # when components reach each other by another address.
    extensions = {"sni_hostname": tls.server_name} if tls.serving and tls.server_name else {}
    with httpx.Client(verify=verify, timeout=1.0) as http:
        while time.monotonic() < deadline:
            if system.dead():
                raise RuntimeError(f"{', '.join(system.dead())} exited during start-up")
            try:
                if http.get(f"{url}/healthz", extensions=extensions).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not become healthy in {READY_TIMEOUT_SECONDS:.0f}s")


@contextlib.contextmanager
def _seeding_credentials(settings: Settings) -> Iterator[list[tuple[str, str]]]:
    """Metadata for seeding `demo`: none in local mode; with keys required, a key of the
    local tenant (`up` owns the database, so it may mint one) that is revoked once the
    seeding is done, and expires in five minutes in any case."""
    if not settings.require_keys:
        yield []
        return
    engine = make_engine(settings.database_url)
    keys = KeyStore(make_sessions(engine))
    record, key = keys.create(
        LOCAL_TENANT,
        KeySpec(
            "reachstore up: seeds the demo namespace",
            ("read", "write"),
            expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5),
        ),
    )
    try:
        yield [("authorization", f"Bearer {key}")]
    finally:
        keys.revoke(LOCAL_TENANT, record.key_id)
        engine.dispose()


def _seed_demo(
    ingest_addr: str, deadline: float, metadata: list[tuple[str, str]], tls: TlsFiles
) -> None:
    """Creates the demo namespace and document unless they exist, and waits until the
    document is searchable."""
    with secure_channel(ingest_addr, tls) as channel:
        stub = ingest_grpc.IngestServiceStub(channel)
        try:
            stub.CreateNamespace(
                ingest_pb.CreateNamespaceRequest(name=DEMO_NAMESPACE),
                timeout=10,
                metadata=metadata,
            )
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise
        task = stub.CreateDocument(
            ingest_pb.CreateDocumentRequest(
                namespace=DEMO_NAMESPACE,
                document=ingest_pb.DocumentInput(
                    document_id=DEMO_DOCUMENT_ID,
                    text=DEMO_TEXT,
                    metadata={"lang": "en+zh", "source": "reachstore"},
                ),
                on_duplicate=ingest_pb.ON_DUPLICATE_SKIP,
            ),
            timeout=10,
            metadata=metadata,
        ).task
        while task.state not in (
            ingest_pb.TASK_STATE_COMPLETED,
            ingest_pb.TASK_STATE_FAILED,
            ingest_pb.TASK_STATE_CANCELLED,
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("seeding the demo namespace did not finish in time")
            time.sleep(0.05)
            try:
                task = stub.GetTask(
                    ingest_pb.GetTaskRequest(task_id=task.task_id), timeout=10, metadata=metadata
                ).task
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:  # low call-rate limits
                    raise
                time.sleep(1.0)
        if task.state != ingest_pb.TASK_STATE_COMPLETED:
            raise RuntimeError(f"seeding the demo namespace failed: {task.error.error_code}")


def _mint_shipper_key(engine: Engine, env: dict[str, str]) -> str | None:
    """The services ship audit events with a deployment service key (scope ``internal``
    in the service tenant) that `up` mints for this run, unless one is configured. In
    local mode too: the keyless caller does not hold ``internal``."""
    if env.get("REACHSTORE_AUDIT_SHIPPER_KEY"):
        return None
    record, key = KeyStore(make_sessions(engine)).create(
        SERVICE_TENANT, KeySpec("reachstore up: ships audit events", ("internal",))
    )
    env["REACHSTORE_AUDIT_SHIPPER_KEY"] = key
    return record.key_id


def _revoke(settings: Settings, key_id: str | None) -> None:
    if key_id is None:
        return
    engine = make_engine(settings.database_url)
    try:
        KeyStore(make_sessions(engine)).revoke(SERVICE_TENANT, key_id)
    finally:
        engine.dispose()


def up_ingest_name(data_dir: Path) -> str:
    """The ingest process's name under `up`: the same on every start for one machine and
    data folder, so a start takes back at once the tasks the last run left in flight,
    instead of when their leases run out."""
    folder = hashlib.sha256(str(data_dir).encode()).hexdigest()[:8]
    return f"{socket.gethostname()[:20]}-ingest-{folder}"


# `up`'s TLS options -> the settings they set for every component.
UP_TLS_FLAGS = {
    "tls_cert": CERT_FILE,
    "tls_key": KEY_FILE,
    "tls_ca": CA_FILE,
    "tls_client_auth": CLIENT_AUTH,
    "tls_server_name": SERVER_NAME,
}


def cmd_up(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    metrics_ports = metrics_ports_of(args)
    ports = {name: args.grpc_port_base + offset for name, offset in COMPONENT_PORT_OFFSETS.items()}
    addr = {name: f"{args.host}:{port}" for name, port in ports.items()}
    env = dict(os.environ)
    env.update(
        {
            "REACHSTORE_DATA_DIR": str(data_dir),
            "REACHSTORE_QUERY_ADDR": addr["query"],
            "REACHSTORE_INGEST_ADDR": addr["ingest"],
            "REACHSTORE_REACH_ADDR": addr["reach"],
            "REACHSTORE_AUDIT_ADDR": addr["audit"],
        }
    )
    if args.require_keys:
        env["REACHSTORE_REQUIRE_KEYS"] = "true"
    if args.insecure:
        env[INSECURE] = "true"
    if args.database_url:
        env["REACHSTORE_DATABASE_URL"] = args.database_url
    if args.reach_config:
        env["REACHSTORE_REACH_CONFIG"] = str(Path(args.reach_config).resolve())
    for flag, variable in UP_TLS_FLAGS.items():
        value = getattr(args, flag)
        if value:
            # Paths are made absolute: the components run in the data folder's parent too,
            # but an operator's relative path means the folder `up` was started from.
            env[variable] = (
                value
                if flag in ("tls_client_auth", "tls_server_name")
                else str(Path(value).resolve())
            )
    try:
        settings = Settings.from_env(env)  # fails fast on a bad setting, before anything starts
        build_channels(load_config(settings.reach_config))
        masker_from_env(env)
        previous_secrets(env)
    except ConfigError as exc:
        _fail(f"bad setting: {exc}")
        return 2
    for variable, file_name in KEPT_SECRETS.items():
        if not env.get(variable):
            env[variable] = kept_secret(data_dir, file_name)
    try:
        keep_audit_keys(env, data_dir)
    except ConfigError as exc:
        _fail(f"bad setting: {exc}")
        return 2
    if not settings.require_keys and not is_loopback(args.host):
        _fail(
            f"refusing to listen on {args.host} without API keys: anyone who can reach it could "
            "read and change everything. Use --require-keys (or REACHSTORE_REQUIRE_KEYS=true) "
            "and create keys with `reachstore keys create`, or listen on 127.0.0.1."
        )
        return 2
    if not is_loopback(args.host) and not settings.tls.serving and not settings.insecure:
        _fail(
            f"refusing to listen on {args.host} without TLS: API keys and everything else "
            "would cross the network in plain text. Give --tls-cert and --tls-key (or "
            f"{CERT_FILE} and {KEY_FILE}), or --insecure if a network layer of your "
            "own encrypts the traffic."
        )
        return 2
    # `reachstore migrate`, before any service starts: they refuse a schema not at head.
    engine = make_engine(settings.database_url)
    print(f"reachstore: {describe(migrate_to_head(engine))}", file=sys.stderr, flush=True)
    shipper_key = _mint_shipper_key(engine, env)
    engine.dispose()

    query_processes = _query_processes(args, env, data_dir)
    system = _System(data_dir / "run")
    stop = threading.Event()
    # A closed terminal (SIGHUP) stops the system as Ctrl-C and SIGTERM do.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    scheme = "https" if settings.tls.serving else "http"
    url = f"{scheme}://{_url_host(args.host)}:{args.http_port}"
    try:
        for name in COMPONENT_PORT_OFFSETS:
            component_env = {**env, "REACHSTORE_LISTEN": addr[name]}
            if name not in ("query", "bridge") and metrics_ports[name]:
                component_env["REACHSTORE_METRICS_LISTEN"] = f"{args.host}:{metrics_ports[name]}"
            if name == "ingest" and not env.get("REACHSTORE_WORKER_ID"):
                component_env["REACHSTORE_WORKER_ID"] = up_ingest_name(data_dir)
            if name != "query":
                system.start(name, f"reachstore_server.{name}.main", component_env)
                continue
            for i, (process, extra) in enumerate(query_processes):
                one = {**component_env, **extra}
                if i == 0 and metrics_ports["query"]:  # the first serves every process's sums
                    one["REACHSTORE_METRICS_LISTEN"] = f"{args.host}:{metrics_ports['query']}"
                system.start(process, "reachstore_server.query.main", one)
        bridge_env = {**env, "REACHSTORE_LISTEN": f"{args.host}:{args.http_port}"}
        if metrics_ports["bridge"]:
            bridge_env["REACHSTORE_METRICS_LISTEN"] = f"{args.host}:{metrics_ports['bridge']}"
        system.start("bridge", "reachstore_server.bridge.main", bridge_env)
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        for name in COMPONENT_PORT_OFFSETS:
            _wait_grpc_healthy(addr[name], system, deadline, settings.tls)
        for _, extra in query_processes:
            if "REACHSTORE_ALSO_LISTEN" in extra:
                _wait_grpc_healthy(extra["REACHSTORE_ALSO_LISTEN"], system, deadline, settings.tls)
        _wait_http_healthy(url, system, deadline, settings.tls)
        with _seeding_credentials(settings) as metadata:
            _seed_demo(addr["ingest"], deadline, metadata, settings.tls)
    except (RuntimeError, grpc.RpcError) as exc:
        _fail(f"start-up failed: {exc}")
        system.stop()
        _revoke(settings, shipper_key)
        return 1
    except BaseException:  # an unexpected failure still ends every child started so far
        system.stop()
        _revoke(settings, shipper_key)
        raise
    print(f"reachstore ready: {url}", flush=True)
    while not stop.wait(0.5):
        if system.dead():
            _fail(f"{', '.join(system.dead())} exited; stopping everything")
            system.stop()
            _revoke(settings, shipper_key)
            return 1
    system.stop()
    _revoke(settings, shipper_key)
    return 0


def metrics_ports_of(args: argparse.Namespace) -> dict[str, int]:
    """Component -> its metrics port under `up` (0: off): the flag's value, else the base
    plus the component's offset."""
    ports = {}
    for name, offset in METRICS_PORT_OFFSETS.items():
        given = getattr(args, METRICS_PORT_FLAGS[name])
        ports[name] = args.grpc_port_base + offset if given is None else given
    return ports


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _free_ports(host: str, count: int) -> list[int]:
    """``count`` ports the kernel has free on ``host`` right now (bound, then released)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _query_processes(
    args: argparse.Namespace, env: dict[str, str], data_dir: Path
) -> list[tuple[str, dict[str, str]]]:
    """The query processes' names and extra settings. One query process uses one core: its
    Python code (the embedder's tokenizer, BM25's, the asyncio loop) holds one interpreter
    lock. So `up` can start ``--query-processes`` of them (0: one per core), all on the
    query port (gRPC servers set SO_REUSEPORT, so each connection lands on one of them),
    and each on a port of its own as well, which the other components get as the query
    service's replicas (REACHSTORE_QUERY_ADDR; gRPC balances their calls round robin,
    reachstore_server/common/channels.py). Every process builds or loads the same indexes and
    catches up with the store before each search (reachstore_server/query/indexes.py), so each
    answers with every completed ingest. Their metrics are summed through a shared folder
    (reachstore_server/query/metrics.py) and served by the first."""
    count = args.query_processes or usable_cores()
    if count == 1:
        return [("query", {})]
    try:
        ipaddress.ip_address(args.host)
    except ValueError:  # replicas are listed by IP address (reachstore_server/common/channels.py)
        return [("query", {})]
    replicas = [f"{_url_host(args.host)}:{port}" for port in _free_ports(args.host, count)]
    env["REACHSTORE_QUERY_ADDR"] = ",".join(replicas)
    shared = data_dir / "run" / "query-metrics"
    if shared.exists():
        for stale in shared.iterdir():  # counts of an earlier run
            stale.unlink()
    shared.mkdir(parents=True, exist_ok=True)
    return [
        (
            "query" if i == 0 else f"query-{i}",
            {"REACHSTORE_ALSO_LISTEN": replica, "PROMETHEUS_MULTIPROC_DIR": str(shared)},
        )
        for i, replica in enumerate(replicas)
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reachstore",
        description=__doc__.splitlines()[0],
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start every service and the REST bridge")
    up.add_argument("--data-dir", default="./data", help="folder for SQLite files and indexes")
    up.add_argument("--host", default="127.0.0.1", help="address every component listens on")
    up.add_argument("--http-port", type=int, default=8420, help="REST bridge port")
    up.add_argument(
        "--grpc-port-base",
        type=int,
        default=50051,
        help="query listens here, ingest on +1, reach on +2, audit on +3",
    )
    up.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="Prometheus metrics of the query service (coverage, failed namespaces "
        f"by category); default: grpc-port-base + {METRICS_PORT_OFFSET}; 0 turns them off",
    )
    up.add_argument(
        "--reach-metrics-port",
        type=int,
        default=None,
        help="Prometheus metrics of the reach service (actions by state, latency, retries, "
        f"breakers); default: grpc-port-base + {REACH_METRICS_PORT_OFFSET}; 0 turns them off",
    )
    for name, what in (
        ("ingest", "the ingest service (RPCs, task queue)"),
        ("audit", "the audit service (RPCs, checkpoint ages)"),
        ("bridge", "the REST bridge (HTTP requests by route and status)"),
    ):
        up.add_argument(
            f"--{name}-metrics-port",
            type=int,
            default=None,
            help=f"Prometheus metrics of {what}; default: grpc-port-base + "
            f"{METRICS_PORT_OFFSETS[name]}; 0 turns them off",
        )
    up.add_argument(
        "--query-processes",
        type=int,
        default=1,
        help="query service processes (one core each), sharing the query port; 0: one per "
        "core. Default 1: each process holds every index in its own memory (call-rate "
        "limits hold for all of them together)",
    )
    up.add_argument(
        "--reach-config",
        default=None,
        help="the reach configuration file (channels, limits, rules; TOML); default: "
        "REACHSTORE_REACH_CONFIG, or none (no channels)",
    )
    up.add_argument(
        "--require-keys",
        action="store_true",
        help="every call must present an API key; needed to listen beyond loopback",
    )
    up.add_argument(
        "--tls-cert",
        default=None,
        help=f"PEM certificate every component serves TLS with ({CERT_FILE}); its names "
        "must cover --host, or --tls-server-name",
    )
    up.add_argument("--tls-key", default=None, help=f"its PEM private key ({KEY_FILE})")
    up.add_argument(
        "--tls-ca",
        default=None,
        help=f"PEM authorities the components check each other's certificates against "
        f"({CA_FILE}; default: the system's)",
    )
    up.add_argument(
        "--tls-client-auth",
        choices=CLIENT_AUTH_MODES,
        default=None,
        help="require: the gRPC ports accept only callers with a certificate signed by "
        "--tls-ca (mutual TLS)",
    )
    up.add_argument(
        "--tls-server-name",
        default=None,
        help="the name the components expect on each other's certificates, when it is not --host",
    )
    up.add_argument(
        "--insecure",
        action="store_true",
        help="listen beyond loopback without TLS (only where the network itself is encrypted)",
    )
    up.add_argument(
        "--database-url",
        default=None,
        help="run every service on this database (postgresql+psycopg://...); default: "
        "REACHSTORE_DATABASE_URL, or SQLite in the data folder",
    )
    up.set_defaults(func=cmd_up)
    add_keys_parser(commands)
    add_migrate_parser(commands)
    add_audit_parser(commands)
    add_serve_parser(commands)
    add_client_parsers(commands)
    add_mcp_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()

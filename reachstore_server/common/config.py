"""Settings, read once from the environment, validated, frozen, and passed down.

Every component reads the same ``Settings``; each uses the part it needs. Names and
defaults are listed in ``ENVIRONMENT`` so the README and the deployment examples can be
checked against one place.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from reachstore_server.common.admission import AdmissionLimits
from reachstore_server.common.channels import split_addresses
from reachstore_server.common.config_errors import ConfigError
from reachstore_server.common.hosts import is_loopback
from reachstore_server.common.limits import Limits
from reachstore_server.common.tls import CERT_FILE, KEY_FILE, PLAIN, TlsFiles, tls_from_env
from reachstore_server.common.tls import ENVIRONMENT as TLS_ENVIRONMENT

__all__ = ["ENVIRONMENT", "INSECURE", "ConfigError", "Settings"]

INSECURE = "REACHSTORE_INSECURE"
# Admission's bounds (docs/OPERATIONS.md, "Load shedding"): past a minute a call's wait for a
# slot is a queue that outlives its burst, which admission exists to prevent; far more slots
# than threads to serve them is no bound at all.
MAX_ADMIT_WAIT_MS = 60_000
MAX_ADMIT_CONCURRENCY = 4096
# Query members (docs/SHARDS.md): the members table's address column holds 255 characters;
# a heartbeat (every lease / 5) must have time for its round trip to the database.
MAX_ADVERTISED_CHARS = 255
MIN_MEMBER_LEASE_S = 1.0
MIN_HOP_SECRET_CHARS = 32

# name -> (default, meaning). The REACHSTORE_LIMIT_* variables are listed, with their
# defaults, in ``limits.ENVIRONMENT``.
ENVIRONMENT: dict[str, tuple[str, str]] = {
    "REACHSTORE_DATA_DIR": ("./data", "Folder for SQLite files and index snapshots."),
    "REACHSTORE_DATABASE_URL": ("", "SQLAlchemy URL; empty means SQLite in the data folder."),
    "REACHSTORE_LISTEN": (
        "",
        "host:port this component listens on. Defaults: query 127.0.0.1:50051, ingest "
        "127.0.0.1:50052, bridge 127.0.0.1:8420.",
    ),
    "REACHSTORE_ALSO_LISTEN": (
        "",
        "More host:port addresses (comma-separated) this component listens on as well. `up` "
        "gives each of its query processes one of its own, next to the shared query port.",
    ),
    "REACHSTORE_QUERY_ADDR": (
        "127.0.0.1:50051",
        "host:port of the query service, or a comma-separated list of replicas (calls are "
        "balanced round robin; safe reads are retried on another replica). Likewise for "
        "the other *_ADDR settings.",
    ),
    "REACHSTORE_INGEST_ADDR": ("127.0.0.1:50052", "host:port of the ingest service."),
    "REACHSTORE_REACH_ADDR": ("127.0.0.1:50053", "host:port of the reach service."),
    "REACHSTORE_AUDIT_ADDR": (
        "",
        "host:port of the audit service, where every service ships its audit events. "
        "Empty: events stay in the outbox (nothing is lost) until it is set.",
    ),
    "REACHSTORE_AUDIT_SIGNING_KEY": (
        "",
        "The Ed25519 private key (PEM text) the audit service signs checkpoints and witness "
        "lines with, e.g. from a Kubernetes secret; or use REACHSTORE_AUDIT_SIGNING_KEY_FILE. "
        "`up` makes a pair in the data folder when neither is set.",
    ),
    "REACHSTORE_AUDIT_SIGNING_KEY_FILE": (
        "",
        "Path of the Ed25519 private key (PEM), e.g. a secret mounted as a file.",
    ),
    "REACHSTORE_AUDIT_PUBLIC_KEY": (
        "",
        "The audit public key (PEM text) `reachstore audit verify` checks checkpoints with; "
        "or REACHSTORE_AUDIT_PUBLIC_KEY_FILE. Derived from the private key when unset.",
    ),
    "REACHSTORE_AUDIT_PUBLIC_KEY_FILE": ("", "Path of the audit public key (PEM)."),
    "REACHSTORE_AUDIT_KEY": (
        "",
        "The HMAC key older versions signed checkpoints with (`audit.key`): only checks "
        "those checkpoints, signs nothing.",
    ),
    "REACHSTORE_AUDIT_WITNESS_FILE": (
        "",
        "Append-only file every checkpoint is also written to (one signed line each); put "
        "it on a volume the database's owner cannot write. `up`: audit_witness.jsonl in "
        "the data folder.",
    ),
    "REACHSTORE_AUDIT_WITNESS_URL": (
        "",
        "HTTP witness(es), comma-separated: each checkpoint line is POSTed there, and a GET "
        "returns the lines kept (what Verify reads).",
    ),
    "REACHSTORE_AUDIT_CADENCE_GRACE_S": (
        "300",
        "Seconds a due checkpoint may be late before Verify reports a cadence_gap.",
    ),
    "REACHSTORE_AUDIT_CHECKPOINT_S": (
        "60",
        "Seconds between signed checkpoints of the chains; checkpoints are due this often "
        "while events arrive.",
    ),
    "REACHSTORE_AUDIT_VERIFY_PARALLEL_MIN": (
        "200000",
        "Verify walks a chain longer than this many events in one worker process per core "
        "(reachstore_server/audit/parallel_walk.py).",
    ),
    "REACHSTORE_AUDIT_READS": (
        "false",
        "true: reads (queries, look-ups, listings) are audited too, not only changes.",
    ),
    "REACHSTORE_AUDIT_SHIPPER_KEY": (
        "",
        "Deployment service key (`reachstore keys create --service`) the services ship "
        "audit events with; `up` mints one at start. Without it events wait in the outbox: "
        "the keyless caller may not append.",
    ),
    "REACHSTORE_REACH_CONFIG": (
        "",
        "Path of the reach configuration file (TOML: channels, limits, rules). Empty: no "
        "channels, so every action is refused.",
    ),
    "REACHSTORE_WORKER_ID": (
        "",
        "Name of this reach or ingest process in leases and logs; default: host name and "
        "pid. Names must differ between live processes (in their first 40 characters); an "
        "ingest process restarted under the same name takes back its earlier run's tasks "
        "at once instead of when their leases run out.",
    ),
    "REACHSTORE_PII_SECRET": (
        "",
        "Secret (16+ bytes) that keys PII masking and the hashes of the entity and "
        "parameters in reach's idempotency keys, so equal values mask alike and the same "
        "intent keys alike across processes and restarts. Required by reach; empty: `up` "
        "keeps one in the data folder.",
    ),
    "REACHSTORE_PII_SECRET_PREVIOUS": (
        "",
        "Earlier values of REACHSTORE_PII_SECRET, comma-separated, newest first: reach still "
        "finds actions reserved under their keys (a re-submission after a rotation is not a "
        "new action). Keep them for the longest idempotency window in use.",
    ),
    "REACHSTORE_METRICS_LISTEN": (
        "",
        "host:port for Prometheus metrics of this component; empty: off.",
    ),
    "REACHSTORE_EMBED_THREADS": ("1", "Math threads of the embedder in each process."),
    "REACHSTORE_QUERY_TIMEOUT_DEFAULT_MS": ("2000", "Per-namespace budget when a query sets none."),
    "REACHSTORE_QUERY_TIMEOUT_CAP_MS": (
        "10000",
        "Largest per-namespace budget a query may ask for.",
    ),
    "REACHSTORE_QUERY_MAX_NAMESPACES": ("32", "Most namespaces one query may name."),
    "REACHSTORE_INGEST_BATCH_CHUNKS": ("64", "Chunks the ingest worker embeds in one call."),
    "REACHSTORE_INGEST_EMBED_PROCESSES": (
        "0",
        "Processes the ingest service embeds in (forked copies): 0 for one per core, "
        "1 for in the ingest process only.",
    ),
    "REACHSTORE_INGEST_LEASE_S": (
        "30",
        "Seconds an ingest process holds the tasks it claimed, by the database's clock, "
        "unless it renews them; tasks whose lease ran out (their process died) are taken "
        "back by any ingest process. At least 1.",
    ),
    "REACHSTORE_INGEST_HEARTBEAT_S": (
        "10",
        "Seconds between renewals of an ingest process's leases while it works on a claim; "
        "at most half of REACHSTORE_INGEST_LEASE_S, so one late renewal loses nothing.",
    ),
    "REACHSTORE_INGEST_MAX_QUEUE_S": (
        "300",
        "New documents are refused (INGEST_BACKLOG, transient) while the oldest queued one "
        "has waited longer than this many seconds, so a backlog stops growing instead of "
        "delaying every later document further.",
    ),
    "REACHSTORE_QUERY_ADVERTISE": (
        "",
        "Query service: host:port the other query processes reach this one at. Set, the "
        "process joins the query members in the shared database and holds only the "
        "namespaces placed on it, forwarding the others' searches to their owners "
        "(docs/SHARDS.md). Empty (the default): it holds every namespace.",
    ),
    "REACHSTORE_QUERY_REPLICAS": (
        "2",
        "Query processes that hold each namespace when namespaces are sharded (at most the "
        "members there are). At least 1.",
    ),
    "REACHSTORE_QUERY_PARTITION_CHUNKS": (
        "200000",
        "Query members: a namespace with more chunks than this in one query process is "
        "split into partitions (a power of two, at most 64), each placed on its own "
        "members, so one namespace need not fit one process (docs/SHARDS.md). At least 10.",
    ),
    "REACHSTORE_QUERY_HOP_SECRET": (
        "",
        "Query members: the secret (32+ characters, the same in every member) that signs "
        "the searches members forward to each other, which are not charged or audited a "
        "second time. Required with REACHSTORE_QUERY_ADVERTISE; kept out of the database.",
    ),
    "REACHSTORE_QUERY_MEMBER_LEASE_S": (
        "5",
        "Seconds a query member stays placed without renewing its heartbeat (it renews "
        "five times per lease), at least 1; a member that died leaves the placement after "
        "this long.",
    ),
    "REACHSTORE_FAULT_NAMESPACE_DELAY_MS": (
        "",
        "Fault injection for tests and drills: `ns=ms,ns2=ms` delays every search of those "
        "namespaces. Empty (the default) injects nothing.",
    ),
    "REACHSTORE_FAULT_REBUILD_DELAY_MS": (
        "0",
        "Fault injection for tests and drills: every index rebuild first waits this long.",
    ),
    "REACHSTORE_ADMIT_CONCURRENCY": (
        "16",
        "Calls each service process serves at once (long polls not counted), 1 to 4096; more "
        'wait for a slot, reads first (docs/OPERATIONS.md, "Load shedding").',
    ),
    "REACHSTORE_ADMIT_WAIT_MS": (
        "1000",
        "Longest a call waits for a slot (less when its deadline is nearer), at most 60000; a "
        "call that cannot be served in time is refused at once with SERVICE_OVERLOADED.",
    ),
    "REACHSTORE_INSECURE": (
        "false",
        "true: a component may listen beyond loopback in plain text (only where the network "
        "itself is encrypted, e.g. a service mesh); otherwise it refuses to start without "
        "REACHSTORE_TLS_CERT_FILE (`up --insecure` sets it).",
    ),
    "REACHSTORE_REQUIRE_KEYS": (
        "false",
        "true: every call must present an API key. false (local development): a call "
        "without a key acts for the local tenant, and `reachstore up` binds loopback only.",
    ),
    "REACHSTORE_LOG_LEVEL": ("INFO", "Log level of every component."),
    "REACHSTORE_HTTP_HEAD_TIMEOUT_S": (
        "10",
        "Bridge: seconds a connection has, from opening (or from the first byte of a later "
        "request on it), to send a complete request head; then 408 and the connection closes.",
    ),
    "REACHSTORE_HTTP_BODY_TIMEOUT_S": (
        "60",
        "Bridge: seconds a request has, after its head, to send its whole body; then the "
        "connection closes.",
    ),
    "REACHSTORE_HTTP_WRITE_TIMEOUT_S": (
        "30",
        "Bridge: seconds a caller may take none of an answer it has not read yet (beyond "
        "what the socket buffers hold); then the connection is cut off.",
    ),
    "REACHSTORE_HTTP_ALLOWED_HOSTS": (
        "",
        "Bridge: host names it answers to besides the loopback ones (localhost, 127.0.0.1, "
        "[::1]), comma-separated, without ports; a request naming another host (as a "
        "DNS-rebinding page does) gets 403 HOST_NOT_ALLOWED. `*`: any name (only with "
        "REACHSTORE_REQUIRE_KEYS=true, behind a proxy that checks names itself).",
    ),
    "REACHSTORE_HTTP_ALLOWED_ORIGINS": (
        "",
        "Bridge: web origins (scheme://host[:port]) whose pages may call it besides its own, "
        "comma-separated; a request a page of another origin sends gets 403 "
        "ORIGIN_NOT_ALLOWED.",
    ),
    "REACHSTORE_HTTP_MAX_CONNECTIONS": (
        "2000",
        "Bridge: open HTTP connections it serves at once; a request on a connection beyond "
        "them gets 503 TOO_MANY_CONNECTIONS and the connection closes.",
    ),
    **TLS_ENVIRONMENT,
}


# How much of a process's name leases keep (reachstore_server/storage/tasks.py): live processes
# must differ within it.
PROCESS_NAME_CHARS = 40


def process_name() -> str:
    """How a process names itself when no name is configured (``REACHSTORE_WORKER_ID``):
    in leases and logs, and in answers that hold per-process figures. The host name is cut
    so the pid always fits in ``PROCESS_NAME_CHARS``: cut after it, as it was, two
    processes on a host with a name of 40 characters or more (a cloud default such as
    ip-172-31-16-100.eu-central-1.compute.internal) had one name, and a starting process
    took the other's live tasks back as its own earlier run's."""
    pid = str(os.getpid())
    return f"{socket.gethostname()[: PROCESS_NAME_CHARS - len(pid) - 1]}-{pid}"


def _int(env: Mapping[str, str], name: str, minimum: int, maximum: int | None = None) -> int:
    raw = env.get(name, ENVIRONMENT[name][0])
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, got {value}")
    return value


def _seconds(env: Mapping[str, str], name: str) -> float:
    raw = env.get(name, ENVIRONMENT[name][0])
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not 0 < value < 86400:
        raise ConfigError(f"{name} must be more than 0 and less than a day, got {raw!r}")
    return value


def _bool(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, ENVIRONMENT[name][0]).strip().lower()
    if raw not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigError(f"{name} must be true or false, got {raw!r}")
    return raw in ("true", "1", "yes")


def _address(env: Mapping[str, str], name: str) -> str:
    raw = env.get(name, ENVIRONMENT[name][0])
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{name} must be host:port, got {raw!r}")
    return raw


def _advertised(env: Mapping[str, str], name: str) -> str:
    """The address other query members dial this one at (docs/SHARDS.md): a host:port a
    peer can reach, so not a wildcard (dialled, 0.0.0.0 reaches the dialler's own host)
    nor port 0, with no blank in the host, and short enough for the members table."""
    raw = _address(env, name)
    host, _, port = raw.rpartition(":")
    if host.strip("[]") in ("0.0.0.0", "::", "") or int(port) == 0:
        raise ConfigError(f"{name} must be an address other members can dial, got {raw!r}")
    if any(c.isspace() for c in host) or len(raw) > MAX_ADVERTISED_CHARS:
        raise ConfigError(
            f"{name} must be host:port with no blanks, at most {MAX_ADVERTISED_CHARS} "
            f"characters, got {raw[:80]!r}"
        )
    return raw


def _hop_secret(env: Mapping[str, str], advertised: str) -> str:
    """The members' shared signing secret: required once the process is a member, and
    long enough not to be guessed (docs/SHARDS.md, "Routing")."""
    name = "REACHSTORE_QUERY_HOP_SECRET"
    secret = env.get(name, "")
    if advertised and len(secret) < MIN_HOP_SECRET_CHARS:
        raise ConfigError(
            f"{name} must be set, at least {MIN_HOP_SECRET_CHARS} characters and the same in "
            f"every query member, when REACHSTORE_QUERY_ADVERTISE is set (got "
            f"{len(secret)} characters)"
        )
    return secret


def _member_lease(env: Mapping[str, str], name: str) -> float:
    """A member renews its row five times per lease; a lease shorter than a few database
    round trips has live members delete each other's rows."""
    lease_s = _seconds(env, name)
    if lease_s < MIN_MEMBER_LEASE_S:
        raise ConfigError(f"{name} must be at least {MIN_MEMBER_LEASE_S:g} s, got {lease_s:g}")
    return lease_s


def _addresses(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated list of host:port (empty: none)."""
    parts = [p.strip() for p in env.get(name, ENVIRONMENT[name][0]).split(",") if p.strip()]
    for part in parts:
        _address({name: part}, name)
    return tuple(parts)


def _replicas(env: Mapping[str, str], name: str) -> str:
    """An address setting of a service that may run as several replicas."""
    raw = env.get(name, ENVIRONMENT[name][0])
    split_addresses(raw, name)
    return raw


def _ingest_lease(env: Mapping[str, str]) -> tuple[float, float]:
    """(lease, heartbeat) seconds of the ingest worker, checked against each other."""
    lease_s = _seconds(env, "REACHSTORE_INGEST_LEASE_S")
    heartbeat_s = _seconds(env, "REACHSTORE_INGEST_HEARTBEAT_S")
    if lease_s < 1:
        raise ConfigError(f"REACHSTORE_INGEST_LEASE_S must be at least 1 second, got {lease_s:g}")
    if heartbeat_s > lease_s / 2:
        raise ConfigError(
            f"REACHSTORE_INGEST_HEARTBEAT_S must be at most half of REACHSTORE_INGEST_LEASE_S "
            f"({lease_s:g}), got {heartbeat_s:g}: a lease must outlast one late renewal"
        )
    return lease_s, heartbeat_s


def _check_exposure(
    name: str, address: str, require_keys: bool, tls: TlsFiles, insecure: bool
) -> None:
    """A component that listens beyond loopback needs keys (anyone who can reach it could
    otherwise read and change everything) and TLS (keys and data would cross the network
    in clear), the way `reachstore up` insists (docs/SECURITY.md, "TLS")."""
    host = address.rpartition(":")[0]
    if is_loopback(host):
        return
    if not require_keys:
        raise ConfigError(
            f"{name}={address} is beyond loopback without API keys: set "
            "REACHSTORE_REQUIRE_KEYS=true (and create keys with `reachstore keys create`), "
            "or listen on 127.0.0.1"
        )
    if not tls.serving and not insecure:
        raise ConfigError(
            f"{name}={address} is beyond loopback without TLS: keys and data would cross the "
            f"network in clear. Set {CERT_FILE} and {KEY_FILE}, or {INSECURE}=true where the "
            "network itself is encrypted"
        )


def _hosts(env: Mapping[str, str], require_keys: bool) -> tuple[str, ...]:
    name = "REACHSTORE_HTTP_ALLOWED_HOSTS"
    hosts = tuple(h.strip().lower() for h in env.get(name, "").split(",") if h.strip())
    for host in hosts:
        if host == "*":
            if not require_keys:
                raise ConfigError(
                    f"{name}=* needs REACHSTORE_REQUIRE_KEYS=true: without keys any page a "
                    "developer visits could call the bridge through a name of its own"
                )
            continue
        bracketed = host.startswith("[") and host.endswith("]")
        bare = host[1:-1] if bracketed else host
        # A colon belongs inside brackets (an IPv6 address) and nowhere else (a port).
        if not bare or set(host) & set("/*@ ") or (":" in bare) != bracketed:
            raise ConfigError(
                f"{name}: {host!r} is not a host name (no scheme, path or port; an IPv6 "
                "address in brackets)"
            )
    return hosts


def _origins(env: Mapping[str, str]) -> tuple[str, ...]:
    name = "REACHSTORE_HTTP_ALLOWED_ORIGINS"
    origins = []
    for raw in filter(None, (o.strip() for o in env.get(name, "").split(","))):
        parts = urllib.parse.urlsplit(raw.lower())
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/"):
            raise ConfigError(f"{name}: {raw!r} is not an origin like https://app.example.com")
        origins.append(f"{parts.scheme}://{parts.netloc}")
    return tuple(origins)


def _delays(raw: str) -> dict[str, int]:
    delays: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, ms = item.partition("=")
        if not sep or not ms.isdigit():
            raise ConfigError(
                f"REACHSTORE_FAULT_NAMESPACE_DELAY_MS entries must be ns=ms, got {item!r}"
            )
        delays[name] = int(ms)
    return delays


@dataclasses.dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str
    listen: str
    query_addr: str
    ingest_addr: str
    reach_addr: str
    audit_addr: str
    audit_checkpoint_s: int
    audit_reads: bool
    audit_shipper_key: str
    reach_config: Path | None
    worker_id: str
    metrics_listen: str
    embed_threads: int
    query_timeout_default_ms: int
    query_timeout_cap_ms: int
    query_max_namespaces: int
    ingest_batch_chunks: int
    ingest_embed_processes: int
    fault_namespace_delay_ms: Mapping[str, int]
    fault_rebuild_delay_ms: int
    log_level: str
    require_keys: bool
    limits: Limits
    http_head_timeout_s: float = 10.0
    http_body_timeout_s: float = 60.0
    http_write_timeout_s: float = 30.0
    http_max_connections: int = 2000
    ingest_lease_s: float = 30.0
    ingest_heartbeat_s: float = 10.0
    ingest_max_queue_s: int = 300
    http_allowed_hosts: tuple[str, ...] = ()
    http_allowed_origins: tuple[str, ...] = ()
    tls: TlsFiles = PLAIN
    insecure: bool = False
    also_listen: tuple[str, ...] = ()
    admission: AdmissionLimits = AdmissionLimits()
    query_advertise: str = ""
    query_replicas: int = 2
    query_member_lease_s: float = 5.0
    query_partition_chunks: int = 200_000
    query_hop_secret: str = dataclasses.field(default="", repr=False)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, default_listen: str = "127.0.0.1:0"
    ) -> Settings:
        """Reads and checks every setting; ``default_listen`` is the component's own port."""
        env = dict(os.environ if env is None else env)
        env.setdefault("REACHSTORE_LISTEN", default_listen)
        env["REACHSTORE_LISTEN"] = env["REACHSTORE_LISTEN"] or default_listen
        data_dir = Path(env.get("REACHSTORE_DATA_DIR", ENVIRONMENT["REACHSTORE_DATA_DIR"][0]))
        database_url = env.get("REACHSTORE_DATABASE_URL", "") or (
            f"sqlite:///{(data_dir / 'reachstore.db').resolve()}"
        )
        default_ms = _int(env, "REACHSTORE_QUERY_TIMEOUT_DEFAULT_MS", 1)
        cap_ms = _int(env, "REACHSTORE_QUERY_TIMEOUT_CAP_MS", 1)
        ingest_lease_s, ingest_heartbeat_s = _ingest_lease(env)
        if default_ms > cap_ms:
            raise ConfigError(
                "REACHSTORE_QUERY_TIMEOUT_DEFAULT_MS must not exceed "
                "REACHSTORE_QUERY_TIMEOUT_CAP_MS"
            )
        require_keys = _bool(env, "REACHSTORE_REQUIRE_KEYS")
        tls = tls_from_env(env)
        insecure = _bool(env, INSECURE)
        for name in ("REACHSTORE_LISTEN", "REACHSTORE_METRICS_LISTEN"):
            if env.get(name):
                _check_exposure(name, _address(env, name), require_keys, tls, insecure)
        for address in _addresses(env, "REACHSTORE_ALSO_LISTEN"):
            _check_exposure("REACHSTORE_ALSO_LISTEN", address, require_keys, tls, insecure)
        return cls(
            data_dir=data_dir,
            database_url=database_url,
            listen=_address(env, "REACHSTORE_LISTEN"),
            also_listen=_addresses(env, "REACHSTORE_ALSO_LISTEN"),
            query_addr=_replicas(env, "REACHSTORE_QUERY_ADDR"),
            ingest_addr=_replicas(env, "REACHSTORE_INGEST_ADDR"),
            reach_addr=_replicas(env, "REACHSTORE_REACH_ADDR"),
            audit_addr=_replicas(env, "REACHSTORE_AUDIT_ADDR")
            if env.get("REACHSTORE_AUDIT_ADDR")
            else "",
            audit_checkpoint_s=_int(env, "REACHSTORE_AUDIT_CHECKPOINT_S", 1),
            audit_reads=_bool(env, "REACHSTORE_AUDIT_READS"),
            audit_shipper_key=env.get("REACHSTORE_AUDIT_SHIPPER_KEY", ""),
            reach_config=Path(env["REACHSTORE_REACH_CONFIG"])
            if env.get("REACHSTORE_REACH_CONFIG")
            else None,
            worker_id=env.get("REACHSTORE_WORKER_ID", "") or process_name(),
            metrics_listen=_address(env, "REACHSTORE_METRICS_LISTEN")
            if env.get("REACHSTORE_METRICS_LISTEN")
            else "",
            embed_threads=_int(env, "REACHSTORE_EMBED_THREADS", 1),
            query_timeout_default_ms=default_ms,
            query_timeout_cap_ms=cap_ms,
            query_max_namespaces=_int(env, "REACHSTORE_QUERY_MAX_NAMESPACES", 1),
            ingest_batch_chunks=_int(env, "REACHSTORE_INGEST_BATCH_CHUNKS", 1),
            ingest_embed_processes=_int(env, "REACHSTORE_INGEST_EMBED_PROCESSES", 0),
            fault_namespace_delay_ms=_delays(env.get("REACHSTORE_FAULT_NAMESPACE_DELAY_MS", "")),
            fault_rebuild_delay_ms=_int(env, "REACHSTORE_FAULT_REBUILD_DELAY_MS", 0),
            require_keys=require_keys,
            limits=Limits.from_env(env),
            log_level=env.get("REACHSTORE_LOG_LEVEL", "INFO").upper(),
            http_head_timeout_s=_seconds(env, "REACHSTORE_HTTP_HEAD_TIMEOUT_S"),
            http_body_timeout_s=_seconds(env, "REACHSTORE_HTTP_BODY_TIMEOUT_S"),
            http_write_timeout_s=_seconds(env, "REACHSTORE_HTTP_WRITE_TIMEOUT_S"),
            http_max_connections=_int(env, "REACHSTORE_HTTP_MAX_CONNECTIONS", 1),
            ingest_lease_s=ingest_lease_s,
            ingest_heartbeat_s=ingest_heartbeat_s,
            ingest_max_queue_s=_int(env, "REACHSTORE_INGEST_MAX_QUEUE_S", 1),
            http_allowed_hosts=_hosts(env, require_keys),
            http_allowed_origins=_origins(env),
            tls=tls,
            insecure=insecure,
            query_advertise=_advertised(env, "REACHSTORE_QUERY_ADVERTISE")
            if env.get("REACHSTORE_QUERY_ADVERTISE")
            else "",
            query_replicas=_int(env, "REACHSTORE_QUERY_REPLICAS", 1),
            query_member_lease_s=_member_lease(env, "REACHSTORE_QUERY_MEMBER_LEASE_S"),
            query_partition_chunks=_int(env, "REACHSTORE_QUERY_PARTITION_CHUNKS", 10),
            query_hop_secret=_hop_secret(env, env.get("REACHSTORE_QUERY_ADVERTISE", "")),
            admission=AdmissionLimits(
                concurrency=_int(env, "REACHSTORE_ADMIT_CONCURRENCY", 1, MAX_ADMIT_CONCURRENCY),
                max_wait_s=_int(env, "REACHSTORE_ADMIT_WAIT_MS", 0, MAX_ADMIT_WAIT_MS) / 1000,
            ),
        )

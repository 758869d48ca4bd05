"""TLS on a real `reachstore up`, with a CA and certificates the test makes itself
(``tls_certs.py``): every gRPC port and the bridge speak TLS only, callers that do not
trust the CA or speak plain text get nothing, the services reach each other (the bridge
its backends, every shipper the audit service) over TLS, and with mutual TLS the gRPC
ports turn away callers without a certificate of the CA's. `up` refuses to listen beyond
loopback with keys but without TLS, unless told `--insecure`."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from reachstore import Client, Tls, TransientError
from tests.e2e.system import RunningSystem, free_port_block
from tests.e2e.tls_certs import CertSet, write_cert_set

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertSet:
    return write_cert_set(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_system(tmp_path_factory: pytest.TempPathFactory, certs: CertSet) -> Iterator[RunningSystem]:
    running = RunningSystem(tmp_path_factory.mktemp("tls"), extra_args=certs.up_args())
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


def _demo_found(client: Client) -> bool:
    reply = client.search(["demo"], "what does semantic storage keep close?", top_k=1)
    return reply.meta.coverage_ratio == 1 and len(reply.results) == 1


def _events_shipped(client: Client, timeout: float = 30.0) -> list[str]:
    """Methods of the events the services shipped to the audit service (over TLS)."""
    deadline = time.monotonic() + timeout
    while True:
        methods = [event.method for event in client.list_events()]
        if methods or time.monotonic() > deadline:
            return methods
        time.sleep(0.5)


def test_grpc_answers_a_client_that_trusts_the_ca(
    tls_system: RunningSystem, certs: CertSet
) -> None:
    with Client.local(grpc_port_base=tls_system.grpc_port_base, tls=Tls(ca_file=certs.ca)) as c:
        assert _demo_found(c)
        # The demo seeding went through ingest; its events reached the audit service only
        # if the shipper spoke TLS to it.
        assert "CreateNamespace" in " ".join(_events_shipped(c))


def test_the_bridge_serves_https_and_calls_its_backends_over_tls(
    tls_system: RunningSystem, certs: CertSet
) -> None:
    assert tls_system.http_url.startswith("https://")
    with Client.rest(tls_system.http_url, tls=Tls(ca_file=certs.ca)) as client:
        assert _demo_found(client)
    plain = tls_system.http_url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        reply = httpx.get(f"{plain}/healthz", timeout=5)
        # uvicorn answers a plain-text request on its TLS port with nothing it can parse;
        # if it ever answered, it must not be with the service.
        assert reply.status_code != 200


@pytest.mark.parametrize(
    "tls",
    [
        pytest.param(False, id="plain-text"),
        pytest.param(True, id="system-trust-store"),
        pytest.param("other-ca.pem", id="another-ca"),
    ],
)
def test_grpc_gives_nothing_to_a_caller_that_does_not_speak_tls_or_trust_the_ca(
    tls_system: RunningSystem, certs: CertSet, tls: bool | str
) -> None:
    chosen: Tls | bool = Tls(ca_file=certs.path(tls)) if isinstance(tls, str) else tls
    with Client.local(
        grpc_port_base=tls_system.grpc_port_base, tls=chosen, retries=None, timeout=5
    ) as client:
        with pytest.raises(TransientError) as caught:
            client.search(["demo"], "anything")
    assert caught.value.code == "SERVICE_UNAVAILABLE"


def test_a_certificate_checked_for_the_wrong_name_is_refused(
    tls_system: RunningSystem, certs: CertSet
) -> None:
    tls = Tls(ca_file=certs.ca, server_name="reach.elsewhere.test")
    with Client.local(
        grpc_port_base=tls_system.grpc_port_base, tls=tls, retries=None, timeout=5
    ) as client:
        with pytest.raises(TransientError):
            client.search(["demo"], "anything")
    # The name the certificate does carry passes, though the address is an IP.
    tls = Tls(ca_file=certs.ca, server_name="reachstore.test")
    with Client.local(grpc_port_base=tls_system.grpc_port_base, tls=tls) as client:
        assert _demo_found(client)


def test_an_api_key_never_crosses_the_wire_in_clear(
    tls_system: RunningSystem, certs: CertSet
) -> None:
    """What a caller's first bytes meet on the query port is a TLS handshake: a plain
    HTTP/2 preface with a key in its headers gets no HTTP/2 answer."""
    port = tls_system.grpc_port_base
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        try:
            answer = sock.recv(64)
        except (ConnectionResetError, TimeoutError):
            answer = b""
    # An HTTP/2 server's first frame is SETTINGS (type 0x04 at byte 3); a TLS server sends
    # none, or an alert record (0x15).
    assert len(answer) < 4 or answer[3] != 0x04
    context = ssl.create_default_context(cafile=certs.ca)
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped:
            assert wrapped.version() in ("TLSv1.2", "TLSv1.3")
            assert wrapped.selected_alpn_protocol() == "h2"


@pytest.fixture(scope="module")
def mtls_system(
    tmp_path_factory: pytest.TempPathFactory, certs: CertSet
) -> Iterator[RunningSystem]:
    running = RunningSystem(
        tmp_path_factory.mktemp("mtls"),
        extra_args=certs.up_args("--tls-client-auth", "require"),
    )
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.mark.parametrize(
    "cert",
    [pytest.param(None, id="no-certificate"), pytest.param("other-client", id="another-ca")],
)
def test_mutual_tls_turns_away_callers_without_a_certificate_of_the_ca(
    mtls_system: RunningSystem, certs: CertSet, cert: str | None
) -> None:
    tls = (
        Tls(ca_file=certs.ca)
        if cert is None
        else Tls(certs.ca, certs.path(f"{cert}.pem"), certs.path(f"{cert}.key"))
    )
    with Client.local(
        grpc_port_base=mtls_system.grpc_port_base, tls=tls, retries=None, timeout=5
    ) as client:
        with pytest.raises(TransientError) as caught:
            client.search(["demo"], "anything")
    assert caught.value.code == "SERVICE_UNAVAILABLE"


def test_mutual_tls_serves_the_ca_s_clients_and_the_services_each_other(
    mtls_system: RunningSystem, certs: CertSet
) -> None:
    tls = Tls(certs.ca, certs.path("client.pem"), certs.path("client.key"))
    with Client.local(grpc_port_base=mtls_system.grpc_port_base, tls=tls) as client:
        assert _demo_found(client)
        # Shippers showed the services' certificate to the audit service.
        assert "CreateNamespace" in " ".join(_events_shipped(client))
    # HTTP callers are not asked for a certificate: the bridge shows its own to the
    # services behind it.
    with Client.rest(mtls_system.http_url, tls=Tls(ca_file=certs.ca)) as client:
        assert _demo_found(client)


def _up(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    base = free_port_block(10)
    return subprocess.run(
        [sys.executable, "-m", "reachstore_server.cli", "up", "--data-dir", str(data_dir)]
        + ["--grpc-port-base", str(base), "--http-port", str(base + 4), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_up_refuses_keys_beyond_loopback_without_tls(tmp_path: Path) -> None:
    done = _up(tmp_path, "--host", "0.0.0.0", "--require-keys")
    assert done.returncode == 2, done.stderr
    assert "without TLS" in done.stderr and "--tls-cert" in done.stderr
    assert "--insecure" in done.stderr
    assert not (tmp_path / "reachstore.db").exists(), "nothing may start before the refusal"


def test_up_beyond_loopback_starts_with_tls_and_with_insecure(
    tmp_path: Path, certs: CertSet
) -> None:
    for name, extra in (
        ("tls", certs.up_args("--tls-server-name", "reachstore.test")),
        ("insecure", ("--insecure",)),
    ):
        system = RunningSystem(
            tmp_path / name, extra_args=("--host", "0.0.0.0", "--require-keys", *extra)
        )
        system.http_url = system.http_url.replace("127.0.0.1", "0.0.0.0")
        system.start()
        assert system.stop() == 0, "".join(system.output[-40:])


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--tls-cert", "server.pem"), "REACHSTORE_TLS_CERT_FILE and REACHSTORE_TLS_KEY_FILE"),
        (("--tls-cert", "server.pem", "--tls-key", "client.key"), "REACHSTORE_TLS_KEY_FILE"),
        (("--tls-cert", "missing.pem", "--tls-key", "server.key"), "REACHSTORE_TLS_CERT_FILE"),
        (("--tls-ca", "server.key"), "REACHSTORE_TLS_CA_FILE"),
        (
            ("--tls-cert", "server.pem", "--tls-key", "server.key", "--tls-client-auth", "require"),
            "REACHSTORE_TLS_CLIENT_AUTH=require needs",
        ),
    ],
)
def test_up_names_the_tls_setting_that_is_wrong(
    tmp_path: Path, certs: CertSet, args: tuple[str, ...], named: str
) -> None:
    resolved = tuple(certs.path(a) if a.endswith((".pem", ".key")) else a for a in args)
    done = _up(tmp_path, *resolved)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_grpc_channel_level_check_of_the_query_port(
    tls_system: RunningSystem, certs: CertSet
) -> None:
    """The raw grpc channel a generated stub would use: insecure fails, secure works."""
    address = f"127.0.0.1:{tls_system.grpc_port_base}"
    with grpc.insecure_channel(address) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    credentials = grpc.ssl_channel_credentials(Path(certs.ca).read_bytes())
    with grpc.secure_channel(address, credentials) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(scope="module")
def partialquery(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go client's example command, built from clients/go (`make go-install` puts the
    toolchain in place; `make test` does so first)."""
    out = tmp_path_factory.mktemp("go") / "partialquery"
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "go_client.sh"), "build", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def test_the_go_client_speaks_tls_to_the_query_service(
    tls_system: RunningSystem, certs: CertSet, partialquery: Path
) -> None:
    address = ["-addr", f"127.0.0.1:{tls_system.grpc_port_base}", "-namespaces", "demo"]

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(partialquery), *address, "-timeout", "5s", *flags],
            capture_output=True,
            text=True,
            timeout=30,
        )

    trusted = run("-tls-ca", certs.ca)
    assert trusted.returncode == 0, trusted.stderr
    assert "coverage 1.00: 1 of 1 namespaces answered" in trusted.stdout
    for flags in ((), ("-tls-ca", certs.path("other-ca.pem")), ("-tls",)):
        refused = run(*flags)
        assert refused.returncode == 1, (flags, refused.stdout)
        assert "coverage" not in refused.stdout


def test_the_readiness_probe_speaks_tls(tls_system: RunningSystem, certs: CertSet) -> None:
    """`python -m reachstore_server.probe`, which the Kubernetes example runs in place of the
    kubelet's gRPC probe (that one cannot speak TLS)."""
    port = str(tls_system.grpc_port_base)
    service = "reachstore.query.v1.QueryService"

    def probe(env: dict[str, str], *args: str) -> int:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("REACHSTORE_TLS_")}
        command = [sys.executable, "-m", "reachstore_server.probe", port, service, *args]
        done = subprocess.run(
            command, cwd=ROOT, env={**clean, **env}, capture_output=True, timeout=30
        )
        return done.returncode

    trusting = {"REACHSTORE_TLS_CA_FILE": certs.ca}
    assert probe(trusting, "reachstore.test") == 0
    assert probe(trusting) == 0  # 127.0.0.1 is in this certificate too
    assert probe(trusting, "elsewhere.test") == 1
    assert probe({}) == 1  # plain text gets nothing
    assert probe({"REACHSTORE_TLS_CA_FILE": certs.path("other-ca.pem")}) == 1


def test_the_bridge_reaches_every_query_process_over_tls(tmp_path: Path, certs: CertSet) -> None:
    """With two query processes the bridge has a list of replicas, which carries no one
    name: the certificates are checked against the replicas' host."""
    system = RunningSystem(tmp_path, extra_args=certs.up_args("--query-processes", "2"))
    system.start()
    try:
        with Client.rest(system.http_url, tls=Tls(ca_file=certs.ca)) as client:
            for _ in range(4):  # round robin: both processes answer
                assert _demo_found(client)
    finally:
        assert system.stop() == 0, "".join(system.output[-40:])

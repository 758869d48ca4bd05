"""With TLS (even mutual TLS) configured beyond loopback, no port of `up` may answer the
network in plain text.

docs/SECURITY.md, "TLS": "With a certificate, a caller that speaks plain text, trusts
another authority or expects another name gets no answer at all", and with
`--tls-client-auth require` "a process without a certificate of the deployment's CA
cannot open a connection". `up --require-keys --host 0.0.0.0 --tls-* --tls-client-auth
require` is the deployment the README shows. Yet the Prometheus ports `up` opens next to
the gRPC ports (query on base+9, reach on base+8, on the same --host) speak plain HTTP,
ask for no certificate and no key, and answer any IP address: what every tenant does
(actions by channel and state, queries, the audit outbox) is read in clear by anyone on
the network, from the machine's network address.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from reachstore_server.cli import METRICS_PORT_OFFSETS
from tests.e2e.system import RunningSystem
from tests.e2e.tls_certs import CertSet, write_cert_set

pytestmark = pytest.mark.e2e


def _network_address() -> str:
    """This machine's address on its default route (no packet is sent); loopback when it
    has none, which still reaches a port bound to every address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))
            address: str = probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"
    return address


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertSet:
    return write_cert_set(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, certs: CertSet) -> Iterator[RunningSystem]:
    running = RunningSystem(
        tmp_path_factory.mktemp("metrics-tls") / "data",
        extra_args=(
            "--host",
            "0.0.0.0",
            "--require-keys",
            *certs.up_args(),
            "--tls-client-auth",
            "require",
            "--tls-server-name",
            "reachstore.test",
        ),
    )
    running.http_url = running.http_url.replace("127.0.0.1", "0.0.0.0")
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


# Every component's metrics port, the ingest, audit and bridge ones included.
@pytest.mark.parametrize(("component", "offset"), sorted(METRICS_PORT_OFFSETS.items()))
def test_no_metrics_port_answers_plain_text_from_the_network(
    system: RunningSystem, component: str, offset: int
) -> None:
    address = _network_address()
    url = f"http://{address}:{system.grpc_port_base + offset}/metrics"
    try:
        reply = httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return  # nothing in clear: what TLS promises
    assert reply.status_code != 200 or "# TYPE" not in reply.text, (
        f"with TLS and mutual TLS configured, the {component} metrics port answered {url} "
        f"in plain text, without a certificate or a key:\n{reply.text[:600]}"
    )

"""TLS to a reachstore system, for both transports.

A system started with ``--tls-cert`` (or ``REACHSTORE_TLS_CERT_FILE``) speaks TLS only, on
every gRPC port and on the REST bridge. ``Tls`` says whom the client trusts (``ca_file``,
else the system's trust store), which certificate it shows when the system asks for one
(mutual TLS: ``cert_file`` and ``key_file``), and, when the address is not a name the
server's certificate carries, which name to expect (``server_name``).

Unless told otherwise a client reads the same variables the services read
(``REACHSTORE_TLS_CA_FILE``, ``REACHSTORE_TLS_CERT_FILE``, ``REACHSTORE_TLS_KEY_FILE``,
``REACHSTORE_TLS_SERVER_NAME``), as it reads ``REACHSTORE_API_KEY``.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from pathlib import Path
from typing import Any

import grpc

ENV = {
    "ca_file": "REACHSTORE_TLS_CA_FILE",
    "cert_file": "REACHSTORE_TLS_CERT_FILE",
    "key_file": "REACHSTORE_TLS_KEY_FILE",
    "server_name": "REACHSTORE_TLS_SERVER_NAME",
}


@dataclasses.dataclass(frozen=True)
class Tls:
    """How a client talks TLS to a reachstore system. ``Tls()`` trusts the system's
    authorities and shows no certificate of its own."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file go together: a certificate needs its key")

    @classmethod
    def from_env(cls) -> Tls | None:
        """The TLS the environment asks for, or None when it sets none of the variables."""
        found = {field: os.environ.get(variable) or None for field, variable in ENV.items()}
        if not any(found.values()):
            return None
        return cls(**found)

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | None) -> bytes | None:
            return Path(path).read_bytes() if path else None

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )

    def grpc_options(self, target: str = "") -> list[tuple[str, Any]]:
        """A list of replicas (``ipv4:a:1,b:2``) has no one name to check certificates
        against: without ``server_name``, its first host's."""
        name = self.server_name
        scheme, _, rest = target.partition(":")
        if not name and scheme in ("ipv4", "ipv6") and rest:
            name = rest.split(",")[0].rpartition(":")[0].strip("[]")
        return [("grpc.ssl_target_name_override", name)] if name else []

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


def resolve_tls(tls: Tls | bool | None) -> Tls | None:
    """``tls`` as given: a ``Tls``; True for ``Tls()``; False for plain text even when the
    environment asks for TLS; None for what the environment says (plain text if nothing)."""
    if tls is None:
        return Tls.from_env()
    if tls is True:
        return Tls()
    if tls is False:
        return None
    return tls

"""TLS between callers and services, and between the services themselves (docs/SECURITY.md).

One set of settings serves a whole deployment, so every component reads the same four:

- ``REACHSTORE_TLS_CERT_FILE`` and ``REACHSTORE_TLS_KEY_FILE`` (PEM, both or neither): the
  component's own certificate. With them its gRPC server and the bridge speak TLS only,
  and the component shows the same certificate when a peer asks for one (mutual TLS).
- ``REACHSTORE_TLS_CA_FILE`` (PEM): the authorities a peer's certificate is checked
  against; without it, the system's trust store.
- ``REACHSTORE_TLS_CLIENT_AUTH``: ``none`` (the default) or ``require``: the gRPC servers
  then refuse any caller whose certificate the CA file did not sign. The bridge does not
  ask HTTP callers for one: they prove who they are with API keys.
- ``REACHSTORE_TLS_SERVER_NAME``: the name a peer's certificate must carry, when it is not
  the host the component connects to (services that reach each other by IP address).

A component calls its peers over TLS as soon as it has a certificate or a CA file: a
deployment that serves TLS never falls back to plain text on the way between services.
Files are read and checked once at start, so a wrong path or a key that does not belong
to the certificate stops the component with the setting named, not the first handshake.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc

from reachstore_server.common import otel
from reachstore_server.common.config_errors import ConfigError

CERT_FILE = "REACHSTORE_TLS_CERT_FILE"
KEY_FILE = "REACHSTORE_TLS_KEY_FILE"
CA_FILE = "REACHSTORE_TLS_CA_FILE"
CLIENT_AUTH = "REACHSTORE_TLS_CLIENT_AUTH"
SERVER_NAME = "REACHSTORE_TLS_SERVER_NAME"

CLIENT_AUTH_MODES = ("none", "require")

ENVIRONMENT: dict[str, tuple[str, str]] = {
    CERT_FILE: (
        "",
        "PEM certificate (chain) of this component; with REACHSTORE_TLS_KEY_FILE its gRPC "
        "server and the bridge serve TLS only, and it is shown to peers that ask for one.",
    ),
    KEY_FILE: ("", "PEM private key of REACHSTORE_TLS_CERT_FILE."),
    CA_FILE: (
        "",
        "PEM authorities that peers' certificates are checked against (default: the "
        "system's trust store). Setting it, or a certificate, makes calls between the "
        "services use TLS.",
    ),
    CLIENT_AUTH: (
        "none",
        "require: the gRPC servers accept only callers with a certificate signed by "
        "REACHSTORE_TLS_CA_FILE (mutual TLS).",
    ),
    SERVER_NAME: (
        "",
        "Name the peers' certificates must carry, when it is not the host in their "
        "address (e.g. services reached by IP address).",
    ),
}


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """The PEM bytes, read once. ``cert_chain`` and ``private_key`` are both set or both
    empty; ``roots`` empty means the system's trust store."""

    cert_chain: bytes = b""
    private_key: bytes = b""
    roots: bytes = b""
    client_auth: bool = False
    server_name: str = ""
    cert_path: str = ""
    key_path: str = ""
    ca_path: str = ""
    # TLS to peers even without a certificate or CA file, against the system's store.
    system_trust: bool = False

    @property
    def serving(self) -> bool:
        """True when this component's servers speak TLS."""
        return bool(self.cert_chain)

    @property
    def calling(self) -> bool:
        """True when calls to peers use TLS."""
        return bool(self.cert_chain or self.roots or self.system_trust)

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if not self.serving:
            return None
        return grpc.ssl_server_credentials(
            [(self.private_key, self.cert_chain)],
            root_certificates=self.roots or None,
            require_client_auth=self.client_auth,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        if not self.calling:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.roots or None,
            private_key=self.private_key or None,
            certificate_chain=self.cert_chain or None,
        )

    def channel_options(self, target: str = "") -> list[tuple[str, Any]]:
        """Options a channel to ``target`` needs besides its credentials. A list of
        replicas (``ipv4:a:1,b:2``, reachstore_server/common/channels.py) has no one name to check
        the certificates against: without ``server_name``, its first host's."""
        if not self.calling:
            return []
        name = self.server_name or _first_host(target)
        return [("grpc.ssl_target_name_override", name)] if name else []

    def client_ssl_context(self) -> ssl.SSLContext:
        """For HTTPS calls to the bridge (`up` waits on its health page this way)."""
        context = ssl.create_default_context(cafile=self.ca_path or None)
        if self.cert_path:
            context.load_cert_chain(self.cert_path, self.key_path)
        return context


PLAIN = TlsFiles()


def secure_channel(
    target: str, tls: TlsFiles, options: list[tuple[str, Any]] | None = None
) -> grpc.Channel:
    """A blocking channel to a peer: TLS when ``tls`` calls for it, plain text otherwise."""
    options = [*(options or []), *tls.channel_options(target)]
    credentials = tls.channel_credentials()
    if credentials is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, credentials, options=options)


def secure_aio_channel(
    target: str, tls: TlsFiles, options: list[tuple[str, Any]] | None = None
) -> grpc.aio.Channel:
    """The ``grpc.aio`` form of ``secure_channel``."""
    options = [*(options or []), *tls.channel_options(target)]
    credentials = tls.channel_credentials()
    # With tracing on, every call gets a client span and carries its traceparent.
    interceptors = otel.client_interceptors()
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(target, credentials, options=options, interceptors=interceptors)


def _first_host(target: str) -> str:
    """The host of the first address of an ``ipv4:``/``ipv6:`` list; "" for any other
    target, whose own name gRPC checks."""
    scheme, _, rest = target.partition(":")
    if scheme not in ("ipv4", "ipv6") or not rest:
        return ""
    first = rest.split(",")[0]
    return first.rpartition(":")[0].strip("[]")


def _read(name: str, path: str) -> bytes:
    if not path:
        return b""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read {path!r} ({exc.strerror or exc})") from None
    if b"-----BEGIN " not in data:
        raise ConfigError(f"{name}: {path!r} is not a PEM file")
    return data


def load_tls(
    paths: Mapping[str, str],
    *,
    client_auth: bool = False,
    server_name: str = "",
    names: tuple[str, str, str] = (CERT_FILE, KEY_FILE, CA_FILE),
) -> TlsFiles:
    """Reads and checks the PEM files at ``paths["cert"]``, ``["key"]`` and ``["ca"]``
    (each may be empty); errors name the setting as ``names`` call them (the variables,
    or a channel's keys)."""
    cert_name, key_name, ca_name = names
    cert_path, key_path, ca_path = (paths.get(k, "").strip() for k in ("cert", "key", "ca"))
    cert, key, roots = (
        _read(cert_name, cert_path),
        _read(key_name, key_path),
        _read(ca_name, ca_path),
    )
    if bool(cert) != bool(key):
        raise ConfigError(f"{cert_name} and {key_name} must be set together")
    if cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(cert_path, key_path)
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(
                f"{key_name}: {key_path!r} is not the private key of {cert_path!r} ({exc})"
            ) from None
    if roots:
        try:
            ssl.create_default_context(cafile=ca_path)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"{ca_name}: {ca_path!r} holds no usable certificate ({exc})"
            ) from None
    return TlsFiles(
        cert_chain=cert,
        private_key=key,
        roots=roots,
        client_auth=client_auth,
        server_name=server_name,
        cert_path=cert_path,
        key_path=key_path,
        ca_path=ca_path,
    )


def tls_from_env(env: Mapping[str, str]) -> TlsFiles:
    """Reads and checks the TLS settings; raises ``ConfigError`` naming the setting."""
    mode = env.get(CLIENT_AUTH, "").strip().lower() or "none"
    if mode not in CLIENT_AUTH_MODES:
        modes = ", ".join(CLIENT_AUTH_MODES)
        raise ConfigError(f"{CLIENT_AUTH} must be one of {modes}, got {mode!r}")
    files = load_tls(
        {"cert": env.get(CERT_FILE, ""), "key": env.get(KEY_FILE, ""), "ca": env.get(CA_FILE, "")},
        client_auth=mode == "require",
        server_name=env.get(SERVER_NAME, "").strip(),
    )
    if files.client_auth and not (files.serving and files.roots):
        raise ConfigError(
            f"{CLIENT_AUTH}=require needs {CERT_FILE}, {KEY_FILE} and {CA_FILE}: the servers "
            "check callers' certificates against the CA file, and the services show their own "
            "certificate to each other"
        )
    return files

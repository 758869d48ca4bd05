"""Certificate authorities and certificates the TLS tests make for themselves.

``python -m tests.e2e.tls_certs FOLDER`` writes the same set for the TypeScript client's
tests: ``ca.pem``, ``server.pem``/``server.key`` (for 127.0.0.1, ::1, localhost and
``reachstore.test``), ``client.pem``/``client.key`` (signed by the same CA), and
``other-ca.pem`` with ``other-client.pem``/``other-client.key`` (a CA nobody trusts).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAMES = ("127.0.0.1", "::1", "localhost", "reachstore.test")


@dataclasses.dataclass(frozen=True)
class Authority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(common_name: str) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(cert, key)


def _alt_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def issue(ca: Authority, common_name: str, names: tuple[str, ...] = ()) -> Authority:
    """A leaf certificate signed by ``ca``, good for serving ``names`` and as a client."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_alt_name(n) for n in names]), critical=False
        )
    return Authority(builder.sign(ca.key, hashes.SHA256()), key)


def _write(folder: Path, stem: str, pair: Authority, with_key: bool = True) -> None:
    (folder / f"{stem}.pem").write_bytes(pair.cert.public_bytes(serialization.Encoding.PEM))
    if with_key:
        (folder / f"{stem}.key").write_bytes(
            pair.key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


@dataclasses.dataclass(frozen=True)
class CertSet:
    folder: Path

    def path(self, name: str) -> str:
        return str(self.folder / name)

    @property
    def ca(self) -> str:
        return self.path("ca.pem")

    def up_args(self, *more: str) -> tuple[str, ...]:
        """``reachstore up``'s flags to serve TLS with this set's server certificate, its CA
        trusted (the services call each other over TLS too), then ``more``."""
        return (
            "--tls-cert",
            self.path("server.pem"),
            "--tls-key",
            self.path("server.key"),
            "--tls-ca",
            self.ca,
            *more,
        )


def write_cert_set(folder: Path, server_names: tuple[str, ...] = SERVER_NAMES) -> CertSet:
    folder.mkdir(parents=True, exist_ok=True)
    ca = make_ca("reachstore test CA")
    _write(folder, "ca", ca, with_key=False)
    _write(folder, "server", issue(ca, "reachstore services", server_names))
    _write(folder, "client", issue(ca, "reachstore test client"))
    other = make_ca("an authority nobody trusts")
    _write(folder, "other-ca", other, with_key=False)
    _write(folder, "other-client", issue(other, "an untrusted client"))
    _write(folder, "other-server", issue(other, "an untrusted server", server_names))
    return CertSet(folder)


if __name__ == "__main__":
    write_cert_set(Path(sys.argv[1]))

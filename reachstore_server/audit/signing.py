"""Checkpoint keys: the Ed25519 key pair the audit service signs chain heads with, the
public key that is all a verifier needs, and the HMAC key of older deployments, still
accepted for the checkpoints it signed.

Where the keys come from (``keys_from_env``):

- the private key: ``REACHSTORE_AUDIT_SIGNING_KEY`` (the PEM text, e.g. an environment
  variable filled from a Kubernetes secret) or ``REACHSTORE_AUDIT_SIGNING_KEY_FILE`` (a
  PEM file, e.g. a secret mounted as a volume); only the audit service needs it;
- the public key: ``REACHSTORE_AUDIT_PUBLIC_KEY`` (PEM text) or
  ``REACHSTORE_AUDIT_PUBLIC_KEY_FILE``; derived from the private key when only that is
  given;
- the legacy HMAC key: ``REACHSTORE_AUDIT_KEY`` (the ``audit.key`` that `reachstore up`
  used to keep in the data folder). It signs nothing any more; it only checks the
  checkpoints it signed, and only those before the chain's first Ed25519 checkpoint
  (``reachstore_server/audit/verify.py``), so holding it does not let anyone add new ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from reachstore_server.audit.chain import Signer, canonical_json
from reachstore_server.common.config_errors import ConfigError

ED25519_PREFIX = "ed25519:"
HMAC_PREFIX = "hmac-sha256:"
SIGNING_KEY = "REACHSTORE_AUDIT_SIGNING_KEY"
SIGNING_KEY_FILE = "REACHSTORE_AUDIT_SIGNING_KEY_FILE"
PUBLIC_KEY = "REACHSTORE_AUDIT_PUBLIC_KEY"
PUBLIC_KEY_FILE = "REACHSTORE_AUDIT_PUBLIC_KEY_FILE"
LEGACY_KEY = "REACHSTORE_AUDIT_KEY"


def checkpoint_message(tenant: str, seq: int, head_hash: str, signed_at: str) -> bytes:
    """What a checkpoint's signature covers (the same encoding the HMAC checkpoints use)."""
    return canonical_json([tenant, seq, head_hash, signed_at]).encode("utf-8")


def public_key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return ED25519_PREFIX + hashlib.sha256(raw).hexdigest()[:16]


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def private_pem(private: Ed25519PrivateKey) -> str:
    return private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")


class PublicKey:
    """Checks Ed25519 signatures: all a verifier needs, and safe to hand out."""

    def __init__(self, public: Ed25519PublicKey) -> None:
        self._public = public
        self.key_id = public_key_id(public)

    def verify_bytes(self, message: bytes, signature: str) -> bool:
        try:
            self._public.verify(bytes.fromhex(signature), message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def verify(self, tenant: str, seq: int, head_hash: str, signed_at: str, signature: str) -> bool:
        return self.verify_bytes(checkpoint_message(tenant, seq, head_hash, signed_at), signature)

    def pem(self) -> str:
        return public_pem(self._public)

    def __repr__(self) -> str:
        return f"PublicKey({self.key_id})"


class PrivateKey:
    """Signs checkpoints and witness lines with Ed25519; the signature is 128 hex digits."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        self.public = PublicKey(private.public_key())
        self.key_id = self.public.key_id

    @classmethod
    def generate(cls) -> PrivateKey:
        return cls(Ed25519PrivateKey.generate())

    def sign_bytes(self, message: bytes) -> str:
        return self._private.sign(message).hex()

    def sign(self, tenant: str, seq: int, head_hash: str, signed_at: str) -> str:
        return self.sign_bytes(checkpoint_message(tenant, seq, head_hash, signed_at))

    def pem(self) -> str:
        return private_pem(self._private)

    def __repr__(self) -> str:  # never the key itself
        return f"PrivateKey({self.key_id})"


@dataclasses.dataclass(frozen=True)
class CheckpointKeys:
    """What a verifier checks checkpoints with: the public key, and the legacy HMAC key
    when one is at hand (without it, an HMAC checkpoint cannot be checked and counts as
    forged)."""

    public: PublicKey
    legacy: Signer | None = None

    def check(
        self, key_id: str, tenant: str, seq: int, head_hash: str, signed_at: str, signature: str
    ) -> str | None:
        """None when the signature verifies, else why not (in words)."""
        if key_id.startswith(HMAC_PREFIX):
            if self.legacy is None:
                return f"it is HMAC-signed ({key_id}) and no {LEGACY_KEY} is at hand to check it"
            if self.legacy.verify(tenant, seq, head_hash, signed_at, signature):
                return None
            return "its HMAC signature does not verify"
        if key_id != self.public.key_id:
            return f"it names the key {key_id}, not the audit public key {self.public.key_id}"
        if self.public.verify(tenant, seq, head_hash, signed_at, signature):
            return None
        return f"its signature does not verify with {self.public.key_id}"


def _load_private(text: str, source: str) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(text.encode("utf-8"), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: not a PEM private key without a passphrase ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{source}: the audit signing key must be an Ed25519 key")
    return PrivateKey(key)


def _load_public(text: str, source: str) -> PublicKey:
    try:
        key = serialization.load_pem_public_key(text.encode("utf-8"))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"{source}: the audit public key must be an Ed25519 key")
    return PublicKey(key)


def _text(env: Mapping[str, str], variable: str, file_variable: str) -> tuple[str, str] | None:
    """The PEM text from ``variable`` or the file ``file_variable`` names, with where it
    came from; None when neither is set. Both set is a mistake, not a choice."""
    inline, path = env.get(variable, ""), env.get(file_variable, "")
    if inline and path:
        raise ConfigError(f"set {variable} or {file_variable}, not both")
    if inline:
        return inline, variable
    if not path:
        return None
    try:
        return Path(path).read_text(), f"{file_variable}={path}"
    except OSError as exc:
        raise ConfigError(f"{file_variable}: cannot read {path}: {exc.strerror}") from None


def private_key_from_env(env: Mapping[str, str]) -> PrivateKey:
    found = _text(env, SIGNING_KEY, SIGNING_KEY_FILE)
    if found is None:
        raise ConfigError(
            f"neither {SIGNING_KEY} nor {SIGNING_KEY_FILE} is set: the audit service needs "
            "the Ed25519 private key to sign checkpoints (`reachstore up` makes one in the "
            "data folder; `reachstore audit keygen` writes a pair)"
        )
    key = _load_private(*found)
    public = public_key_from_env(env, required=False)
    if public is not None and public.key_id != key.key_id:
        raise ConfigError(
            f"{PUBLIC_KEY}/{PUBLIC_KEY_FILE} ({public.key_id}) is not the public half of "
            f"the signing key ({key.key_id})"
        )
    return key


def public_key_from_env(env: Mapping[str, str], required: bool = True) -> PublicKey | None:
    """The public key set in ``env``, else the one derived from the private key there."""
    found = _text(env, PUBLIC_KEY, PUBLIC_KEY_FILE)
    if found is not None:
        return _load_public(*found)
    private = _text(env, SIGNING_KEY, SIGNING_KEY_FILE)
    if private is not None:
        return _load_private(*private).public
    if required:
        raise ConfigError(
            f"no audit public key: set {PUBLIC_KEY_FILE} (or {PUBLIC_KEY}, or the private "
            f"key's {SIGNING_KEY_FILE})"
        )
    return None


def legacy_key_from_env(env: Mapping[str, str]) -> Signer | None:
    key = env.get(LEGACY_KEY, "")
    return Signer(key.encode("utf-8")) if key else None


def write_key_pair(private_path: Path, public_path: Path) -> PrivateKey:
    """A new key pair: the private key readable by its owner only, never overwritten."""
    key = PrivateKey.generate()
    private_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key.pem())
    public_path.write_text(key.public.pem())
    return key

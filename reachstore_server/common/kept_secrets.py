"""Secrets `reachstore up` makes once and keeps in the data folder, readable by the owner
only, unless the environment sets them: the PII masking key and the audit signing key
pair. The command line reads them from the same place.

The audit key pair kept here is for local use: whoever can read the data folder can sign
checkpoints with it. A deployment keeps the private key elsewhere (README "Audit").
``audit.key``, the HMAC key of older versions, is no longer made; when a folder still has
one it is passed on so the checkpoints it signed keep verifying.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

KEPT_SECRETS = {"REACHSTORE_PII_SECRET": "pii.secret"}
AUDIT_SIGNING_KEY_FILE = "audit_signing.pem"
AUDIT_PUBLIC_KEY_FILE = "audit_signing.pub"
AUDIT_WITNESS_FILE = "audit_witness.jsonl"
LEGACY_AUDIT_KEY_FILE = "audit.key"


def kept_secret(data_dir: Path, file_name: str) -> str:
    """A secret `up` keeps in the data folder (made once, readable by the owner only), so
    masked values stay joinable across restarts."""
    path = data_dir / file_name
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    return path.read_text().strip()


def secret_for(variable: str, data_dir: Path) -> str:
    """The environment's value of ``variable``, else the one kept in ``data_dir``."""
    return os.environ.get(variable) or kept_secret(data_dir, KEPT_SECRETS[variable])

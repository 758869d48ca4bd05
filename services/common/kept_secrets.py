"""Secrets `reachstore up` makes once and keeps in the data folder, readable by the owner
only, unless the environment sets them: the PII masking key and the audit signing key.
The command line reads them from the same place."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

KEPT_SECRETS = {"REACHSTORE_PII_SECRET": "pii.secret", "REACHSTORE_AUDIT_KEY": "audit.key"}


def kept_secret(data_dir: Path, file_name: str) -> str:
    """A secret `up` keeps in the data folder (made once, readable by the owner only), so
    masked values stay joinable and checkpoints verifiable across restarts."""
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
